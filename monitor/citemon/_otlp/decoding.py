"""One payload of OTLP → what it holds of answers: wire bytes are parsed into spans
(:mod:`citemon._otlp.wire`), each span is read by the first dialect that knows it
(:mod:`citemon._otlp.dialects`), and the result is a :class:`~citemon._otlp.spans.DecodedBatch`:
self-contained records, trace parts for the :class:`~citemon._otlp.assembly.TraceAssembler`,
per-span errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._otlp.dialects import DIALECTS, Dialect
from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import check_writable, texts_of
from citemon._otlp.dropped_citations import citations_dropped
from citemon._otlp.spans import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_CONTEXT_BYTES,
    DEFAULT_MAX_PASSAGES,
    MAX_SEEN_NAMES,
    NOT_AN_ANSWER,
    DecodedBatch,
    Limits,
    RawSpan,
    ResourceInfo,
    TraceSpan,
)
from citemon._otlp.tool_results import ToolReading
from citemon._otlp.wire import parse_otlp, parse_otlp_json, parse_otlp_proto

__all__ = ["decode_otlp", "decode_otlp_json", "decode_otlp_proto", "read_spans"]


def read_spans(
    spans: Iterable[RawSpan | DecodeError],
    limits: Limits | None = None,
    dialects: Sequence[Dialect] = DIALECTS,
    *,
    escapes: bool = True,
) -> DecodedBatch:
    """Offer each span to the dialects in order; the first that reads something wins. A root
    span no dialect reads is kept bare: it tells the assembler its trace is over. ``escapes``
    False: the payload the spans came from holds no surrogate escape (:func:`_may_escape`), so
    no span's text is checked for lone surrogates."""
    limits = limits or Limits()
    batch = DecodedBatch()
    answered: set[str] = set()
    for raw in spans:
        batch.span_count += 1
        if isinstance(raw, DecodeError):
            batch.errors.append(raw)
            continue
        batch.spans_per_trace[raw.trace_id] = batch.spans_per_trace.get(raw.trace_id, 0) + 1
        names = batch.seen.setdefault(raw.trace_id, [])
        if len(names) < MAX_SEEN_NAMES:
            names.append(raw.name)
        try:
            out = _read(raw, limits, dialects, escapes)
        except DecodeError as exc:
            batch.errors.append(exc)
            continue
        if out is None or out is NOT_AN_ANSWER:
            batch.skipped += 1
        elif isinstance(out, AnswerRecord):
            batch.records.append(out)
            answered.add(raw.trace_id)
        elif isinstance(out, TraceSpan):
            batch.spans.append(out)
    if answered:
        # A trace with a self-contained answer is scored once: tell the assembler to let go of
        # any other parts of it (they may have arrived in an earlier message).
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
            raise DecodeError(
                "no_answer_spans",
                f"{batch.span_count} spans, none an answer",
                spans=batch.span_count,
            )
    return batch


def _read(raw: RawSpan, limits: Limits, dialects: Sequence[Dialect], escapes: bool) -> SpanReading:
    for dialect in dialects:
        try:
            out = dialect.read_span(raw, limits)
        except (
            TypeError,
            ValueError,
            AttributeError,
            KeyError,
            RecursionError,
            OverflowError,  # float() of an integer past its range (a document's score)
        ) as exc:
            # A shape no reader foresaw is this span's error, not the monitor's crash.
            raise DecodeError(
                "bad_attribute", f"{dialect.name}: span {raw.name!r} is malformed ({exc})"
            ) from exc
        if isinstance(out, TraceSpan) and out.answer is not None and out.citations is None:
            out.citations_dropped = citations_dropped(raw)
        if out is not None:
            break
    else:
        out = TraceSpan.of(raw) if not raw.parent_span_id else None
    if escapes and out is not None and out is not NOT_AN_ANSWER and _escapes_surrogates(raw):
        check_writable(out)
    return out


_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
"""JSON's escape of a UTF-16 surrogate, high or low (``\\ud800``..``\\udfff``)."""
_SURROGATE_ESCAPE_BYTES: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def _may_escape(payload: bytes | str) -> bool:
    """Whether a message could give a span text with a lone surrogate: only through a JSON
    escape of one, which appears as such in the message's bytes however deep it is nested
    (protobuf strings are valid UTF-8). One search per message keeps the per-span check off
    every other message's path."""
    # A one-character search first (memchr: most messages hold no backslash at all); the
    # pattern runs only where one is.
    if isinstance(payload, str):
        return "\\" in payload and _SURROGATE_ESCAPE.search(payload) is not None
    data = bytes(payload)
    return b"\\" in data and _SURROGATE_ESCAPE_BYTES.search(data) is not None


def _escapes_surrogates(raw: RawSpan) -> bool:
    """Whether a JSON text in ``raw``'s attributes escapes a UTF-16 surrogate (``\\ud800``):
    only then can a dialect's ``json.loads`` of it give a lone one (a span's own strings are
    checked where the wire gives them: :func:`citemon._otlp.wire.parse_otlp_json`). A substring
    search per value keeps the check off every other span's path."""
    for value in raw.attrs.values():
        if isinstance(value, str):
            if "\\u" in value and _SURROGATE_ESCAPE.search(value):
                return True
        elif isinstance(value, list | dict) and any(
            _SURROGATE_ESCAPE.search(text) for _, text in texts_of(value, "attributes")
        ):
            return True
    return False


def _limits(
    max_passages: int, max_answer_bytes: int, max_context_bytes: int, tools: ToolReading | None
) -> Limits:
    return Limits(
        max_passages=max_passages,
        max_answer_bytes=max_answer_bytes,
        max_context_bytes=max_context_bytes,
        tools=tools or ToolReading(),
    )


def decode_otlp_proto(
    payload: bytes,
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
    tools: ToolReading | None = None,
) -> DecodedBatch:
    """Decode one OTLP ``ExportTraceServiceRequest`` (a Kafka message value, ``otlp_proto``);
    ``tools``: how agents' tool calls are read (default: every tool, the built-in readers)."""
    limits = _limits(max_passages, max_answer_bytes, max_context_bytes, tools)
    return read_spans(parse_otlp_proto(payload), limits, escapes=_may_escape(payload))


def decode_otlp_json(
    payload: bytes | str,
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
    tools: ToolReading | None = None,
) -> DecodedBatch:
    """Decode one OTLP JSON ``ExportTraceServiceRequest`` (hex IDs), as one line of the
    Collector's file exporter or a Kafka value with ``encoding: otlp_json``."""
    limits = _limits(max_passages, max_answer_bytes, max_context_bytes, tools)
    try:
        return read_spans(parse_otlp_json(payload), limits, escapes=_may_escape(payload))
    except (TypeError, AttributeError) as exc:
        raise DecodeError("wrong_message", f"not an OTLP trace request: {exc}") from exc


def decode_otlp(
    payload: bytes,
    *,
    encoding: str | None = None,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
    tools: ToolReading | None = None,
) -> DecodedBatch:
    """``otlp_proto`` or ``otlp_json`` by ``encoding``, or sniffed (OTLP protobuf never starts
    with ``{``)."""
    limits = _limits(max_passages, max_answer_bytes, max_context_bytes, tools)
    if encoding == "otlp_json" or (encoding is None and bytes(payload[:64]).lstrip()[:1] == b"{"):
        return decode_otlp_json(
            payload,
            max_passages=max_passages,
            max_answer_bytes=max_answer_bytes,
            max_context_bytes=max_context_bytes,
            tools=tools,
        )
    spans = parse_otlp(payload, encoding="otlp_proto")
    return read_spans(spans, limits, escapes=_may_escape(payload))
