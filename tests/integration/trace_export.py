"""What the trace generators share (dialect_traces, agent_traces, native_traces): the registry of
their cases, a tracer provider exporting into memory and encoding what it caught as OTLP
protobuf, a local JSON HTTP server standing in for a model's API, and writing every case's
trace (``OUTDIR/<case>.pb``) with the versions it was made with (``OUTDIR/versions.json``).

Imported by the generators only, in their child process (and by native_traces in the
opentelemetry-instrumentation-openai-v2 venv): the standard library and the OpenTelemetry SDK
only, the SDK imported where it is used.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any, Self

#: A case: makes one trace and returns it, encoded.
Case = Callable[[], bytes]


class Cases(dict[str, Case]):
    """A generator's cases by name, in the order they were registered."""

    def case(self, name: str) -> Callable[[Case], Case]:
        """Register the decorated function as case ``name``."""

        def register(fn: Case) -> Case:
            self[name] = fn
            return fn

        return register


@contextmanager
def captured() -> Iterator[tuple[Any, Callable[[], bytes]]]:
    """A tracer provider exporting into memory, and a function encoding what it caught."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rag-bot", "service.version": "2026.11.3"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def encoded() -> bytes:
        return bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())

    yield provider, encoded
    provider.shutdown()


@contextmanager
def instrumented(instrumentor: Any) -> Iterator[Callable[[], bytes]]:
    """:func:`captured`, with ``instrumentor`` tracing into its provider for the block."""
    with captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider)
        try:
            yield encoded
        finally:
            instrumentor.uninstrument()


def traced(instrumentor: Any, call: Callable[[], None]) -> bytes:
    """The trace of ``call()`` as ``instrumentor`` records it, encoded once it is uninstrumented."""
    with captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider)
        try:
            call()
        finally:
            instrumentor.uninstrument()
        return encoded()


class JsonServer:
    """A 127.0.0.1 HTTP server answering every POST with the JSON :meth:`respond` makes of the
    request, serving on a thread of its own while entered."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = json.dumps(owner.respond(self.path, json.loads(body or b"{}"))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass  # the SDKs' requests are not the test's output

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def respond(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def versions(packages: Collection[str], absent: str | None = None) -> dict[str, str]:
    """The installed version of each of ``packages``; one not installed is left out, or given
    as ``absent``."""
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if absent is not None:
                found[name] = absent
    return found


def write_cases(
    out: Path, cases: Cases, selected: Callable[[str], bool], made_with: dict[str, str]
) -> int:
    """Write each ``selected`` case's trace as ``out/<case>.pb`` and ``made_with`` (the
    versions) as ``out/versions.json``; the exit code."""
    out.mkdir(parents=True, exist_ok=True)
    for name, make in cases.items():
        if selected(name):
            (out / f"{name}.pb").write_bytes(make())
    (out / "versions.json").write_text(json.dumps(made_with, indent=1))
    return 0
