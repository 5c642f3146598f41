"""One OTLP request holding several traces is split into one request per trace (the re-key
stage's transform), in its own encoding, each keeping its resource and scope."""

from __future__ import annotations

import json

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.errors import DecodeError
from citemon._otlp.split import split_by_trace
from tests.otlp_json import otlp_json


def _spans() -> list:  # type: ignore[type-arg]
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for name in ("a", "b"):
        with tracer.start_as_current_span(f"{name}-root"):
            tracer.start_span(f"{name}-child").end()
    return list(exporter.get_finished_spans())


def _names(payload: bytes) -> tuple[str, set[str], set[str]]:
    req = ExportTraceServiceRequest.FromString(payload)
    (rs,) = req.resource_spans
    service = next(
        kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"
    )
    spans = [s for ss in rs.scope_spans for s in ss.spans]
    return service, {s.name for s in spans}, {s.trace_id.hex() for s in spans}


def test_a_protobuf_request_of_two_traces_becomes_two() -> None:
    spans = _spans()
    pieces = split_by_trace(encode_spans(spans).SerializeToString())
    assert len(pieces) == 2
    got = {tid: _names(value) for tid, value in pieces.items()}
    for tid, (service, names, tids) in got.items():
        assert service == "svc" and tids == {tid} and len(names) == 2
    assert sorted(n for _, names, _ in got.values() for n in names) == sorted(s.name for s in spans)


def test_a_json_request_is_split_as_json() -> None:
    spans = _spans()
    payload = otlp_json(encode_spans(spans).SerializeToString()).encode()
    pieces = split_by_trace(payload)
    assert len(pieces) == 2
    for tid, value in pieces.items():
        body = json.loads(value)
        (rs,) = body["resourceSpans"]
        assert {s["traceId"].lower() for ss in rs["scopeSpans"] for s in ss["spans"]} == {tid}


def test_not_a_trace_request_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        split_by_trace(b"{not json")
