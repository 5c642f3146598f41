"""OTLP spans → ``AnswerRecord``s (DESIGN.md, "Spans" and "Kafka").

Two span shapes become answers:

* **self-contained** — the shim's ``rag.answer`` span (or any non-retriever span carrying both
  ``retrieval.documents.*`` and ``output.value``): one span, one record, decoded on the spot;
* **OpenInference traces** — documents on a ``RETRIEVER`` span, the answer on an ``LLM`` or
  ``CHAIN`` span of the same trace, possibly in different Kafka messages. The decoder reduces
  such spans to :class:`TraceSpan` and a :class:`TraceAssembler` (bounded in time and memory)
  joins them.

Bad payloads raise :class:`~monitor.errors.DecodeError` with a short stable ``reason`` (the DLQ
header and the ``citemon_dead_letters_total{reason}`` label):

====================  ==========================================================================
``not_protobuf``      not an OTLP protobuf message at all
``not_json``          the JSON path got text that is not JSON
``wrong_message``     valid OTLP, but logs or metrics, or JSON without ``resourceSpans``
``invalid_utf8``      a string that is not UTF-8
``bad_id``            a trace/span ID of the wrong length or not hex
``bad_attribute``     a missing or mistyped attribute the answer needs
``too_many_passages`` more than ``max_passages`` documents on one answer
``answer_too_large``  an answer or question over ``max_answer_bytes``, or passages over
                      ``max_context_bytes`` together (what the judge would have to read)
``no_answer_spans``   valid traces without any answer span: not poison, count it as skipped
====================  ==========================================================================

A payload mixing good and bad answer spans is not thrown away: the good ones come back in
:attr:`DecodedBatch.records`, the per-span failures in :attr:`DecodedBatch.errors`; only a payload
with nothing usable raises.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
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

from instrumentation import attributes as A
from monitor.errors import DecodeError
from monitor.records import AnswerRecord, Passage

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CONTEXT_BYTES",
    "DEFAULT_MAX_PASSAGES",
    "DEFAULT_MAX_TRACES",
    "DEFAULT_WINDOW_S",
    "DecodedBatch",
    "ResourceInfo",
    "TraceAssembler",
    "TraceSpan",
    "decode_otlp",
    "decode_otlp_json",
    "decode_otlp_proto",
    "is_otlp_json_line",
    "iter_otlp_json_lines",
]

DEFAULT_MAX_PASSAGES: Final = 1000
"""Documents per answer; more is ``too_many_passages`` (the shim records at most this many)."""
DEFAULT_MAX_ANSWER_BYTES: Final = 1_000_000
"""UTF-8 bytes per answer (and per question); more is ``answer_too_large``."""
DEFAULT_MAX_CONTEXT_BYTES: Final = 2_000_000
"""UTF-8 bytes of passage text per answer, all passages together; more is ``answer_too_large``.
Every judge reads them all (an LLM judge's context is far smaller; the lexical judge takes about
1.7 s per MB, blocking its event loop), so one hostile span must not carry 50 MB of them."""
DEFAULT_WINDOW_S: Final = 30.0
"""How long the assembler waits for the rest of an OpenInference trace, in seconds."""
DEFAULT_MAX_TRACES: Final = 10_000
"""Incomplete traces the assembler holds at once."""
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""Approximate text bytes the assembler holds at once."""

_STATUS_ERROR: Final = 2
_SPAN_OVERHEAD_BYTES: Final = 200
_ANSWER_KINDS: Final = frozenset({"CHAIN", "LLM", "AGENT"})
_DOC_PREFIX_LEN: Final = len(A.RETRIEVAL_DOCUMENTS_PREFIX)
_ID_KEYS: Final = ("id", "document_id", "doc_id", "node_id", "chunk_id")
_TEXT_KEYS: Final = ("content", "text", "output", "answer", "result", "response", "data")


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """The deploy a span came from: ``service.name``, ``service.version``, environment."""

    service: str | None = None
    version: str | None = None
    environment: str | None = None


@dataclass(slots=True)
class TraceSpan:
    """One span of an OpenInference trace, reduced to what :class:`TraceAssembler` needs.

    ``documents`` is set on a ``RETRIEVER`` span (IDs may be ``""``: the assembler then numbers
    them by position), ``answer`` on an ``LLM``/``CHAIN`` span with text output. A span with
    neither is a structural root (``parent_span_id == ""``): it tells the assembler the trace is
    over. ``answered`` marks a trace that already produced a self-contained record, so the
    assembler does not score it twice.
    """

    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    start_ns: int
    end_ns: int
    resource: ResourceInfo
    question: str | None = None
    answer: str | None = None
    documents: list[Passage] | None = None
    answered: bool = False
    truncated: bool = False
    nbytes: int = _SPAN_OVERHEAD_BYTES

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


@dataclass(slots=True)
class DecodedBatch:
    """What one payload held: complete records, trace parts for the assembler, per-span errors."""

    records: list[AnswerRecord] = field(default_factory=list)
    spans: list[TraceSpan] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    span_count: int = 0
    skipped: int = 0


@dataclass(slots=True)
class _Raw:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    error: bool
    dropped_attributes: int
    attrs: dict[str, Any]


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


def _proto_spans(
    req: ExportTraceServiceRequest,
) -> Iterator[tuple[ResourceInfo, _Raw | DecodeError]]:
    for rs in req.resource_spans:
        res = _resource({kv.key: _pv(kv.value) for kv in rs.resource.attributes})
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if (
                    len(sp.trace_id) != 16
                    or len(sp.span_id) != 8
                    or len(sp.parent_span_id) not in (0, 8)
                ):
                    yield res, DecodeError("bad_id", "trace_id/span_id of the wrong length")
                    continue
                yield (
                    res,
                    _Raw(
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_span_id=sp.parent_span_id.hex(),
                        name=sp.name,
                        start_ns=sp.start_time_unix_nano,
                        end_ns=sp.end_time_unix_nano,
                        error=sp.status.code == _STATUS_ERROR,
                        dropped_attributes=sp.dropped_attributes_count,
                        attrs=_proto_attrs(sp.attributes),
                    ),
                )


def decode_otlp_proto(
    payload: bytes,
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
) -> DecodedBatch:
    """Decode one OTLP ``ExportTraceServiceRequest`` (a Kafka message value, ``otlp_proto``)."""
    req = _parse_proto(payload)
    return _decode(_proto_spans(req), max_passages, max_answer_bytes, max_context_bytes)


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
        return float(d) if isinstance(d, int | float | str) else None
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


def _json_spans(obj: dict[str, Any]) -> Iterator[tuple[ResourceInfo, _Raw | DecodeError]]:
    for rs in obj.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            raise DecodeError("wrong_message", "resourceSpans entry is not an object")
        res = _resource(_jattrs((rs.get("resource") or {}).get("attributes")))
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for sp in (ss or {}).get("spans") or []:
                try:
                    status = (sp.get("status") or {}).get("code")
                    yield (
                        res,
                        _Raw(
                            trace_id=_hex_id(sp.get("traceId"), 16),
                            span_id=_hex_id(sp.get("spanId"), 8),
                            parent_span_id=_hex_id(sp.get("parentSpanId"), 8, optional=True),
                            name=str(sp.get("name", "")),
                            start_ns=int(sp.get("startTimeUnixNano") or 0),
                            end_ns=int(sp.get("endTimeUnixNano") or 0),
                            error=status in (_STATUS_ERROR, "STATUS_CODE_ERROR"),
                            dropped_attributes=int(sp.get("droppedAttributesCount") or 0),
                            attrs=_jattrs(sp.get("attributes")),
                        ),
                    )
                except DecodeError as exc:
                    yield res, exc
                except (TypeError, ValueError, AttributeError) as exc:
                    yield res, DecodeError("bad_attribute", f"malformed span: {exc}")


def decode_otlp_json(
    payload: bytes | str,
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
) -> DecodedBatch:
    """Decode one OTLP JSON ``ExportTraceServiceRequest`` (hex IDs), as one line of the
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
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DecodeError("not_json", f"not JSON: {exc}") from exc
    if not isinstance(obj, dict) or "resourceSpans" not in obj:
        what = next(
            (k for k in ("resourceLogs", "resourceMetrics") if isinstance(obj, dict) and k in obj),
            None,
        )
        raise DecodeError(
            "wrong_message", f"JSON without resourceSpans{f' (has {what})' if what else ''}"
        )
    try:
        return _decode(_json_spans(obj), max_passages, max_answer_bytes, max_context_bytes)
    except (TypeError, AttributeError) as exc:
        raise DecodeError("wrong_message", f"not an OTLP trace request: {exc}") from exc


def decode_otlp(
    payload: bytes,
    *,
    encoding: str | None = None,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
) -> DecodedBatch:
    """``otlp_proto`` or ``otlp_json`` by ``encoding``, or sniffed (OTLP protobuf never starts
    with ``{``)."""
    if encoding is None:
        encoding = "otlp_json" if bytes(payload[:64]).lstrip()[:1] == b"{" else "otlp_proto"
    if encoding == "otlp_json":
        return decode_otlp_json(
            payload,
            max_passages=max_passages,
            max_answer_bytes=max_answer_bytes,
            max_context_bytes=max_context_bytes,
        )
    return decode_otlp_proto(
        payload,
        max_passages=max_passages,
        max_answer_bytes=max_answer_bytes,
        max_context_bytes=max_context_bytes,
    )


# -- spans → records ----------------------------------------------------------------------------


def _resource(attrs: Mapping[str, Any]) -> ResourceInfo:
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


def _check_text(value: str, what: str, limit: int | None = None) -> None:
    if limit is not None and len(value) > limit:  # chars ≤ bytes: too large without encoding
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({len(value)} chars)")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates, from JSON "\ud800" escapes
        raise DecodeError("invalid_utf8", f"{what} is not valid UTF-8 text") from exc
    if limit is not None and n > limit:
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({n})")


def _check_context(passages: list[Passage], limit: int) -> None:
    chars = sum(len(p.text) for p in passages)
    if chars > limit:  # chars ≤ bytes: too large without encoding 50 MB to find out
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({chars} chars)")
    n = sum(len(p.text.encode("utf-8", "surrogatepass")) for p in passages)
    if n > limit:
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({n})")


def _metadata(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            obj = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None
    return None


def _passage(pid: Any, content: Any, score: Any, meta: Any, where: str, i: int) -> Passage:
    if type(content) is not str:
        raise DecodeError(
            "bad_attribute", f"{where} {i} content is {type(content).__name__}, not a string"
        )
    metadata = _metadata(meta) if meta is not None else None
    if pid is None and metadata is not None:
        pid = next((metadata[k] for k in _ID_KEYS if metadata.get(k) is not None), None)
    if type(pid) is not str and pid is not None:
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise DecodeError(
                "bad_attribute", f"{where} {i} id is {type(pid).__name__}, not a string"
            )
        pid = str(pid)
    source = metadata.get("source") if metadata is not None else None
    return Passage(
        id=pid or "",
        text=content,
        source=source if isinstance(source, str) else None,
        score=float(score) if type(score) is float or (type(score) is int) else None,
        metadata=metadata,
    )


def _documents(attrs: Mapping[str, Any], max_passages: int) -> tuple[list[Passage], bool]:
    """``retrieval.documents.{i}.document.*`` (plus the shim's packed overflow) → passages;
    also whether any document came without content (then it cannot be judged)."""
    docs: dict[str, dict[str, Any]] = {}
    prefix = A.RETRIEVAL_DOCUMENTS_PREFIX
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        dot = key.find(".document.", _DOC_PREFIX_LEN)
        if dot < 0:
            continue
        index = key[_DOC_PREFIX_LEN:dot]
        d = docs.get(index)
        if d is None:
            if not index.isdigit():
                continue
            if len(docs) >= max_passages:
                raise DecodeError("too_many_passages", f"more than {max_passages} documents")
            d = docs[index] = {}
        d[key[dot + 10 :]] = value
    overflow: list[Any] = []
    packed = attrs.get(A.CITEMON_PASSAGES_OVERFLOW)
    if packed is not None:
        try:
            overflow = json.loads(packed) if isinstance(packed, str) else None  # type: ignore[assignment]
        except (json.JSONDecodeError, RecursionError):
            overflow = None  # type: ignore[assignment]
        if not isinstance(overflow, list):
            raise DecodeError("bad_attribute", f"{A.CITEMON_PASSAGES_OVERFLOW} is not a JSON array")
    if len(docs) + len(overflow) > max_passages:
        raise DecodeError(
            "too_many_passages", f"{len(docs) + len(overflow)} documents > {max_passages}"
        )
    missing = False
    out: list[Passage] = []
    for index in sorted(docs, key=int):
        d = docs[index]
        content = d.get(A.DOCUMENT_CONTENT)
        if content is None:
            missing, content = True, ""
        out.append(
            _passage(
                d.get(A.DOCUMENT_ID),
                content,
                d.get(A.DOCUMENT_SCORE),
                d.get(A.DOCUMENT_METADATA),
                "document",
                int(index),
            )
        )
    for j, d in enumerate(overflow):
        if not isinstance(d, dict):
            raise DecodeError("bad_attribute", f"overflow document {j} is not an object")
        out.append(
            _passage(
                d.get("id"),
                d.get("content", ""),
                d.get("score"),
                d.get("metadata"),
                "overflow document",
                j,
            )
        )
    return out, missing


def _ids_from_output(attrs: Mapping[str, Any], docs: list[Passage]) -> None:
    """LangChain's instrumentor leaves ``document.id`` out but puts the retriever's output
    (``{"documents": [{"id": ..., ...}]}``) in ``output.value``: take the IDs from there."""
    if all(d.id for d in docs):
        return
    out = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(out, str) or not out.startswith("{"):
        return
    try:
        obj = json.loads(out)
    except (json.JSONDecodeError, RecursionError):
        return
    listed = obj.get("documents") if isinstance(obj, dict) else None
    if not isinstance(listed, list) or len(listed) != len(docs):
        return
    for d, item in zip(docs, listed, strict=True):
        if not d.id and isinstance(item, dict):
            pid = item.get("id")
            if pid is None and isinstance(item.get("metadata"), dict):
                pid = next(
                    (item["metadata"][k] for k in _ID_KEYS if item["metadata"].get(k) is not None),
                    None,
                )
            if isinstance(pid, str | int) and not isinstance(pid, bool):
                d.id = str(pid)


def _text_from_json(obj: Any, depth: int = 0) -> str | None:
    if depth > 6:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        for k in _TEXT_KEYS:
            if k in obj:
                t = _text_from_json(obj[k], depth + 1)
                if t is not None:
                    return t
        for k in ("generations", "messages", "choices"):
            if isinstance(obj.get(k), list) and obj[k]:
                return _text_from_json(obj[k][-1] if k == "messages" else obj[k][0], depth + 1)
        if obj.get("type") == "text" and isinstance(obj.get("text"), str):
            return str(obj["text"])
        return None
    if isinstance(obj, list) and obj:
        if all(isinstance(x, dict) and x.get("type") == "text" for x in obj):
            return "".join(str(x.get("text", "")) for x in obj)
        return _text_from_json(obj[0], depth + 1)
    return None


def _answer_text(kind: str, attrs: Mapping[str, Any]) -> str | None:
    if kind == "LLM":
        content = attrs.get(A.LLM_OUTPUT_MESSAGE_CONTENT)
        if isinstance(content, str):
            return content
    value = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(value, str):
        return None
    if attrs.get(A.OUTPUT_MIME_TYPE) == "application/json" or value.startswith(("{", "[")):
        try:
            return _text_from_json(json.loads(value))
        except (json.JSONDecodeError, RecursionError):
            pass
    return value


def _plain(attrs: Mapping[str, Any], key: str, mime_key: str) -> str | None:
    v = attrs.get(key)
    if isinstance(v, str) and attrs.get(mime_key) != "application/json":
        return v
    return None


def _classify(
    res: ResourceInfo, raw: _Raw, max_passages: int, max_answer_bytes: int, max_context_bytes: int
) -> AnswerRecord | TraceSpan | None:
    attrs = raw.attrs
    kind_v = attrs.get(A.SPAN_KIND)
    kind = kind_v.upper() if isinstance(kind_v, str) else ""
    has_docs = A.CITEMON_PASSAGES_COUNT in attrs or any(
        k.startswith(A.RETRIEVAL_DOCUMENTS_PREFIX) for k in attrs
    )
    is_answer = raw.name == A.ANSWER_SPAN_NAME or (
        has_docs and kind != "RETRIEVER" and A.OUTPUT_VALUE in attrs
    )
    if is_answer:
        return _record(res, raw, max_passages, max_answer_bytes, max_context_bytes)
    base = TraceSpan(
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        parent_span_id=raw.parent_span_id,
        kind=kind,
        start_ns=raw.start_ns,
        end_ns=raw.end_ns,
        resource=res,
        truncated=raw.dropped_attributes > 0,
    )
    if kind == "RETRIEVER" and has_docs:
        docs, missing = _documents(attrs, max_passages)
        _check_context(docs, max_context_bytes)
        _ids_from_output(attrs, docs)
        base.documents = docs
        base.truncated |= missing
        base.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
        if base.question is not None:
            _check_text(base.question, "question", max_answer_bytes)
        base.nbytes += sum(len(d.text) for d in docs)
        return base
    if kind in _ANSWER_KINDS:
        answer = _answer_text(kind, attrs)
        if answer is not None:
            _check_text(answer, "answer", max_answer_bytes)
            base.answer = answer
            base.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
            if base.question is not None:
                _check_text(base.question, "question", max_answer_bytes)
            base.nbytes += len(answer) + len(base.question or "")
            return base
    if not raw.parent_span_id:
        return base
    return None


def _record(
    res: ResourceInfo, raw: _Raw, max_passages: int, max_answer_bytes: int, max_context_bytes: int
) -> AnswerRecord | None:
    attrs = raw.attrs
    answer = attrs.get(A.OUTPUT_VALUE)
    if answer is None:
        if raw.error:
            return None  # the handler failed before answering: nothing to score
        raise DecodeError("bad_attribute", f"answer span {raw.span_id} has no {A.OUTPUT_VALUE}")
    if not isinstance(answer, str):
        raise DecodeError(
            "bad_attribute", f"{A.OUTPUT_VALUE} is {type(answer).__name__}, not a string"
        )
    question = attrs.get(A.INPUT_VALUE, "")
    if not isinstance(question, str):
        raise DecodeError(
            "bad_attribute", f"{A.INPUT_VALUE} is {type(question).__name__}, not a string"
        )
    _check_text(answer, "answer", max_answer_bytes)
    _check_text(question, "question", max_answer_bytes)
    passages, missing = _documents(attrs, max_passages)
    _check_context(passages, max_context_bytes)
    for i, p in enumerate(passages):
        _check_text(p.text, "document")
        if not p.id:
            p.id = str(i + 1)
    count = attrs.get(A.CITEMON_PASSAGES_COUNT)
    truncated = (
        attrs.get(A.CITEMON_TRUNCATED) is True
        or raw.dropped_attributes > 0
        or missing
        or (isinstance(count, int) and count != len(passages))
    )
    return AnswerRecord(
        id=raw.span_id,
        question=question,
        answer=answer,
        passages=passages,
        service=res.service,
        version=res.version,
        environment=res.environment,
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        truncated=truncated,
    )


def _decode(
    spans: Iterable[tuple[ResourceInfo, _Raw | DecodeError]],
    max_passages: int,
    max_answer_bytes: int,
    max_context_bytes: int,
) -> DecodedBatch:
    batch = DecodedBatch()
    answered: set[str] = set()
    for res, raw in spans:
        batch.span_count += 1
        if isinstance(raw, DecodeError):
            batch.errors.append(raw)
            continue
        try:
            out = _classify(res, raw, max_passages, max_answer_bytes, max_context_bytes)
        except DecodeError as exc:
            batch.errors.append(exc)
            continue
        if out is None:
            batch.skipped += 1
        elif isinstance(out, AnswerRecord):
            batch.records.append(out)
            answered.add(raw.trace_id)
        else:
            batch.spans.append(out)
    if answered:
        # A trace with a self-contained answer is scored once: tell the assembler to let go of
        # any OpenInference parts of it (they may have arrived in an earlier message).
        batch.spans = [s for s in batch.spans if s.trace_id not in answered]
        for r in batch.records:
            if r.trace_id is not None:
                batch.spans.append(
                    TraceSpan(
                        trace_id=r.trace_id,
                        span_id=r.span_id or "",
                        parent_span_id="-",
                        kind="",
                        start_ns=0,
                        end_ns=0,
                        resource=ResourceInfo(),
                        answered=True,
                    )
                )
    useful = batch.records or any(
        s.documents is not None or s.answer is not None for s in batch.spans
    )
    if not useful:
        if batch.errors:
            raise batch.errors[0]
        if not any(s.is_root for s in batch.spans):
            raise DecodeError("no_answer_spans", f"{batch.span_count} spans, none an answer")
    return batch


# -- assembly of OpenInference traces -----------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    first_seen: float
    spans: list[TraceSpan] = field(default_factory=list)
    nbytes: int = 0
    root_seen: bool = False


class TraceAssembler:
    """Joins OpenInference trace parts (documents on a ``RETRIEVER`` span, the answer on an
    ``LLM``/``CHAIN`` span) into records, holding at most ``max_traces`` traces and about
    ``max_bytes`` of text, each for at most ``window_s`` seconds.

    A trace is complete when its root span has arrived and it holds documents and an answer
    (spans end, and are exported, children first; a root that comes first waits for the rest).
    A trace whose root never comes (it lives in another service) is *settled* when its window
    ends or memory runs short: scored if it has documents and an answer, otherwise dropped and
    counted. The answer is taken from the outermost answer-bearing span that ends
    after retrieval (the chain's final output, not a question-rewriting step before it).

    Counters: ``completed``, ``settled``, ``dropped_incomplete``, ``evicted`` (settled or dropped
    early for the caps), ``superseded`` (the trace had a self-contained ``rag.answer`` span).
    """

    def __init__(
        self,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_traces: int = DEFAULT_MAX_TRACES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_passages: int = DEFAULT_MAX_PASSAGES,
        max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.max_passages = max_passages
        self.max_context_bytes = max_context_bytes
        self._clock = clock
        self._traces: OrderedDict[str, _Pending] = OrderedDict()
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._ready: list[AnswerRecord] = []
        self.nbytes = 0
        self.completed = 0
        self.settled = 0
        self.dropped_incomplete = 0
        self.evicted = 0
        self.superseded = 0
        self.discarded = 0

    def __len__(self) -> int:
        return len(self._traces)

    def __contains__(self, trace_id: object) -> bool:
        """Whether the trace is held, waiting for parts or for its window."""
        return trace_id in self._traces

    def discard(self, trace_ids: Iterable[str]) -> int:
        """Forget held traces without scoring them (their Kafka partition was revoked: the
        next owner reads their parts again); returns how many were held. They are not
        remembered as answered, so parts read again later start them afresh."""
        n = 0
        for tid in trace_ids:
            pending = self._traces.pop(tid, None)
            if pending is not None:
                self.nbytes -= pending.nbytes
                n += 1
        self.discarded += n
        return n

    def forget_answered(self, trace_ids: Iterable[str]) -> None:
        """Forget that these traces were answered: their answers were dropped uncommitted
        (partition revoked or lost), so parts read again must assemble them afresh. (True
        redeliveries of a *committed* answer are still dropped by the pipeline's dedupe.)"""
        for tid in trace_ids:
            self._answered.pop(tid, None)

    def __repr__(self) -> str:
        return (
            f"TraceAssembler(pending={len(self._traces)}, bytes={self.nbytes}, "
            f"completed={self.completed}, settled={self.settled}, "
            f"dropped_incomplete={self.dropped_incomplete})"
        )

    def add(self, spans: Iterable[TraceSpan]) -> list[AnswerRecord]:
        """Take a batch's trace parts; return the answers now complete (and any settled since)."""
        out, self._ready = self._ready, []
        now = self._clock()
        touched: list[str] = []
        for s in spans:
            tid = s.trace_id
            if s.answered:
                pending = self._traces.pop(tid, None)
                if pending is not None:
                    self.nbytes -= pending.nbytes
                    self.superseded += 1
                self._remember(tid)
                continue
            if tid in self._answered:
                continue
            pending = self._traces.get(tid)
            if pending is None:
                if s.documents is None and s.answer is None:
                    continue  # a root of a trace we hold nothing of
                pending = self._traces[tid] = _Pending(first_seen=now)
            pending.spans.append(s)
            pending.nbytes += s.nbytes
            self.nbytes += s.nbytes
            if s.is_root:
                pending.root_seen = True
            touched.append(tid)
        for tid in dict.fromkeys(touched):
            pending = self._traces.get(tid)
            if pending is None or not pending.root_seen:
                continue
            record = self._assemble(pending)
            if record is None:
                # The root came first (another exporter's batch, a reordering collector): keep
                # the trace until its other parts arrive or its window settles it.
                continue
            del self._traces[tid]
            self.nbytes -= pending.nbytes
            self.completed += 1
            self._remember(tid)  # parts still in flight (root came first) are ignored
            out.append(record)
        while self._traces and (
            len(self._traces) > self.max_traces or self.nbytes > self.max_bytes
        ):
            self.evicted += 1
            self._settle(self._traces.popitem(last=False)[1], out)
        self._sweep(now, out)
        return out

    def _remember(self, tid: str) -> None:
        """Traces already answered, so late parts are not held or scored again (bounded)."""
        self._answered[tid] = None
        if len(self._answered) > self.max_traces:
            self._answered.popitem(last=False)

    def expire(self) -> int:
        """Settle traces older than the window; return how many were dropped incomplete.
        Settled answers are returned by the next :meth:`add` (or :meth:`take_ready`)."""
        before = self.dropped_incomplete
        self._sweep(self._clock(), self._ready)
        return self.dropped_incomplete - before

    def take_ready(self) -> list[AnswerRecord]:
        """Answers settled by :meth:`expire` and not yet returned."""
        out, self._ready = self._ready, []
        return out

    def flush(self) -> list[AnswerRecord]:
        """Settle everything now (shutdown, end of a file)."""
        out, self._ready = self._ready, []
        while self._traces:
            self._settle(self._traces.popitem(last=False)[1], out)
        return out

    def _sweep(self, now: float, out: list[AnswerRecord]) -> None:
        while self._traces:
            tid, pending = next(iter(self._traces.items()))
            if now - pending.first_seen < self.window_s:
                break
            del self._traces[tid]
            self._settle(pending, out)

    def _settle(self, pending: _Pending, out: list[AnswerRecord]) -> None:
        self.nbytes -= pending.nbytes
        record = self._assemble(pending)
        if record is None:
            self.dropped_incomplete += 1
        else:
            self.settled += 1
            out.append(record)

    def _assemble(self, pending: _Pending) -> AnswerRecord | None:
        retrievers = sorted(
            (s for s in pending.spans if s.documents is not None), key=lambda s: s.start_ns
        )
        answers = [s for s in pending.spans if s.answer is not None]
        if not retrievers or not answers:
            return None
        retrieved_by = max(s.end_ns for s in retrievers)
        after = [s for s in answers if s.end_ns >= retrieved_by] or answers
        best = min(after, key=lambda s: (s.start_ns, -s.end_ns))
        passages: list[Passage] = []
        truncated = best.truncated
        for r in retrievers:
            truncated |= r.truncated
            for d in r.documents or ():
                pos = len(passages) + 1
                passages.append(d if d.id else d.model_copy(update={"id": str(pos)}))
        if len(passages) > self.max_passages:
            passages, truncated = passages[: self.max_passages], True
        # Each retriever span is within the context limit; several together may not be.
        budget = self.max_context_bytes
        for n, p in enumerate(passages):
            budget -= len(p.text.encode("utf-8", "surrogatepass"))
            if budget < 0:
                passages, truncated = passages[:n], True
                break
        question = best.question or next((r.question for r in retrievers if r.question), None) or ""
        res = best.resource
        return AnswerRecord(
            id=best.span_id,
            question=question,
            answer=best.answer or "",
            passages=passages,
            service=res.service,
            version=res.version,
            environment=res.environment,
            trace_id=best.trace_id,
            span_id=best.span_id,
            truncated=truncated,
        )


# -- files --------------------------------------------------------------------------------------


def is_otlp_json_line(line: str) -> bool:
    """Whether one line looks like OTLP JSON traces (for auto-detecting ``citemon score`` input)."""
    s = line.lstrip()
    if not s.startswith("{") or '"resourceSpans"' not in s[:4096]:
        return False
    try:
        obj = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and "resourceSpans" in obj


def iter_otlp_json_lines(
    source: str | Path | Iterable[str | bytes],
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
) -> Iterator[tuple[int, AnswerRecord | DecodeError]]:
    """Records from a Collector file-exporter dump: ``(line number, record or error)``.

    ``source`` is a path, or the lines themselves (an open text file, standard input).

    Lines without answer spans (ordinary traffic) are skipped silently; every other bad line
    yields its :class:`DecodeError`. OpenInference traces are joined across lines; any left
    incomplete at the end of the file are settled then (numbered with the last line).
    """
    assembler = TraceAssembler(
        window_s=math.inf,
        max_passages=max_passages,
        max_context_bytes=max_context_bytes,
        clock=lambda: 0.0,
    )
    lineno = 0
    with ExitStack() as stack:
        lines = (
            stack.enter_context(Path(source).open("rb"))
            if isinstance(source, str | Path)
            else source
        )
        for lineno, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                batch = decode_otlp_json(
                    raw,
                    max_passages=max_passages,
                    max_answer_bytes=max_answer_bytes,
                    max_context_bytes=max_context_bytes,
                )
            except DecodeError as exc:
                if exc.reason != "no_answer_spans":
                    yield lineno, exc
                continue
            for record in batch.records:
                yield lineno, record
            for err in batch.errors:
                yield lineno, err
            for record in assembler.add(batch.spans):
                yield lineno, record
    for record in assembler.flush():
        yield lineno, record
