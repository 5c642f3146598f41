"""The project's own OpenTelemetry Collector (``make collector``): find it, run it.

``citemon demo --via-collector`` and the integration tests run it the same way: the shipped
``deploy/otel-collector.yaml`` itself, merged with a small override file (``--config A --config
B``: maps merge, B wins) that changes only what two processes on one machine cannot share — the
OTLP ports, the topic, the Collector's own metrics (which would listen on :8888) — plus, where a
caller says so, the exporter's ``compression``. The broker address goes in through the shipped
file's own ``${env:KAFKA_BROKERS}``. The override is written as JSON, which is YAML, so this
needs no YAML library.

Where the binary comes from, first found wins: an explicit path, ``$CITEMON_COLLECTOR``, then
``deploy/collector.sh path`` (the build ``make collector`` caches under ``~/.cache/citemon``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from citemon._core.errors import ConfigError

__all__ = [
    "COLLECTOR_ENV",
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "CollectorError",
    "RunningCollector",
    "collector_binary",
    "deploy_dir",
    "free_port",
    "log_tail",
    "override",
    "run_collector",
]

COLLECTOR_ENV: Final = "CITEMON_COLLECTOR"
"""The Collector binary to run (default: what ``deploy/collector.sh path`` prints)."""

READY_TIMEOUT_S: Final = 30.0
"""How long the Collector may take to listen on both OTLP ports."""

STOP_TIMEOUT_S: Final = 15.0
"""How long it may take to flush its queue to Kafka after SIGTERM before it is killed."""

_LOG_TAIL_CHARS: Final = 3000


class CollectorError(ConfigError):
    """The Collector is missing, or exited or hung while starting (its log tail included)."""


def deploy_dir() -> Path:
    """The repository's ``deploy/`` (found upwards from this file, so a package move keeps it)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "deploy" / "otel-collector.yaml"
        if candidate.is_file():
            return candidate.parent
    raise CollectorError(
        "deploy/otel-collector.yaml not found above "
        f"{Path(__file__).resolve().parent}: the Collector path runs from a source checkout"
    )


def collector_binary(explicit: str | None = None) -> Path:
    """The Collector to run: ``explicit``, else ``$CITEMON_COLLECTOR``, else the built one.

    Raises :class:`CollectorError` naming ``make collector`` when there is none."""
    chosen = explicit or os.environ.get(COLLECTOR_ENV)
    if chosen:
        path = Path(chosen)
        if not (path.is_file() and os.access(path, os.X_OK)):
            source = "--collector" if explicit else f"${COLLECTOR_ENV}"
            raise CollectorError(
                f"{source} {chosen} is not an executable file "
                "(`make collector` builds one; `deploy/collector.sh path` prints where)"
            )
        return path
    script = deploy_dir() / "collector.sh"
    try:
        out = subprocess.run(
            [str(script), "path"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CollectorError(
            f"{script} path failed ({exc}); build the Collector with `make collector`"
        ) from None
    if out.returncode != 0 or not out.stdout.strip():
        why = out.stderr.strip() or "it printed nothing"
        raise CollectorError(
            f"the OpenTelemetry Collector is not built ({why}); build it with `make collector` "
            f"or point --collector / ${COLLECTOR_ENV} at an otelcol binary"
        )
    return Path(out.stdout.strip())


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def override(
    topic: str,
    grpc_port: int,
    http_port: int,
    compression: str | None,
    logs_topic: str | None = None,
) -> dict[str, Any]:
    """What a second Collector changes in the shipped config: ports, topics (the logs topic
    defaults to ``TOPIC.logs``), self-metrics (codec)."""
    kafka: dict[str, Any] = {
        "traces": {"topic": topic},
        "logs": {"topic": logs_topic or f"{topic}.logs"},
    }
    if compression is not None:
        kafka["producer"] = {"compression": compression}
    return {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"},
                    "http": {"endpoint": f"127.0.0.1:{http_port}"},
                }
            }
        },
        "exporters": {"kafka": kafka},
        # Its own metrics would listen on :8888; several Collectors run here at once.
        "service": {"telemetry": {"metrics": {"level": "none"}}},
    }


@dataclass(frozen=True)
class RunningCollector:
    grpc_endpoint: str
    """``127.0.0.1:PORT`` for ``OTLPSpanExporter(endpoint=..., insecure=True)`` (gRPC)."""
    http_endpoint: str
    """``http://127.0.0.1:PORT/v1/traces`` for the HTTP/protobuf exporter."""
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def http_base(self) -> str:
        """``http://127.0.0.1:PORT``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` for every signal."""
        return self.http_endpoint.removesuffix("/v1/traces")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def log_tail(path: Path) -> str:
    """The last few thousand characters of a Collector log (empty when unreadable)."""
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    return ""


@contextlib.contextmanager
def run_collector(
    binary: Path,
    workdir: Path,
    bootstrap: str,
    topic: str,
    *,
    compression: str | None = None,
    name: str = "otelcol",
    config: Path | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    logs_topic: str | None = None,
) -> Iterator[RunningCollector]:
    """The Collector on ``config`` (default the shipped one) + overrides, until the block ends.

    Spans go to ``topic``, logs (evaluation events) to ``logs_topic`` (default ``TOPIC.logs``).

    Its stdout and stderr go to ``workdir/NAME.log``; a Collector that exits or does not listen
    within ``ready_timeout_s`` raises :class:`CollectorError` with the log's tail. On the way out
    it gets SIGTERM (it flushes its queue to Kafka), then SIGKILL after ``STOP_TIMEOUT_S``."""
    config = config or deploy_dir() / "otel-collector.yaml"
    grpc_port, http_port = free_port(), free_port()
    overrides = workdir / f"{name}-overrides.yaml"
    overrides.write_text(
        json.dumps(override(topic, grpc_port, http_port, compression, logs_topic), indent=2)
    )
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                [str(binary), "--config", str(config), "--config", str(overrides)],
                env={**os.environ, "KAFKA_BROKERS": bootstrap},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session: a terminal's Ctrl-C reaches us, and we stop it in order.
                start_new_session=True,
            )
        except OSError as exc:
            raise CollectorError(f"cannot start the Collector {binary}: {exc}") from None
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not (_port_open(grpc_port) and _port_open(http_port)):
            if proc.poll() is not None:
                raise CollectorError(
                    f"the Collector exited ({proc.returncode}) while starting; "
                    f"its log ({log_path}):\n{log_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise CollectorError(
                    f"the Collector did not listen on 127.0.0.1:{grpc_port} and :{http_port} "
                    f"within {ready_timeout_s:g} s; its log ({log_path}):\n{log_tail(log_path)}"
                )
            time.sleep(0.1)  # polling a condition, with the deadline above
        yield RunningCollector(
            f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}/v1/traces", log_path, proc
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # it flushes its queue to Kafka on the way out
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
