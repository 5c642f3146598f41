"""One OTLP trace request split into one request per trace, for re-keying by trace ID.

The trace assembler needs every span of a trace on one Kafka partition, which holds when each
record is keyed by its spans' trace ID. :func:`split_by_trace` takes a record's value as any
producer wrote it (several traces in one request, any key) and returns one request per trace,
each with the resources and scopes of its spans, in the value's own encoding (``otlp_proto`` or
``otlp_json``), so a re-keying stage can produce each keyed by its trace ID.
"""

from __future__ import annotations

import json
from typing import Any

from citemon._core.errors import DecodeError

__all__ = ["split_by_trace"]

_SCOPES = ("scopeSpans", "instrumentationLibrarySpans")


def split_by_trace(payload: bytes) -> dict[str, bytes]:
    """Trace ID (32 hex digits; ``""`` for spans whose ID is malformed) → a request holding
    that trace's spans. Raises :class:`DecodeError` when ``payload`` is no trace request."""
    if bytes(payload[:64]).lstrip()[:1] == b"{":
        return _split_json(payload)
    return _split_proto(payload)


def _split_proto(payload: bytes) -> dict[str, bytes]:
    from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
        DecodeError as ProtoDecodeError,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        request = ExportTraceServiceRequest.FromString(bytes(payload))
    except ProtoDecodeError as exc:
        raise DecodeError("not_protobuf", "not an OTLP protobuf trace request") from exc
    out: dict[str, Any] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                tid = span.trace_id.hex() if len(span.trace_id) == 16 else ""
                piece = out.get(tid)
                if piece is None:
                    piece = out[tid] = ExportTraceServiceRequest()
                # One ResourceSpans/ScopeSpans per (resource, scope) of the original.
                target_rs = _last_or_new(piece.resource_spans, rs, "resource")
                target_ss = _last_or_new(target_rs.scope_spans, ss, "scope")
                target_ss.spans.append(span)
    return {tid: piece.SerializeToString() for tid, piece in out.items()}


def _last_or_new(container: Any, source: Any, field: str) -> Any:
    """The last element of ``container`` when it copies ``source``'s ``field``, else a new one."""
    if (
        len(container)
        and getattr(container[-1], field) == getattr(source, field)
        and container[-1].schema_url == source.schema_url
    ):
        return container[-1]
    item = container.add()
    getattr(item, field).CopyFrom(getattr(source, field))
    item.schema_url = source.schema_url
    return item


def _split_json(payload: bytes) -> dict[str, bytes]:
    try:
        request = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DecodeError("not_json", f"not JSON: {exc}") from exc
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
        raise DecodeError("wrong_message", "JSON without resourceSpans")
    out: dict[str, dict[str, Any]] = {}
    for rs in request["resourceSpans"]:
        if not isinstance(rs, dict):
            raise DecodeError("wrong_message", "resourceSpans entry is not an object")
        scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []
        for ss in scopes if isinstance(scopes, list) else []:
            spans = (ss or {}).get("spans") if isinstance(ss, dict) else None
            for span in spans if isinstance(spans, list) else []:
                raw = span.get("traceId") if isinstance(span, dict) else None
                tid = raw.lower() if isinstance(raw, str) and len(raw) == 32 else ""
                piece = out.setdefault(tid, {"resourceSpans": []})
                resources = piece["resourceSpans"]
                if not resources or resources[-1]["_src"] is not rs:
                    head = {k: v for k, v in rs.items() if k not in _SCOPES}
                    resources.append({**head, "_src": rs, "scopeSpans": []})
                target = resources[-1]["scopeSpans"]
                if not target or target[-1]["_src"] is not ss:
                    scope = {k: v for k, v in ss.items() if k != "spans"}
                    target.append({**scope, "_src": ss, "spans": []})
                target[-1]["spans"].append(span)
    return {tid: _dump_json(piece) for tid, piece in out.items()}


def _dump_json(piece: dict[str, Any]) -> bytes:
    for rs in piece["resourceSpans"]:
        rs.pop("_src", None)
        for ss in rs["scopeSpans"]:
            ss.pop("_src", None)
    return json.dumps(piece, separators=(",", ":"), ensure_ascii=False).encode()
