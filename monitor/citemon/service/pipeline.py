"""The monitor's work loop: fetch → decode → sample → judge → deliver with the commit → count.

Guarantees, and how each is kept:

* **Bounded work.** At most ``max_inflight_answers`` answers are being scored (a semaphore),
  and at most ``max_uncommitted_records`` records are fetched but not committed. Each fetch asks
  for no more records than there are free slots; when there are none, every assigned partition
  is paused (the client stops prefetching too) and resumed below a low-water mark, while
  ``getmany`` keeps being called so the consumer stays in its group. Memory is flat however long
  the backlog is.
* **Nothing lost, nothing counted twice.** Offsets commit only over the finished prefix of a
  partition (:class:`~citemon.service.delivery.OffsetTracker`). Results and dead letters are
  produced
  *with* the commit (one Kafka transaction when a results topic is set), and the Prometheus
  counters are incremented only *after* the commit succeeded: an answer whose offset did not
  commit before a crash is scored again by the next owner and counted once, there. The price is
  that counters lag the judge by up to one ``commit_interval_s``; a ``kill -9`` landing between
  the commit's acknowledgement and the increments (no ``await`` in between) can undercount that
  one commit's answers, never overcount. Redeliveries within a process (a producer retry that
  wrote a span twice, a rebalance that hands a partition back) are dropped by (trace ID, span
  ID) in a bounded LRU window of committed answers.
* **A judge outage holds the line.** An answer that comes back with judge failures is not
  finished: it is tried again. When *no* judge request succeeded during its attempt, the judge is
  taken to be down (:class:`JudgeGate`): answers stop calling it, one probe answer at a time is
  let through with exponential backoff, and the attempt is not charged to the answer. Slots stay
  full, partitions stay paused, lag grows, and when the judge is back every answer is scored.
  Only failures while the judge is otherwise answering (this answer's own problem) spend the
  ``max_answer_attempts`` budget; after it the answer is recorded with its ``unjudged`` claims,
  which are counted.
* **Poison goes aside.** A payload that does not decode is dead-lettered (original key and
  value, the reason in the ``citemon.error`` header) and counted; its offset commits like any
  other, so the stream keeps flowing. A whole record batch the Kafka client cannot decode (a
  codec it lacks, a bad CRC) makes ``getmany`` raise: the partition is re-read from where the
  intake stands (:mod:`citemon.service.batches`), its decodable records are taken, and the bad batch
  alone is dead-lettered whole (raw bytes, reason ``unsupported_codec`` or ``corrupt_batch``),
  committed past and counted. Partitions whose records that failed call dropped are rewound.
* **The shuffle canary stays out of the way.** With ``canary_rate`` > 0, an answer picked by
  its trace ID (:mod:`citemon.checks.shuffle_probe`) has its rotated citations checked *after*
  its real score is handed to the commit, in a task of its own: at most
  ``max_inflight_canaries`` at once (default ``max_inflight_answers``; more are dropped and
  counted), one attempt, every error
  caught and counted, never retried, cancelled at shutdown. It shares the judge (and so its
  cap on requests in flight) and skips while the judge is down; it cannot fail, delay or
  change the real answer, and its scores reach only the canary's own metrics.
* **Nothing fails silently.** The commit loop (which also ticks the trace assembler), the lag
  loop and the metrics server are supervised (:meth:`Pipeline.supervise`): one that ends
  before shutdown (a bug's exception, a closed listener) turns ``/healthz`` to 503, stops
  intake, drains and makes :meth:`Pipeline.run` raise :class:`~citemon.core.errors.MonitorFailed`
  with the cause logged, so ``citemon run`` exits 1 instead of stalling with a healthy probe
  while intake pauses forever behind an uncommitted backlog.
* **Rebalances and shutdown.** On revoke: stop taking records of those partitions, discard the
  traces the assembler holds with a part there (their records stay unfinished, so the next
  owner reads and assembles them again; nothing of them is scored or counted here), wait up to
  ``revoke_timeout_s`` for their answers, commit what is finished, cancel the rest (the next
  owner redoes it). On stop (SIGTERM): stop intake, drain up to ``drain_timeout_s``, commit, log
  the counts. The commit and closing the clients get ``close_timeout_s`` more: with the broker
  away they would wait for it, so past that the process exits uncommitted, as after a kill.
* **Counted exactly once across owners** (DESIGN "Counting guarantee"). A count follows only
  a commit the broker accepted, and the broker accepts a partition's commit only from its
  current owner: with a results topic, each input partition has its own transactional
  producer whose ID (``<prefix>-<topic>-<partition>``) every replica shares, opened at
  assignment, so the new owner's ``init_transactions`` fences a replaced one (frozen past its
  session timeout, then woken) before the new owner reads the committed offset; a fenced
  commit drops that partition's work uncounted (:meth:`Pipeline._lose`). Without a results
  topic the offset commit carries the group generation, which the group coordinator checks.
  Neither leaves a window between a check and the commit: the commit is the check. See
  :class:`~citemon.service.delivery.KafkaDelivery`.

Why one module (about 1,100 lines): :class:`Pipeline` is one state machine. Intake, pause and
resume, decode slices, scoring tasks, the ordered commit inside its transaction, the rebalance
callbacks and the drain all read and write the same per-partition state under one invariant (a
record's output is produced, and its offset committed, only after every earlier record of its
partition); split across files, that invariant would have no single place to be read. What has
an idea of its own is elsewhere: :mod:`~citemon.service.gate`, :mod:`~citemon.service.dedupe`,
:mod:`~citemon.service.offsets`, :mod:`~citemon.service.delivery`, :mod:`~citemon.service.batches`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaConnectionError, KafkaError, ProducerFenced

from citemon.checks.shuffle_probe import probe_selected as canary_selected
from citemon.checks.shuffle_probe import shuffled_check
from citemon.core.errors import DecodeError, JudgeError, KafkaUnavailable, MonitorFailed
from citemon.core.probe import cited_counts
from citemon.core.records import AnswerRecord, AnswerScore
from citemon.engine.excerpts import recut
from citemon.engine.scoring import Scorer
from citemon.metrics import Metrics
from citemon.otlp.assembly import TraceAssembler
from citemon.otlp.decoding import decode_otlp
from citemon.service.batches import UNDECODABLE, BadBatch, disable_codecs, scan_partition
from citemon.service.dedupe import DedupeWindow, Key
from citemon.service.delivery import KafkaDelivery
from citemon.service.entries import Entry, OutMessage, Ready
from citemon.service.gate import GateObserver, JudgeGate, judge_failed
from citemon.service.offsets import OffsetTracker
from citemon.service.review import review_message
from citemon.service.sampling import Sampler
from citemon.service.settings import Settings

__all__ = ["ERROR_HEADER", "FAULT_ENV", "Pipeline", "PipelineStats"]

log = logging.getLogger(__name__)

ERROR_HEADER: Final = "citemon.error"
"""DLQ header holding the reason code (a ``DecodeError.reason``, or ``score_error``)."""
ERROR_MESSAGE_HEADER: Final = "citemon.error.message"
SOURCE_HEADER: Final = "citemon.source"
"""``topic/partition/offset`` of the dead-lettered record."""
_MAX_ERROR_MESSAGE_BYTES: Final = 512
FAULT_ENV: Final = "CITEMON_TEST_FAULT"
"""Test-only fault hook: ``citemon-commit@S`` or ``citemon-lag@S`` makes that background loop
raise ``RuntimeError`` once S seconds have passed since start-up (how the process tests make a
supervised task die; nothing else reads it)."""
_RESUME_FRACTION: Final = 0.75  # resume partitions when work falls below this share of a cap
_POLL_MS: Final = 200
_DECODE_SLICE_S: Final = 0.02  # decoding a fetch yields to the loop this often
_CLOSE_GRACE_S: Final = 1.0  # per client, once the close deadline has passed
_UNLOCATED_BACKOFF_S: Final = 1.0  # an undecodable fetch whose bad batch a re-read did not find


class _Faults:
    """:data:`FAULT_ENV`, parsed once: which loop fails, and when."""

    def __init__(self, spec: str | None, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._name: str | None = None
        self._at = 0.0
        if spec:
            name, _, after = spec.partition("@")
            self._name, self._at = name, clock() + float(after or 0)

    def check(self, name: str) -> None:
        if name == self._name and self._clock() >= self._at:
            raise RuntimeError(f"fault injected by {FAULT_ENV} into {name}")


@dataclass(slots=True)
class PipelineStats:
    """What the pipeline did; logged at shutdown (the metrics hold the same, per label)."""

    records: int = 0
    answers_started: int = 0
    answers_committed: int = 0
    sampled_out: int = 0
    skipped: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    answer_retries: int = 0
    unjudged_after_retries: int = 0
    commits: int = 0
    commit_failures: int = 0
    cancelled_at_drain: int = 0
    cancelled_at_revoke: int = 0
    rebalances: int = 0
    undecodable_batches: int = 0
    rewound_partitions: int = 0
    partitions_lost: int = 0


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance callbacks, forwarded to the pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._pipeline._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._pipeline._on_assigned(list(assigned))


class Pipeline:
    """``citemon run``'s engine. ``await pipeline.run(stop)`` until ``stop`` is set.

    ``metrics``, ``scorer`` and the judge inside it are passed in; when the judge was built with
    ``observer=pipeline.judge_observer(metrics.judge)`` the outage detection sees every request.
    """

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        metrics: Metrics,
        *,
        sampler: Sampler | None = None,
        assembler: TraceAssembler | None = None,
        gate: JudgeGate | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_inflight_canaries: int | None = None,
        close_timeout_s: float = 10.0,
        on_counted: Callable[[AnswerScore, str | None], None] | None = None,
    ) -> None:
        self.settings = settings
        self.scorer = scorer
        self.metrics = metrics
        self.sampler = sampler or Sampler(
            rate=settings.sample_rate,
            budget_per_minute=settings.budget_per_minute,
            max_keys=settings.max_budget_keys,
        )
        self.assembler = (
            assembler if assembler is not None else TraceAssembler(window_s=settings.trace_window_s)
        )
        self.gate = gate or JudgeGate(
            backoff_s=settings.answer_retry_backoff_s,
            backoff_max_s=settings.answer_retry_backoff_max_s,
            clock=clock,
        )
        self.stats = PipelineStats()
        self._clock = clock
        self._tracker: OffsetTracker[Any] = OffsetTracker()
        self._dedupe = DedupeWindow(settings.dedupe_window)
        self._slots = asyncio.Semaphore(settings.max_inflight_answers)
        self._jobs: dict[asyncio.Task[None], frozenset[Any]] = {}
        self._job_traces: dict[asyncio.Task[None], str] = {}  # a job's trace ID, if any
        self._work_changed = asyncio.Event()
        self._parts: OrderedDict[str, tuple[float, list[Entry[Any]]]] = OrderedDict()
        self._assigned: set[Any] = set()
        self._revoking: set[Any] = set()
        # Assigned partitions whose transactional producer is not yet open (records ignored)
        # and, once it is, the committed offset read after it fenced the previous owner.
        self._opening: set[Any] = set()
        self._floor: dict[Any, int] = {}
        # Per partition: how often it was sought; a fetch made before a seek is stale there.
        self._seeks: dict[Any, int] = {}
        self._paused = False
        self._ends: dict[Any, int] = {}
        self._commit_lock = asyncio.Lock()
        self._consumer: Any = None
        self._delivery: KafkaDelivery | None = None
        # Per assigned partition: one past the last record taken (where intake stands), and
        # the client that re-reads a partition after an undecodable batch (made on first use).
        self._taken_to: dict[Any, int] = {}
        self._scan_client: Any = None
        self._fatal: BaseException | None = None
        self._started = False
        self._max_inflight_canaries = max_inflight_canaries or settings.max_inflight_answers
        self._canaries: set[asyncio.Task[None]] = set()
        self._closing = False
        self._faults = _Faults(os.environ.get(FAULT_ENV), clock)
        metrics.watch_traces(self._trace_outcomes)
        # After the drain: the last commit and closing the clients. aiokafka retries both for
        # as long as the broker is away, so without a deadline a SIGTERM during a broker
        # restart waited for the broker (drain 30 s + this 10 s stays inside Kubernetes' 45 s).
        self._close_timeout_s = close_timeout_s
        self._skip_final_commit = False
        # Called with each answer (and its span ID) once counted: the evaluation events.
        self._on_counted = on_counted

    # -- probes --------------------------------------------------------------------------------

    def judge_observer(self, inner: Any) -> GateObserver:
        return GateObserver(inner, self.gate)

    @property
    def ready(self) -> bool:
        """For ``/readyz``: running, with partitions assigned."""
        return self._started and bool(self._assigned - self._opening) and self._fatal is None

    @property
    def live(self) -> bool:
        return self._fatal is None

    def _trace_outcomes(self) -> dict[str, int]:
        """The assembler's outcome counts, read at scrape time (``citemon_traces_total``)."""
        a = self.assembler
        return {
            "completed": a.completed,
            "settled": a.settled,
            "dropped_incomplete": a.dropped_incomplete,
            "evicted": a.evicted,
            "superseded": a.superseded,
            "unrecognized": a.unrecognized,
            "no_passages": a.no_passages,
            "no_answer": a.no_answer,
        }

    # -- supervision ---------------------------------------------------------------------------

    def supervise(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """Watch a task that must run until shutdown; its ending before then is fatal."""
        task.add_done_callback(self._supervised_done)
        return task

    def stop_supervising(self) -> None:
        """Shutdown has begun: supervised tasks may end now (``run`` calls it itself)."""
        self._closing = True

    def _supervised_done(self, task: asyncio.Task[Any]) -> None:
        if self._closing:
            return
        name = task.get_name()
        if task.cancelled():
            cause: BaseException | None = None
            what = "was cancelled"
        else:
            cause = task.exception()
            what = f"died: {cause!r}" if cause is not None else "returned"
        error = MonitorFailed(f"background task {name} {what}; the monitor stops")
        error.__cause__ = cause
        log.error(
            "background task %s %s: /healthz is now unhealthy, intake stops and the process "
            "exits non-zero",
            name,
            what,
            exc_info=cause,
        )
        if self._fatal is None:
            self._fatal = error
        self._work_changed.set()

    @property
    def inflight(self) -> int:
        return len(self._jobs)

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> PipelineStats:
        """Consume until ``stop`` is set (or a fatal Kafka error), then drain and commit."""
        s = self.settings
        disable_codecs()  # test-only hook; a no-op unless CITEMON_TEST_DISABLE_CODECS is set
        consumer = AIOKafkaConsumer(
            **s.kafka_options(),
            group_id=s.group,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_bytes=s.fetch_max_bytes,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
            max_poll_records=s.max_poll_records,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(100, s.session_timeout_ms // 4),
        )
        delivery = KafkaDelivery(s, consumer)
        # Set before the consumer starts: the assignment callback opens producers with them.
        self._consumer = consumer
        self._delivery = delivery
        try:
            await delivery.start()
            consumer.subscribe([s.topic], listener=_Listener(self))
            await consumer.start()
        except KafkaConnectionError as exc:
            await delivery.stop()
            await consumer.stop()
            # aiokafka reports a refused login as a failed bootstrap too (its own log says which).
            raise KafkaUnavailable(
                f"cannot connect to Kafka at {s.bootstrap_servers} (unreachable, or TLS/SASL "
                f"rejected the client): {exc}"
            ) from exc
        except BaseException:
            await delivery.stop()
            await consumer.stop()
            raise
        self._started = True
        log.info(
            "consuming %s as group %s (%s)",
            s.topic,
            s.group,
            "exactly-once results" if delivery.transactional else "at-least-once",
        )
        background = [
            self.supervise(asyncio.create_task(self._commit_loop(stop), name="citemon-commit")),
            self.supervise(asyncio.create_task(self._lag_loop(stop), name="citemon-lag")),
        ]
        try:
            await self._intake(consumer, stop)
        finally:
            self._started = False
            await self._drain()
            await self._stop_canaries()
            self._closing = True
            deadline = asyncio.get_running_loop().time() + self._close_timeout_s
            await self._stop_background(background, deadline)
            await self._close(background, delivery, consumer, deadline)
            log.info("citemon run stopped: %s; %r", asdict(self.stats), self.sampler)
        if self._fatal is not None:
            raise self._fatal
        return self.stats

    async def _close(
        self,
        background: list[asyncio.Task[None]],
        delivery: KafkaDelivery,
        consumer: Any,
        deadline: float,
    ) -> None:
        """The final commit within ``close_timeout_s``, then close the clients.

        Past the deadline (the broker is away) nothing more is committed and each client gets
        ``_CLOSE_GRACE_S`` to close before it is abandoned: as after a ``kill -9``, the next
        owner scores the uncommitted answers, and its transactional ID fences ours, aborting
        the transaction left open.
        """
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.gather(*background, return_exceptions=True)
                try:
                    await self._final_commit()
                except Exception:  # the bug that killed the commit loop may strike here too
                    log.exception("the final commit failed; the next owner scores the rest")
        except TimeoutError:
            log.error(
                "Kafka did not answer within %.0f s of shutdown: stopping without the final "
                "commit (%d fetched records uncommitted; the next owner scores them)",
                self._close_timeout_s,
                len(self._tracker),
            )
        clients = [("producer", delivery.stop), ("consumer", consumer.stop)]
        if self._scan_client is not None:
            clients.append(("batch re-read client", self._scan_client.close))
        for name, stop in clients:
            try:
                async with asyncio.timeout_at(max(deadline, loop.time() + _CLOSE_GRACE_S)):
                    await stop()
            except TimeoutError:
                log.warning("closing the Kafka %s timed out; abandoning it", name)

    async def _drain(self) -> None:
        if self._consumer is not None and self._assigned:
            with contextlib.suppress(Exception):
                self._consumer.pause(*self._assigned)
        if self._jobs:
            log.info(
                "draining %d answers in flight (up to %.0f s)",
                len(self._jobs),
                self.settings.drain_timeout_s,
            )
            _, pending = await asyncio.wait(list(self._jobs), timeout=self.settings.drain_timeout_s)
            for task in pending:
                task.cancel()
            self.stats.cancelled_at_drain += len(pending)
            await asyncio.gather(*pending, return_exceptions=True)

    async def _stop_canaries(self) -> None:
        """Cancel canaries still running: they hold no offsets, so nothing is lost."""
        for task in list(self._canaries):
            task.cancel()
        await asyncio.gather(*self._canaries, return_exceptions=True)

    async def _stop_background(self, background: list[asyncio.Task[None]], deadline: float) -> None:
        """Cancel the commit and lag loops, but never in the middle of a commit.

        A transaction cancelled while its commit is on the wire may still commit at the broker
        while its entries stay unconfirmed here: the final commit would then publish the same
        results again. So wait for the commit lock; if a commit holds it past ``deadline`` (the
        close deadline: the broker is away), cancel anyway and skip the final commit, exiting
        as after a kill: the partition's next owner finds that transaction complete or aborted
        before it reads the offset. The counters may then undercount, never overcount: answers
        are counted only once their commit is confirmed, and a transaction that completed
        unconfirmed is neither counted here nor read again by the next owner."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._commit_lock.acquire()
        except TimeoutError:
            self._skip_final_commit = True
            for task in background:
                task.cancel()
            return
        try:
            for task in background:
                task.cancel()
        finally:
            self._commit_lock.release()

    async def _final_commit(self) -> None:
        if self._skip_final_commit:
            log.warning("a commit was cut short at shutdown: skipping the final commit")
            return
        for _ in range(3):
            if await self.commit():
                return
            await asyncio.sleep(0.2)

    # -- intake --------------------------------------------------------------------------------

    def _free(self) -> int:
        s = self.settings
        return min(
            s.max_inflight_answers - len(self._jobs),
            s.max_uncommitted_records - len(self._tracker),
        )

    def _below_low_water(self) -> bool:
        s = self.settings
        return (
            len(self._jobs) < s.max_inflight_answers * _RESUME_FRACTION
            and len(self._tracker) < s.max_uncommitted_records * _RESUME_FRACTION
        )

    def _set_paused(self, consumer: Any, paused: bool) -> None:
        if paused == self._paused:
            if paused:  # partitions assigned since we paused must pause too
                fresh = self._assigned - set(consumer.paused())
                if fresh:
                    consumer.pause(*fresh)
            return
        self._paused = paused
        if paused:
            consumer.pause(*self._assigned)
            log.info("work is full (%d answers in flight): partitions paused", len(self._jobs))
        else:
            consumer.resume(*consumer.paused())
            log.info("partitions resumed")

    async def _intake(self, consumer: Any, stop: asyncio.Event) -> None:
        max_poll = self.settings.max_poll_records
        while not stop.is_set() and self._fatal is None:
            free = self._free()
            if free <= 0:
                self._set_paused(consumer, True)
            elif self._paused and self._below_low_water():
                self._set_paused(consumer, False)
            elif self._paused:
                self._set_paused(consumer, True)
            try:
                batches = await consumer.getmany(
                    timeout_ms=_POLL_MS, max_records=max(1, min(max_poll, free))
                )
            except UNDECODABLE as exc:
                await self._skip_undecodable(consumer, exc)
                continue
            await self._take_all(batches)

    async def _take_all(self, batches: dict[Any, list[Any]]) -> None:
        """Decode one fetch, yielding to the loop every ``_DECODE_SLICE_S``: a full fetch
        (``fetch_max_bytes``, 8 MB of small spans) is up to ~0.2 s of decoding, which would
        stall heartbeats and ``/healthz``. A rebalance during a yield drops the rest of the
        fetch: it revokes every partition (eager protocol) and the new assignment fetches
        from the committed offsets, so nothing is lost and nothing is taken twice.

        A partition sought during a yield (:meth:`_open_partitions`) has the rest of its
        records dropped: the next fetch delivers them again from where it was sought. Only
        that partition's (the others' positions are past their records), and only seeks
        after the fetch returned: aiokafka itself drops records fetched before a seek when
        ``getmany`` drains them, and those it returns after one are from the new position
        (dropping them too would lose them)."""
        loop = asyncio.get_running_loop()
        rebalances = self.stats.rebalances
        seeks = dict(self._seeks)  # no await since getmany returned
        until = loop.time() + _DECODE_SLICE_S
        for tp, records in batches.items():
            for record in records:
                if loop.time() >= until:
                    await asyncio.sleep(0)
                    if self.stats.rebalances != rebalances:
                        return
                    until = loop.time() + _DECODE_SLICE_S
                if self._seeks.get(tp, 0) != seeks.get(tp, 0):
                    break
                self._take(tp, record)

    def _take(self, tp: Any, rec: Any) -> None:
        if tp not in self._assigned or tp in self._revoking or tp in self._opening:
            return  # fetched before a revoke: the next owner reads it from the committed offset
        if rec.offset < self._floor.get(tp, -1):
            return  # fetched before the seek to the offset committed under the last owner
        self.stats.records += 1
        self._taken_to[tp] = rec.offset + 1
        entry = self._tracker.add(tp, rec.offset, rec.timestamp)
        try:
            self._decode_into(entry, rec)
        finally:
            self._tracker.release(entry)
            self._work_changed.set()

    async def _skip_undecodable(self, consumer: Any, exc: BaseException) -> None:
        """``getmany`` raised on a batch it cannot decode: find it, take what precedes it,
        dead-letter it, seek past it (see :mod:`citemon.service.batches`).

        aiokafka does not say which partition failed, and the failed call dropped the records
        it had already drained from other partitions (their positions moved): so every
        assigned partition is put back where the intake stands and re-read from there.
        Partitions still opening are left out: their records are ignored until
        :meth:`_open_partitions` seeks them to the committed offset, where a bad batch is
        met (and skipped) again; a skip entry added now would precede the records read
        after that seek, and the tracker would refuse them.
        """
        s = self.settings
        log.warning("a fetched batch does not decode (%s): locating it", exc)
        found = 0
        try:
            if self._scan_client is None:
                from aiokafka.client import AIOKafkaClient

                client = AIOKafkaClient(**s.kafka_options(), client_id=f"{s.client_id}-reread")
                try:
                    await client.bootstrap()
                except BaseException:
                    await client.close()
                    raise
                self._scan_client = client
            rereading = self._assigned - self._revoking - self._opening
            for tp in sorted(rereading, key=lambda t: t.partition):
                found += await self._reread(consumer, tp)
        except (KafkaError, OSError, TimeoutError) as err:
            log.warning("re-reading after an undecodable batch failed, will retry: %r", err)
            found = -1
        if found <= 0:
            if found == 0:
                log.warning("no undecodable batch found on re-reading; fetching again")
            await asyncio.sleep(_UNLOCATED_BACKOFF_S)

    async def _reread(self, consumer: Any, tp: Any) -> int:
        """Rewind ``tp`` to where intake stands and skip a bad batch there; 1 if one was."""
        start = self._taken_to.get(tp)
        if start is None:  # nothing taken since assignment: intake stands at the commit
            committed = await consumer.committed(tp)
            if committed is None:  # auto_offset_reset="earliest"
                committed = (await consumer.beginning_offsets([tp]))[tp]
            start = committed
        if await consumer.position(tp) != start:
            consumer.seek(tp, start)  # records the failed getmany drained and dropped
            self._sought(tp)
            self.stats.rewound_partitions += 1
        scan = await scan_partition(
            self._scan_client, tp, start, max_bytes=self.settings.max_partition_fetch_bytes
        )
        if (
            scan.bad is None
            or tp not in self._assigned
            or tp in self._revoking
            or tp in self._opening
        ):
            return 0  # nothing to skip, or revoked (and maybe reassigned) meanwhile
        for rec in scan.good:
            self._take(tp, rec)
        self._skip_batch(tp, scan.bad)
        consumer.seek(tp, scan.bad.next_offset)
        self._sought(tp)
        return 1

    def _sought(self, tp: Any) -> None:
        """``tp`` was sought: records of it fetched before are stale (see :meth:`_take_all`)."""
        self._seeks[tp] = self._seeks.get(tp, 0) + 1

    def _skip_batch(self, tp: Any, bad: BadBatch) -> None:
        """One tracker entry at the batch's last offset carries its dead letter, so the commit
        moves past the whole batch once everything before it is finished."""
        log.error(
            "skipping undecodable batch %s/%d offsets %d-%d (%s, %s): dead-lettered",
            bad.topic,
            bad.partition,
            bad.base_offset,
            bad.last_offset,
            bad.codec,
            bad.error,
        )
        self.stats.undecodable_batches += 1
        self._taken_to[tp] = bad.next_offset
        entry = self._tracker.add(tp, bad.last_offset, bad.timestamp_ms)
        headers = [
            (ERROR_HEADER, bad.reason.encode()),
            (ERROR_MESSAGE_HEADER, bad.error.encode()[:_MAX_ERROR_MESSAGE_BYTES]),
        ]
        entry.messages.append(bad.dead_letter(self.settings.dlq_topic, headers))
        entry.dead_letters.append(bad.reason)
        self._tracker.release(entry)
        self._work_changed.set()

    def _decode_into(self, entry: Entry[Any], rec: Any) -> None:
        try:
            batch = decode_otlp(rec.value or b"")
        except DecodeError as exc:
            if exc.reason == "no_answer_spans":
                self.metrics.span("skipped")
                self.stats.skipped += 1
            else:
                self.metrics.span("invalid")
                self._dead_letter(entry, rec.key, rec.value or b"", exc.reason, str(exc))
            return
        if batch.errors:
            self.metrics.span("invalid", len(batch.errors))
            first = batch.errors[0]
            self._dead_letter(
                entry,
                rec.key,
                rec.value,
                first.reason,
                f"{len(batch.errors)} of {batch.span_count} spans failed; first: {first}",
                partial=True,
            )
        if batch.skipped:
            self.metrics.span("skipped", batch.skipped)
            self.stats.skipped += batch.skipped
        for record in batch.records:
            self._admit(record, [entry], entry.timestamp_ms)
        if batch.spans:
            now = self._clock()
            for span in batch.spans:
                if span.answered or (span.documents is None and span.answer is None):
                    continue
                _, held = self._parts.setdefault(span.trace_id, (now, []))
                held.append(entry)
                self._tracker.hold(entry)
            for record in self.assembler.add(batch.spans):
                self._admit_assembled(record, entry.timestamp_ms)

    def _admit_assembled(self, record: AnswerRecord, timestamp_ms: int) -> None:
        """Score an assembled trace with the Kafka records of its parts, which hold it.

        A trace with no record behind it (its partition was revoked or lost) is not scored:
        nothing could commit it, and counting it here would count it a second time where its
        partition's new owner reads it again. Revoking discards such traces from the
        assembler (:meth:`_drop_held`), so this is a guard, not a path."""
        _, held = self._parts.pop(record.trace_id or "", (0.0, []))
        if not held:
            log.warning(
                "trace %s assembled with no Kafka record behind it: not scored", record.trace_id
            )
            return
        try:
            self._admit(record, held, timestamp_ms)
        finally:
            for e in held:
                self._tracker.release(e)

    def _tick_assembler(self) -> None:
        """Score traces the assembler settled by time; release the parts of traces it no
        longer holds (dropped incomplete, evicted, superseded, or a late part of a trace
        already answered): their records are finished and may commit."""
        self.assembler.expire()
        for record in self.assembler.take_ready():
            self._admit_assembled(record, -1)
        for tid in [t for t in self._parts if t not in self.assembler]:
            _, held = self._parts.pop(tid)
            for e in held:
                self._tracker.release(e)
        self._work_changed.set()

    def _drop_held(self, tps: set[Any]) -> None:
        """Discard the traces held for assembly that have a part in ``tps`` (being revoked or
        lost): they are never scored here, and their records there stay unfinished, so no
        offset commits past them and the partition's next owner assembles them again. (Spans
        of one trace share a partition when the exporter keys them by trace ID, as
        ``deploy/otel-collector.yaml`` does; parts of a discarded trace elsewhere are
        released.)"""
        doomed = [tid for tid, (_, held) in self._parts.items() if any(e.tp in tps for e in held)]
        self.assembler.discard(doomed)
        for tid in doomed:
            _, held = self._parts.pop(tid)
            for e in held:
                if e.tp not in tps:
                    self._tracker.release(e)

    def _admit(self, record: AnswerRecord, entries: list[Entry[Any]], timestamp_ms: int) -> None:
        key = (record.trace_id, record.span_id)
        if key != (None, None) and key in self._dedupe:
            self.metrics.span("skipped")
            self.stats.duplicates += 1
            return
        now_s = timestamp_ms / 1000 if timestamp_ms >= 0 else time.time()
        if not self.sampler.by_trace_id(record.trace_id) or not self.sampler.by_budget(
            record.service, record.version, now_s
        ):
            self.metrics.span("sampled_out")
            self.stats.sampled_out += 1
            return
        self.metrics.span("answer")
        self.stats.answers_started += 1
        for e in entries:
            self._tracker.hold(e)
        task = asyncio.create_task(self._job(record, entries))
        self._jobs[task] = frozenset(e.tp for e in entries)
        if record.trace_id:
            self._job_traces[task] = record.trace_id
        task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.pop(task, None)
        self._job_traces.pop(task, None)
        self._work_changed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("answer job failed", exc_info=task.exception())

    # -- scoring -------------------------------------------------------------------------------

    async def _job(self, record: AnswerRecord, entries: list[Entry[Any]]) -> None:
        # A cancelled job (drain deadline, revoke) must leave its records unfinished, so their
        # offsets never commit and the next owner scores them: no release on cancellation.
        cancelled = False
        score: AnswerScore | None = None
        try:
            async with self._slots:
                try:
                    score = await self._score(record)
                except Exception as exc:  # a scorer bug must not stop the stream
                    log.exception("scoring failed; dead-lettering the answer")
                    if entries:
                        value = record.model_dump_json().encode()
                        key = (record.trace_id or "").encode() or None
                        self._dead_letter(entries[-1], key, value, "score_error", repr(exc))
                    return
            # Counted only when this entry's offset commits; an answer whose entries all died
            # (revoked, lost) is counted by the partition's next owner, not here.
            home = max((e for e in entries if e.alive), key=lambda e: e.offset, default=None)
            if home is not None:
                home.scores.append((score, record.span_id))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            if not cancelled:
                for e in entries:
                    self._tracker.release(e)
        if score is not None:
            self._maybe_canary(record, score)

    # -- the shuffle canary --------------------------------------------------------------------

    def _maybe_canary(self, record: AnswerRecord, score: AnswerScore) -> None:
        """Start the canary of a scored answer when its trace ID picks it."""
        if not canary_selected(record.trace_id, self.settings.canary_rate):
            return
        if judge_failed(score) or self.gate.down:
            self.metrics.canary("failed", trace_id=record.trace_id)
            return
        if len(self._canaries) >= self._max_inflight_canaries:
            self.metrics.canary("dropped", trace_id=record.trace_id)
            return
        task = asyncio.create_task(self._canary(record, score), name="citemon-canary")
        self._canaries.add(task)
        task.add_done_callback(self._canaries.discard)

    async def _canary(self, record: AnswerRecord, score: AnswerScore) -> None:
        try:
            shuffled = await shuffled_check(self.scorer, record)
        except JudgeError as exc:
            log.info("shuffle canary: judge failed (%s); not counted", type(exc).__name__)
            self.metrics.canary("failed", trace_id=record.trace_id)
            return
        except Exception:  # the canary must never take anything down with it
            log.warning("shuffle canary failed", exc_info=True)
            self.metrics.canary("failed", trace_id=record.trace_id)
            return
        if shuffled is None:
            self.metrics.canary("skipped", trace_id=record.trace_id)
        else:
            original = cited_counts(score)
            self.metrics.record_canary(original, shuffled, trace_id=record.trace_id)

    async def _score(self, record: AnswerRecord) -> AnswerScore:
        s = self.settings
        attempts = 0
        while True:
            probe = await self.gate.acquire()
            started = self._clock()
            try:
                score = await self.scorer.score(record)
            except asyncio.CancelledError:
                if probe:
                    self.gate.report(ok=False, started=float("inf"), probe=True)
                raise
            failed = judge_failed(score)
            if not failed and score.judge_calls == 0:
                # Nothing was asked (no claims, nothing retrieved): no evidence either way.
                self.gate.release(probe)
                return score
            outage = self.gate.report(ok=not failed, started=started, probe=probe)
            if not failed:
                return score
            if outage:
                continue  # the gate holds us until the judge answers again; no attempt spent
            attempts += 1
            if attempts >= s.max_answer_attempts:
                self.stats.unjudged_after_retries += 1
                return score
            self.stats.answer_retries += 1
            delay = min(
                s.answer_retry_backoff_s * 2 ** (attempts - 1), s.answer_retry_backoff_max_s
            )
            await asyncio.sleep(delay)

    # -- dead letters and results --------------------------------------------------------------

    def _dead_letter(
        self,
        entry: Entry[Any],
        key: bytes | None,
        value: bytes,
        reason: str,
        message: str,
        *,
        partial: bool = False,
    ) -> None:
        headers = [
            (ERROR_HEADER, reason.encode()),
            (ERROR_MESSAGE_HEADER, message.encode()[:_MAX_ERROR_MESSAGE_BYTES]),
            (SOURCE_HEADER, f"{entry.tp.topic}/{entry.tp.partition}/{entry.offset}".encode()),
        ]
        if partial:
            headers.append(("citemon.partial", b"true"))
        entry.messages.append(OutMessage(self.settings.dlq_topic, key, value, tuple(headers)))
        entry.dead_letters.append(reason)

    def _result(self, score: AnswerScore, span_id: str | None) -> OutMessage | None:
        topic = self.settings.results_topic
        if topic is None:
            return None
        body = score.model_dump(mode="json")
        body["span_id"] = span_id
        if self.settings.results_excerpt_chars:
            body["excerpts"] = recut(score.evidence, self.settings.results_excerpt_chars)
        return OutMessage(
            topic,
            (score.trace_id or "").encode() or None,
            json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        )

    # -- commits -------------------------------------------------------------------------------

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            self._faults.check("citemon-commit")
            self._tick_assembler()
            if self._opening:
                await self._open_partitions()
            await self.commit()

    async def commit(self) -> bool:
        """Deliver and commit every partition's finished prefix; count it once committed.

        Each partition commits on its own (its own transaction with a results topic); returns
        False when any failed (retried on the next tick). A partition whose producer was
        fenced has a new owner: its uncommitted work is dropped, uncounted (:meth:`_lose`).
        """
        delivery = self._delivery
        if delivery is None:
            return True
        async with self._commit_lock:
            ready = [
                r
                for r in self._tracker.ready()
                if r.tp in self._assigned and delivery.is_open(r.tp)
            ]
            if not ready:
                return True
            batches = self._outputs(ready)
            outcomes = await delivery.deliver([(r, messages) for r, messages, _ in batches])
            ok = True
            fenced: set[Any] = set()
            broken: set[Any] = set()
            for r, _, counted in batches:
                error = outcomes.get(r.tp)
                if isinstance(error, ProducerFenced):
                    fenced.add(r.tp)
                    continue
                if error is not None and delivery.broken(r.tp):
                    broken.add(r.tp)
                    continue
                if error is not None:
                    ok = False
                    self.stats.commit_failures += 1
                    log.warning(
                        "commit failed, will retry (partition %d): %s",
                        r.tp.partition,
                        type(error).__name__,
                    )
                    if not isinstance(error, KafkaError | OSError | TimeoutError):
                        log.error("unexpected commit error", exc_info=error)
                    continue
                self._confirmed(r, counted)
            if fenced:
                self._lose(fenced, "have a new owner (our transactional producer was fenced)")
                ok = False
            if broken:
                self._lose(broken, "lost their transactional producer to a fatal client error")
                ok = False
            self._publish_lag()
            self._work_changed.set()
            return ok

    def _confirmed(self, r: Ready[Any], counted: list[tuple[AnswerScore, Key]]) -> None:
        """``r`` committed: forget its entries and count what it carried (no ``await``)."""
        self._tracker.confirm([r])
        self.stats.commits += 1
        for score, key in counted:
            self._dedupe.add(key)
            self.metrics.record_answer(score)
            if self._on_counted is not None:
                self._on_counted(score, key[1])
        self.stats.answers_committed += len(counted)
        for e in r.entries:
            for reason in e.dead_letters:
                self.metrics.dead_letter(reason)
                self.stats.dead_letters += 1

    def _publish_lag(self) -> dict[Any, int]:
        lags: dict[Any, int] = {}
        for tp, end in self._ends.items():
            committed = self._tracker.committed(tp)
            if tp in self._assigned and committed is not None:
                lags[tp] = max(0, end - committed)
                self.metrics.consumer_lag(tp.topic, tp.partition, lags[tp])
        return lags

    def _outputs(
        self, ready: Iterable[Ready[Any]]
    ) -> list[tuple[Ready[Any], list[OutMessage], list[tuple[AnswerScore, Key]]]]:
        """Per partition: the messages to produce with its commit, and the scores to count
        after it (deduplicated against the window and within the batch)."""
        out: list[tuple[Ready[Any], list[OutMessage], list[tuple[AnswerScore, Key]]]] = []
        batch_keys: set[Key] = set()
        for r in ready:
            messages: list[OutMessage] = []
            counted: list[tuple[AnswerScore, Key]] = []
            for e in r.entries:
                messages.extend(e.messages)
                for score, span_id in e.scores:
                    key = (score.trace_id, span_id)
                    if key != (None, None) and (key in self._dedupe or key in batch_keys):
                        self.stats.duplicates += 1
                        continue
                    batch_keys.add(key)
                    counted.append((score, key))
                    result = self._result(score, span_id)
                    if result is not None:
                        messages.append(result)
                    review = review_message(score, span_id, self.settings)
                    if review is not None:
                        messages.append(review)
            out.append((r, messages, counted))
        return out

    # -- rebalances ----------------------------------------------------------------------------

    async def _on_revoked(self, revoked: list[Any]) -> None:
        """Before a rebalance: finish what is in flight for ``revoked`` (up to
        ``revoke_timeout_s``), commit it, and forget the rest, traces held for assembly
        included, so nothing of those partitions is ever counted here afterwards."""
        self.stats.rebalances += 1
        gone = set(revoked)
        if not gone:
            return
        self._revoking |= gone
        self._drop_held(gone)
        deadline = self._clock() + self.settings.revoke_timeout_s
        while self._jobs_in(gone) and self._clock() < deadline:
            self._work_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._work_changed.wait(), max(0.01, deadline - self._clock())
                )
        await self.commit()
        self._forget(gone)
        if self._delivery is not None:
            async with self._commit_lock:
                await self._delivery.close(gone)
        self._assigned -= gone
        self._opening -= gone
        for tp in gone:
            self._ends.pop(tp, None)
            self._floor.pop(tp, None)
            self.metrics.forget_partition(tp.topic, tp.partition)
        log.info("partitions revoked: %s", sorted(tp.partition for tp in gone))

    def _jobs_in(self, tps: set[Any]) -> bool:
        return any(job_tps & tps for job_tps in self._jobs.values())

    def _forget(self, tps: set[Any]) -> None:
        """Cancel the answers of ``tps`` and drop their uncommitted records (uncounted).

        The assembler forgets those answers' trace IDs (cancelled jobs, and scores finished
        but not committed): otherwise, when a partition comes back to this replica, its
        re-read parts would be ignored as "already answered" and committed past, unscored.
        Only these IDs: the assembler does not know partitions, and forgetting every answered
        ID would let late parts of traces answered elsewhere (or by a self-contained
        ``rag.answer`` span, under another span ID) be scored a second time."""
        dropped: set[str] = set()
        for task, job_tps in list(self._jobs.items()):
            if job_tps & tps:
                task.cancel()
                self.stats.cancelled_at_revoke += 1
                if task in self._job_traces:
                    dropped.add(self._job_traces[task])
        for entry in self._tracker.revoke(tps):
            dropped.update(score.trace_id for score, _ in entry.scores if score.trace_id)
        self.assembler.forget_answered(dropped)

    def _lose(self, tps: set[Any], why: str) -> None:
        """Our producer of ``tps`` can no longer commit: fenced (another replica owns them
        now; we were frozen or cut off past the session timeout) or broken for good. Drop
        their work uncounted, take no more of their records, and ask the group for a fresh
        assignment: a partition assigned to us again gets a new producer there, the one place
        where initialising its transactional ID cannot fence its real owner."""
        log.error(
            "partitions %s %s: dropping their uncommitted work, uncounted, and rejoining the group",
            sorted(tp.partition for tp in tps),
            why,
        )
        self.stats.partitions_lost += len(tps)
        self._revoking |= tps
        self._drop_held(tps)
        self._forget(tps)
        coordinator = getattr(self._consumer, "_coordinator", None)
        request_rejoin = getattr(coordinator, "request_rejoin", None)
        if callable(request_rejoin):
            request_rejoin()

    async def _on_assigned(self, assigned: list[Any]) -> None:
        for tp in assigned:  # a new owner's intake starts at the committed offset
            self._taken_to.pop(tp, None)
        fresh = set(assigned)
        self._assigned |= fresh
        self._revoking -= fresh
        self._tracker.assign(assigned)
        if self._delivery is not None and self._delivery.transactional:
            self._opening |= fresh
        if self._paused and self._consumer is not None and assigned:
            self._consumer.pause(*assigned)
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))
        if self._opening:
            await self._open_partitions()

    async def _open_partitions(self) -> None:
        """Open the transactional producers of newly assigned partitions, then read their
        committed offsets and seek there.

        The order closes the race with a frozen previous owner: ``init_transactions`` fences
        it and waits for its last transaction to complete or abort, so the offset read
        *afterwards* includes everything it managed to commit (aiokafka fetched a committed
        offset already, concurrently with this callback, which may predate that commit).
        Records of a partition are ignored until then; one that fails to open (the broker is
        away) is retried on the next commit tick.
        """
        delivery, consumer = self._delivery, self._consumer
        if delivery is None or consumer is None:
            return
        async with self._commit_lock:
            tps = sorted(self._opening & self._assigned, key=lambda tp: tp.partition)
            outcomes = await asyncio.gather(
                *(delivery.open(tp) for tp in tps), return_exceptions=True
            )
            for tp, out in zip(tps, outcomes, strict=True):
                if tp not in self._opening:
                    continue  # revoked meanwhile
                if isinstance(out, BaseException):
                    log.warning(
                        "opening the producer of partition %d failed, will retry: %s",
                        tp.partition,
                        type(out).__name__,
                    )
                    continue
                try:
                    committed = await consumer.committed(tp)
                    if committed is None:
                        await consumer.seek_to_beginning(tp)
                    else:
                        consumer.seek(tp, committed)
                    self._sought(tp)
                except (KafkaError, OSError, TimeoutError) as exc:
                    log.warning(
                        "reading the committed offset of partition %d failed, will retry: %s",
                        tp.partition,
                        type(exc).__name__,
                    )
                    continue
                if committed is not None:
                    self._floor[tp] = committed
                    self._tracker.set_committed(tp, committed)
                self._opening.discard(tp)
            self._work_changed.set()

    # -- lag -----------------------------------------------------------------------------------

    async def _lag_loop(self, stop: asyncio.Event) -> None:
        while True:
            self._faults.check("citemon-lag")
            try:
                await self.update_lag()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.info("lag update failed: %s", type(exc).__name__)
            await asyncio.sleep(self.settings.lag_interval_s)

    async def update_lag(self) -> dict[Any, int]:
        """Set ``citemon_consumer_lag`` for every assigned partition: log end − committed."""
        consumer = self._consumer
        tps = [tp for tp in self._assigned if tp not in self._revoking]
        if consumer is None or not tps:
            return {}
        ends = await consumer.end_offsets(tps)
        missing = [tp for tp in tps if self._tracker.committed(tp) is None]
        if missing:
            starts = await consumer.beginning_offsets(missing)
            for tp in missing:
                committed = await consumer.committed(tp)
                self._tracker.set_committed(tp, starts[tp] if committed is None else committed)
        self._ends = {tp: ends[tp] for tp in tps}
        return self._publish_lag()
