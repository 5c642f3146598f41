"""OTLP spans → ``AnswerRecord``s: the span types and limits (docs/spans.md, docs/dialects.md).

The way in runs one way: :mod:`~citemon._otlp.wire` parses OTLP protobuf and JSON into
:class:`RawSpan`; :mod:`~citemon._otlp.decoding` offers each span to the trace dialects
(:mod:`~citemon._otlp.dialects`: the shim and OpenInference, OpenLLMetry, MLflow, the GenAI
conventions), which reduce it to what it holds of an answer; :mod:`~citemon._otlp.assembly`
joins a trace's parts into an answer record; :mod:`~citemon._otlp.files` reads OTLP JSON-lines
files through the same steps.

Two span shapes become answers:

* **self-contained** — the shim's ``rag.answer`` span (or any non-retriever span carrying both
  ``retrieval.documents.*`` and ``output.value``): one span, one record, decoded on the spot;
* **traces** — documents on a retriever span, the answer on a chain, chat or workflow span of
  the same trace (where each dialect keeps them: docs/design.md, "Trace dialects"), possibly in
  different Kafka messages. The dialects reduce such spans to :class:`TraceSpan` and a
  :class:`~citemon._otlp.assembly.TraceAssembler` (bounded in time and memory) joins them.

Bad payloads raise :class:`~citemon._core.errors.DecodeError` with a short stable ``reason``
(the DLQ header and the ``citemon_dead_letters_total{reason}`` label):

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

from dataclasses import dataclass, field
from typing import Any, Final

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord, NativeCitation, Passage
from citemon._otlp.tool_results import ToolReading

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_CONTEXT_BYTES",
    "DEFAULT_MAX_PASSAGES",
    "MAX_SEEN_NAMES",
    "NOT_AN_ANSWER",
    "DecodedBatch",
    "Limits",
    "NotAnAnswer",
    "RawSpan",
    "ResourceInfo",
    "TraceSpan",
]

DEFAULT_MAX_PASSAGES: Final = 1000
"""Documents per answer; more is ``too_many_passages`` (the shim records at most this many)."""
DEFAULT_MAX_ANSWER_BYTES: Final = 1_000_000
"""UTF-8 bytes per answer (and per question); more is ``answer_too_large``."""
DEFAULT_MAX_CONTEXT_BYTES: Final = 2_000_000
"""UTF-8 bytes of passage text per answer, all passages together; more is ``answer_too_large``.
Every judge reads them all (an LLM judge's context is far smaller; the lexical judge takes about
1.7 s per MB, blocking its event loop), so one hostile span must not carry 50 MB of them."""
_SPAN_OVERHEAD_BYTES: Final = 200
MAX_SEEN_NAMES: Final = 32
"""Span names kept per trace in :attr:`DecodedBatch.seen`."""


class NotAnAnswer:
    """The type of :data:`NOT_AN_ANSWER` (one instance)."""

    def __repr__(self) -> str:
        return "NOT_AN_ANSWER"


NOT_AN_ANSWER: Final = NotAnAnswer()
"""What a dialect returns for a span that is its answer span but holds nothing to score (the
handler failed before answering): skipped, and not taken for a trace's bare root either."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """What one answer may hold (each excess is a :class:`~citemon._core.errors.DecodeError`),
    and which tools' results are its passages: what every dialect is handed with each span."""

    max_passages: int = DEFAULT_MAX_PASSAGES
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES
    tools: ToolReading = field(default_factory=ToolReading)
    """Which tools are search tools and how their results are read (``--retrieval-tools``,
    ``--tool-result-reader``); the command's own, passed in, never process-wide."""


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """The deploy a span came from: ``service.name``, ``service.version``, environment."""

    service: str | None = None
    version: str | None = None
    environment: str | None = None


@dataclass(slots=True)
class TraceSpan:
    """One span of a trace, reduced by a dialect to what
    :class:`~citemon._otlp.assembly.TraceAssembler` needs.

    ``documents`` is set on a retriever span (IDs may be ``""``: the assembler then numbers
    them by position), ``answer`` on a span whose output is the answer's text. A span with
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
    name: str = ""
    dialect: str = ""
    """The dialect that read this part (:mod:`citemon._otlp.dialects`); ``""`` for a bare root."""
    question: str | None = None
    answer: str | None = None
    documents: list[Passage] | None = None
    answered: bool = False
    truncated: bool = False
    nbytes: int = _SPAN_OVERHEAD_BYTES
    citations: list[NativeCitation] | None = None
    """The provider's own citations of ``answer`` (:mod:`citemon._otlp.native_citations`)."""
    citations_dropped: str | None = None
    """Set on an answer whose request asked for citations that the instrumentation does not
    record: why, and what records them instead (:mod:`citemon._otlp.dropped_citations`)."""
    tool: str = ""
    """The tool whose result ``documents`` are (:mod:`citemon._otlp.agents`); ``""`` for a
    retriever's documents."""
    from_messages: bool = False
    """``documents`` read from tool results in a chat span's input messages (a fallback for
    traces that carry no tool span)."""
    no_content: str = ""
    """Set on a span recorded with content capture off: the setting that turns it on."""

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id

    @classmethod
    def of(cls, raw: RawSpan, *, kind: str = "", dialect: str = "") -> TraceSpan:
        """A part carrying nothing yet (a dialect sets ``documents``/``answer``)."""
        return cls(
            trace_id=raw.trace_id,
            span_id=raw.span_id,
            parent_span_id=raw.parent_span_id,
            kind=kind,
            start_ns=raw.start_ns,
            end_ns=raw.end_ns,
            resource=raw.resource,
            name=raw.name,
            dialect=dialect,
            truncated=raw.dropped_attributes > 0,
        )


@dataclass(slots=True)
class DecodedBatch:
    """What one payload held: complete records, trace parts for the assembler, per-span errors."""

    records: list[AnswerRecord] = field(default_factory=list)
    spans: list[TraceSpan] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    span_count: int = 0
    skipped: int = 0
    seen: dict[str, list[str]] = field(default_factory=dict)
    """Trace ID → names of the spans of it this payload held (for explaining a trace that
    gives no answer; at most :data:`MAX_SEEN_NAMES` per trace)."""
    spans_per_trace: dict[str, int] = field(default_factory=dict)
    """Trace ID → how many spans of it this payload held (what its Kafka key is checked
    against: :mod:`citemon._service.intake`)."""


@dataclass(slots=True)
class RawSpan:
    """One span as it came off the wire: IDs (hex), name, times, status, attributes."""

    resource: ResourceInfo
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    error: bool
    dropped_attributes: int
    attrs: dict[str, Any]
    scope: str = ""
    """The instrumentation scope's name (which instrumentation made the span)."""
