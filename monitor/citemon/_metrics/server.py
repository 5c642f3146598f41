"""The HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on the monitor's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT: Final = 9464
"""The port of ``/metrics`` (the OpenTelemetry Prometheus exporter's default)."""


_MAX_REQUEST_HEAD_BYTES: Final = 16 * 1024


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one asyncio server (stdlib only).

    It runs on the monitor's own event loop on purpose: if the loop is stuck, ``/healthz``
    stops answering and the liveness probe restarts the pod — a server in a thread would keep
    saying "alive" for a dead pipeline. ``/metrics`` speaks OpenMetrics when the scraper asks
    for it (Prometheus does), which is the only format that carries exemplars.

    ``live`` and ``ready`` are cheap callables the pipeline owns: ``/healthz`` is 200 while
    ``live()`` is true, ``/readyz`` is 200 only while ``ready()`` is (partitions assigned).
    Use ``async with MetricsServer(...) as server``; ``server.port`` is the bound port (pass
    ``port=0`` in tests).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_METRICS_PORT,
        ready: Callable[[], bool] = lambda: True,
        live: Callable[[], bool] = lambda: True,
        read_timeout_s: float = 5.0,
    ) -> None:
        self._registry = registry
        self._host = host
        self._port = port
        self._ready = ready
        self._live = live
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def task(self) -> asyncio.Task[None]:
        """The task serving requests: it ends only when the server closes (give it to
        :meth:`citemon._service.pipeline.Pipeline.supervise`)."""
        if self._task is None:
            raise RuntimeError("server not started")
        return self._task

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self._host, self._port, limit=_MAX_REQUEST_HEAD_BYTES
        )
        self._task = asyncio.create_task(self._server.serve_forever(), name="citemon-metrics")
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening and hang up on clients still mid-request (a stalled scraper)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await asyncio.wait_for(
                    reader.readuntil(b"\r\n\r\n"), timeout=self._read_timeout_s
                )
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            status, ctype, body, head_only = self._respond(head.decode("latin-1"))
            writer.write(
                (
                    f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode("latin-1")
            )
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the scraper went away; nothing to tell it
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _respond(self, head: str) -> tuple[str, str, bytes, bool]:
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        text = "text/plain; charset=utf-8"
        if len(parts) != 3:
            return "400 Bad Request", text, b"bad request\n", False
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, b"method not allowed\n", False
        head_only = method == "HEAD"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            accept = ""
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "accept":
                    accept = value.strip()
            encoder, ctype = choose_encoder(accept)
            return "200 OK", ctype, encoder(self._registry), head_only
        if path == "/healthz":
            ok = self._live()
            return _probe(ok, "alive" if ok else "not alive", head_only)
        if path == "/readyz":
            ok = self._ready()
            return _probe(ok, "ready" if ok else "not ready", head_only)
        return "404 Not Found", text, b"not found\n", head_only


def _probe(ok: bool, word: str, head_only: bool) -> tuple[str, str, bytes, bool]:
    status = "200 OK" if ok else "503 Service Unavailable"
    return status, "text/plain; charset=utf-8", f"{word}\n".encode(), head_only
