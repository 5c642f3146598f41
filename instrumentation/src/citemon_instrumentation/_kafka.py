"""``KafkaSpanExporter``: OTLP protobuf straight to Kafka, for services without a Collector.

Each message is an OTLP ``ExportTraceServiceRequest`` (the SDK's own ``encode_spans``) keyed by
the trace ID in lowercase hex, which is what the Collector's ``kafka`` exporter writes with
``encoding: otlp_proto`` and ``partition_traces_by_id: true``. The spans of one trace go in one
message unless that message would exceed ``max_message_bytes``; then they are split into
several messages with the same key, so they still land on one partition, in order.

Why aiokafka on a private event loop: the SDK calls ``export`` from its ``BatchSpanProcessor``
worker thread and expects it to return within a bounded time; aiokafka (already a dependency of
the monitor) is async-only, so the exporter owns one daemon thread running one asyncio loop and
hands it each batch with a deadline. The host's own threads and event loops are never touched,
and a broker outage costs at most ``timeout_s`` per batch (retried inside that window with
backoff), is counted, and returns ``FAILURE`` — the SDK then drops the batch, as for any exporter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "DEFAULT_TIMEOUT_S", "KafkaSpanExporter"]

_log = logging.getLogger("citemon_instrumentation.kafka")

DEFAULT_TIMEOUT_S: Final = 10.0
"""Per-``export`` deadline, as the OTLP exporters' ``OTEL_EXPORTER_OTLP_TIMEOUT`` default; well
inside the ``BatchSpanProcessor``'s 30 s export timeout (which the SDK does not pass down)."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 1_000_000
"""Kafka's default ``message.max.bytes`` (and the Collector's ``producer.max_message_bytes``)."""
_GRACE_S: Final = 1.0  # waiting on the loop thread beyond the coroutine's own deadline
_CANCEL_WAIT_S: Final = 0.5  # shutdown: how long cancelled exports get to unwind

_Message = tuple[bytes, bytes, int]  # key, value, span count


class KafkaSpanExporter(SpanExporter):
    """An OpenTelemetry ``SpanExporter`` writing OTLP protobuf to a Kafka topic.

    Use it behind a ``BatchSpanProcessor``::

        provider.add_span_processor(BatchSpanProcessor(KafkaSpanExporter("kafka:9092")))

    Counters (spans): ``exported_spans``, ``failed_spans`` (the broker did not take them within
    the deadline), ``dropped_spans`` (a single span larger than ``max_message_bytes``, or export
    after shutdown); ``exports_in_flight``, the exports running now. ``export`` never raises.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "otlp_spans",
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        retry_backoff_s: float = 0.2,
        max_retry_backoff_s: float = 2.0,
        client_id: str = "citemon-span-exporter",
        acks: int | str = 1,
        compression_type: str | None = None,
        producer_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self.retry_backoff_s = retry_backoff_s
        self.max_retry_backoff_s = max_retry_backoff_s
        self._producer_kwargs: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "client_id": client_id,
            "acks": acks,
            "compression_type": compression_type,
            "request_timeout_ms": max(1000, int(timeout_s * 1000)),
            "max_request_size": max(1_048_576, max_message_bytes + 65_536),
            "retry_backoff_ms": int(retry_backoff_s * 1000),
            **(producer_options or {}),
        }
        self._clock = clock
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._producer: Any = None  # aiokafka.AIOKafkaProducer, created on the loop thread
        self._start_lock: asyncio.Lock | None = None  # one producer start at a time (loop thread)
        self._shutdown = False
        # One future per export running now, from its start: done with True when every span was
        # acknowledged; force_flush waits on those that started before it.
        self._in_flight: set[concurrent.futures.Future[bool]] = set()
        self.exported_spans = 0
        self.failed_spans = 0
        self.dropped_spans = 0
        self.exported_messages = 0
        self.failed_exports = 0

    def __repr__(self) -> str:
        return (
            f"KafkaSpanExporter({self.bootstrap_servers!r}, topic={self.topic!r}, "
            f"exported={self.exported_spans}, failed={self.failed_spans}, "
            f"dropped={self.dropped_spans})"
        )

    # -- encoding (caller's thread) ------------------------------------------------------------

    def _messages(self, spans: Sequence[ReadableSpan]) -> tuple[list[_Message], int]:
        """One message per trace (split only when too large); also the spans dropped for size."""
        by_trace: dict[int, list[ReadableSpan]] = {}
        for s in spans:
            ctx = s.context
            by_trace.setdefault(ctx.trace_id if ctx is not None else 0, []).append(s)
        out: list[_Message] = []
        dropped = 0
        for trace_id, group in by_trace.items():
            dropped += self._encode(f"{trace_id:032x}".encode("ascii"), group, out)
        return out, dropped

    def _encode(self, key: bytes, group: list[ReadableSpan], out: list[_Message]) -> int:
        value = encode_spans(group).SerializeToString()
        if len(value) <= self.max_message_bytes:
            out.append((key, value, len(group)))
            return 0
        if len(group) == 1:
            _log.warning(
                "span larger than max_message_bytes=%d dropped (%d bytes)",
                self.max_message_bytes,
                len(value),
            )
            return 1
        half = len(group) // 2
        return self._encode(key, group[:half], out) + self._encode(key, group[half:], out)

    # -- the loop thread -----------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._shutdown:  # an export that raced shutdown must not start a new loop
                raise RuntimeError("exporter is shut down")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="citemon-kafka-exporter", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _start_producer(self, deadline: float) -> Any:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        # Concurrent exports (several threads, one loop) wait for one start instead of each
        # starting a producer of its own and leaking all but the last.
        async with self._start_lock:
            return await self._start_producer_locked(deadline)

    async def _start_producer_locked(self, deadline: float) -> Any:
        from aiokafka import AIOKafkaProducer
        from aiokafka.errors import KafkaError

        backoff = self.retry_backoff_s
        while True:
            if self._producer is not None:
                return self._producer
            producer = AIOKafkaProducer(**self._producer_kwargs)
            remaining = deadline - self._clock()
            try:
                await asyncio.wait_for(producer.start(), timeout=max(0.01, remaining))
                self._producer = producer
                return producer
            except (KafkaError, OSError, TimeoutError) as exc:
                await _quiet_stop(producer)
                remaining = deadline - self._clock()
                if remaining <= backoff:
                    raise TimeoutError(f"broker unreachable: {exc!r}") from exc
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_retry_backoff_s)

    async def _send(self, messages: list[_Message], deadline: float, tally: list[int]) -> None:
        """Send every message, retrying retriable failures with backoff until ``deadline``.

        Delivered spans are added to ``tally[0]`` as acks arrive, so a caller that cancels this
        at the deadline still knows what got through.
        """
        from aiokafka.errors import KafkaError

        pending = list(messages)
        backoff = self.retry_backoff_s
        while pending:
            producer = await self._start_producer(deadline)
            futures = [await producer.send(self.topic, value=v, key=k) for k, v, _ in pending]
            for fut in futures:
                # Once this coroutine is cancelled (deadline, shutdown) nobody awaits these:
                # retrieve their errors so asyncio logs no "exception was never retrieved".
                fut.add_done_callback(_retrieve)
            failed: list[_Message] = []
            for msg, fut in zip(pending, futures, strict=True):
                try:
                    await fut
                except (KafkaError, OSError) as exc:
                    if not getattr(exc, "retriable", True):
                        raise
                    failed.append(msg)
                else:
                    tally[0] += msg[2]
                    self.exported_messages += 1
            pending = failed
            if pending:
                if deadline - self._clock() <= backoff:
                    raise TimeoutError(f"{len(pending)} messages not acknowledged in time")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_retry_backoff_s)

    async def _send_until(
        self, messages: list[_Message], deadline: float, tally: list[int]
    ) -> None:
        await asyncio.wait_for(self._send(messages, deadline, tally), deadline - self._clock())

    @property
    def exports_in_flight(self) -> int:
        """Exports running now (encoding, or waiting on the broker)."""
        with self._lock:
            return len(self._in_flight)

    # -- SpanExporter --------------------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` to Kafka; ``SUCCESS`` only when the broker acknowledged all of them."""
        n = len(spans)
        if n == 0:
            return SpanExportResult.SUCCESS
        if self._shutdown:
            with self._lock:
                self.dropped_spans += n
            return SpanExportResult.FAILURE
        deadline = self._clock() + self.timeout_s
        tally = [0]
        dropped = 0
        running: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            self._in_flight.add(running)
        try:
            messages, dropped = self._messages(spans)
            if messages:
                loop = self._ensure_loop()
                fut = asyncio.run_coroutine_threadsafe(
                    self._send_until(messages, deadline, tally), loop
                )
                try:
                    fut.result(timeout=self.timeout_s + _GRACE_S)
                except concurrent.futures.TimeoutError:
                    fut.cancel()
                    raise TimeoutError("export did not finish in time") from None
        except Exception as exc:  # the broker, the encoder, anything: never into the host
            _log.warning("Kafka span export failed: %s: %s", type(exc).__name__, exc)
        finally:
            delivered = tally[0]
            with self._lock:
                self._in_flight.discard(running)
                self.exported_spans += delivered
                self.dropped_spans += dropped
                self.failed_spans += max(0, n - delivered - dropped)
                if delivered < n:
                    self.failed_exports += 1
            running.set_result(delivered == n)
        return SpanExportResult.SUCCESS if delivered == n else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait, within ``timeout_millis``, for every export already started to finish and for
        aiokafka's buffer to empty; ``True`` only if that happened in time and each of those
        exports had every span acknowledged.

        ``export`` itself waits for the broker's acks, so this holds nothing of its own: it waits
        for exports other threads have running, then flushes what an export that ran out of
        time left in the buffer."""
        timeout_s = max(0.0, timeout_millis / 1000)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            started = set(self._in_flight)
        done, not_done = concurrent.futures.wait(started, timeout=timeout_s)
        if not_done:
            _log.warning("Kafka span exporter flush incomplete: %d exports running", len(not_done))
            return False
        flushed = self._run_on_loop(self._flush(), max(0.0, deadline - time.monotonic()))
        return flushed and all(f.result() for f in done)

    async def _flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Stop the producer (flushing it) and the loop thread, within ``timeout_millis``.

        Exports still waiting on the broker are cancelled (they return ``FAILURE`` at once, their
        spans counted failed); a second call does nothing."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
        timeout_s = max(0.0, timeout_millis / 1000)
        deadline = time.monotonic() + timeout_s
        self._run_on_loop(self._stop(), timeout_s)
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(_cancel_all(_CANCEL_WAIT_S), loop)
            with contextlib.suppress(Exception):
                fut.result(timeout=_CANCEL_WAIT_S + _GRACE_S)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=max(0.1, deadline - time.monotonic()))
        if not thread.is_alive():
            loop.close()

    async def _stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await _quiet_stop(producer)

    def _run_on_loop(self, coro: Any, timeout_s: float) -> bool:
        loop = self._loop
        if loop is None or not loop.is_running():
            coro.close()
            return True
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout_s), loop)
        try:
            fut.result(timeout=timeout_s + _GRACE_S)
            return True
        except Exception as exc:
            _log.warning("Kafka span exporter flush/stop incomplete: %s", type(exc).__name__)
            return False


async def _cancel_all(wait_s: float) -> None:
    """Cancel every other task on this loop (exports in flight, a producer that would not stop)
    and give them ``wait_s`` to unwind, so none is destroyed pending when the loop closes."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=wait_s)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def _quiet_stop(producer: Any) -> None:
    # Stopping a producer that never connected may complain; there is nothing left to do.
    with contextlib.suppress(Exception):
        await producer.stop()
