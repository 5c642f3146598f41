"""OTLP on the wire: ``ExportTraceServiceRequest`` protobuf (the Collector's ``otlp_proto``)
and OTLP JSON, parsed into :class:`~citemon._otlp.spans.RawSpan`; another signal (logs,
metrics) is a clear :class:`~citemon._core.errors.DecodeError`. The first step of the one way in:
wire bytes → spans (here) → trace parts read by the dialects (:mod:`citemon._otlp.decoding`) →
assembled traces (:mod:`citemon._otlp.assembly`) → answer records.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any, Final

from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
    DecodeError as _ProtoDecodeError,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from citemon._core.errors import DecodeError
from citemon._otlp.dialects.values import check_writable
from citemon._otlp.spans import RawSpan, ResourceInfo
from citemon_instrumentation import attributes as A

__all__ = ["SpanStream", "parse_otlp", "parse_otlp_json", "parse_otlp_proto", "resource_info"]

_STATUS_ERROR: Final = 2

SpanStream = Iterator[RawSpan | DecodeError]
"""A payload's spans in order; a span that cannot be parsed is its :class:`DecodeError`."""


def resource_info(attrs: dict[str, Any]) -> ResourceInfo:
    """The deploy labels of a resource: ``service.name``, ``service.version``, environment."""

    def s(*keys: str) -> str | None:
        for k in keys:
            v = attrs.get(k)
            if isinstance(v, str) and v:
                return v
        return None

    return ResourceInfo(
        service=s(A.SERVICE_NAME),
        version=s(A.SERVICE_VERSION),
        environment=s(A.DEPLOYMENT_ENVIRONMENT, A.DEPLOYMENT_ENVIRONMENT_OLD),
    )


# -- protobuf -----------------------------------------------------------------------------------


def _pv(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind is None:
        return None
    if kind == "array_value":
        return [_pv(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pv(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _proto_attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = v.string_value if v.WhichOneof("value") == "string_value" else _pv(v)
    return out


def _parse_proto(payload: bytes) -> ExportTraceServiceRequest:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise DecodeError("not_protobuf", f"payload is {type(payload).__name__}, not bytes")
    data = bytes(payload)
    try:
        req: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(data)
    except _ProtoDecodeError as exc:
        _raise_if_other_signal(data, exc)
        if "UTF-8" in str(exc):
            raise DecodeError("invalid_utf8", "a string field is not valid UTF-8") from exc
        hint = " (it looks like JSON: use otlp_json)" if data.lstrip()[:1] == b"{" else ""
        raise DecodeError("not_protobuf", f"not an OTLP protobuf message{hint}") from exc
    # Protobuf parsing is lenient: a logs request can parse as traces whose "spans" have no
    # valid IDs (mismatched wire types become unknown fields). Call that what it is.
    spans = [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    if spans and all(len(sp.trace_id) != 16 for sp in spans):
        _raise_if_other_signal(data, None)
    return req


def _raise_if_other_signal(data: bytes, cause: Exception | None) -> None:
    for other in (ExportLogsServiceRequest, ExportMetricsServiceRequest):
        try:
            parsed = other.FromString(data)
        except _ProtoDecodeError:
            continue
        if parsed.ByteSize():
            raise DecodeError(
                "wrong_message", f"an OTLP {other.__name__}, not ExportTraceServiceRequest"
            ) from cause


def _proto_spans(req: ExportTraceServiceRequest) -> SpanStream:
    for rs in req.resource_spans:
        res = resource_info({kv.key: _pv(kv.value) for kv in rs.resource.attributes})
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if (
                    len(sp.trace_id) != 16
                    or len(sp.span_id) != 8
                    or len(sp.parent_span_id) not in (0, 8)
                ):
                    yield DecodeError("bad_id", "trace_id/span_id of the wrong length")
                    continue
                yield RawSpan(
                    resource=res,
                    trace_id=sp.trace_id.hex(),
                    span_id=sp.span_id.hex(),
                    parent_span_id=sp.parent_span_id.hex(),
                    name=sp.name,
                    start_ns=sp.start_time_unix_nano,
                    end_ns=sp.end_time_unix_nano,
                    error=sp.status.code == _STATUS_ERROR,
                    dropped_attributes=sp.dropped_attributes_count,
                    attrs=_proto_attrs(sp.attributes),
                    scope=ss.scope.name,
                )


def parse_otlp_proto(payload: bytes) -> SpanStream:
    """The spans of one OTLP ``ExportTraceServiceRequest`` (a Kafka message value,
    ``otlp_proto``); a payload that is not one raises :class:`DecodeError` at once."""
    return _proto_spans(_parse_proto(payload))


# -- JSON ---------------------------------------------------------------------------------------


def _jv(v: Any) -> Any:
    if not isinstance(v, dict):
        raise DecodeError("bad_attribute", "attribute value is not an AnyValue object")
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError) as exc:
            raise DecodeError("bad_attribute", "intValue is not an integer") from exc
    if "doubleValue" in v:
        d = v["doubleValue"]
        if not isinstance(d, int | float | str):
            return None
        try:
            return float(d)
        except (ValueError, OverflowError) as exc:  # "abc", or an integer past float's range
            raise DecodeError("bad_attribute", "doubleValue is not a number") from exc
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_jv(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {
            kv.get("key", ""): _jv(kv.get("value", {}))
            for kv in (v["kvlistValue"] or {}).get("values", [])
        }
    if "bytesValue" in v:
        try:
            return base64.b64decode(v["bytesValue"])
        except (binascii.Error, TypeError) as exc:
            raise DecodeError("bad_attribute", "bytesValue is not base64") from exc
    return None


def _jattrs(items: Any) -> dict[str, Any]:
    if not items:
        return {}
    if not isinstance(items, list):
        raise DecodeError("bad_attribute", "attributes is not a list")
    out: dict[str, Any] = {}
    for kv in items:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise DecodeError("bad_attribute", "attribute without a string key")
        out[kv["key"]] = _jv(kv.get("value", {}))
    return out


def _hex_id(value: Any, nbytes: int, *, optional: bool = False) -> str:
    if value in (None, "") and optional:
        return ""
    if not isinstance(value, str) or len(value) != 2 * nbytes:
        raise DecodeError("bad_id", f"ID {str(value)[:40]!r} is not {2 * nbytes} hex digits")
    try:
        bytes.fromhex(value)
    except ValueError as exc:
        raise DecodeError("bad_id", f"ID {value[:40]!r} is not hex") from exc
    return value.lower()


def _json_spans(obj: dict[str, Any]) -> SpanStream:
    for rs in obj.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            raise DecodeError("wrong_message", "resourceSpans entry is not an object")
        res = resource_info(_jattrs((rs.get("resource") or {}).get("attributes")))
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for sp in (ss or {}).get("spans") or []:
                try:
                    status = (sp.get("status") or {}).get("code")
                    yield RawSpan(
                        resource=res,
                        trace_id=_hex_id(sp.get("traceId"), 16),
                        span_id=_hex_id(sp.get("spanId"), 8),
                        parent_span_id=_hex_id(sp.get("parentSpanId"), 8, optional=True),
                        name=str(sp.get("name", "")),
                        start_ns=int(sp.get("startTimeUnixNano") or 0),
                        end_ns=int(sp.get("endTimeUnixNano") or 0),
                        error=status in (_STATUS_ERROR, "STATUS_CODE_ERROR"),
                        dropped_attributes=int(sp.get("droppedAttributesCount") or 0),
                        attrs=_jattrs(sp.get("attributes")),
                        scope=str(((ss or {}).get("scope") or {}).get("name") or ""),
                    )
                except DecodeError as exc:
                    yield exc
                except (TypeError, ValueError, AttributeError) as exc:
                    yield DecodeError("bad_attribute", f"malformed span: {exc}")


def parse_otlp_json(payload: bytes | str) -> SpanStream:
    """The spans of one OTLP JSON ``ExportTraceServiceRequest`` (hex IDs), as one line of the
    Collector's file exporter or a Kafka value with ``encoding: otlp_json``."""
    if isinstance(payload, bytes | bytearray | memoryview):
        try:
            text = bytes(payload).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError("invalid_utf8", f"payload is not UTF-8 (byte {exc.start})") from exc
    else:
        text = payload
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also an integer of > 4300 digits
        raise DecodeError("not_json", f"not JSON: {exc}") from exc
    if not isinstance(obj, dict) or "resourceSpans" not in obj:
        what = next(
            (k for k in ("resourceLogs", "resourceMetrics") if isinstance(obj, dict) and k in obj),
            None,
        )
        raise DecodeError(
            "wrong_message", f"JSON without resourceSpans{f' (has {what})' if what else ''}"
        )
    spans = _guarded(_json_spans(obj))
    # JSON may escape a lone surrogate (a string no UTF-8 holds: it would fail the results
    # topic's write, or every /metrics scrape as a label); only text with such an escape needs
    # each span's strings checked (protobuf's strings are valid UTF-8 already).
    if "\\ud" in text or "\\uD" in text:
        return _without_surrogates(spans)
    return spans


def _without_surrogates(spans: SpanStream) -> SpanStream:
    for span in spans:
        if isinstance(span, RawSpan):
            try:
                check_writable(span)
            except DecodeError as exc:
                yield exc
                continue
        yield span


def _guarded(spans: SpanStream) -> SpanStream:
    try:
        yield from spans
    except (TypeError, AttributeError) as exc:
        raise DecodeError("wrong_message", f"not an OTLP trace request: {exc}") from exc


def parse_otlp(payload: bytes, *, encoding: str | None = None) -> SpanStream:
    """``otlp_proto`` or ``otlp_json`` by ``encoding``, or sniffed (OTLP protobuf never starts
    with ``{``)."""
    if encoding is None:
        encoding = "otlp_json" if bytes(payload[:64]).lstrip()[:1] == b"{" else "otlp_proto"
    if encoding == "otlp_json":
        return parse_otlp_json(payload)
    return parse_otlp_proto(payload)
