"""The shim a RAG handler calls: one ``rag.answer`` span per answer (docs/spans.md).

Two promises shape everything here:

* **It never raises into the host.** Every error in the shim or in the user's redact hook is
  caught, counted in :class:`ShimStats` and logged at most once per ``LOG_INTERVAL_S``. An error
  raised by the host's own code inside ``with answer_span(...)`` is recorded on the span and
  re-raised untouched: it is the host's.
* **It never loses a passage silently.** OpenTelemetry's SDK drops the *oldest* attribute once a
  span holds ``max_span_attributes`` (128 by default) and cuts strings longer than
  ``max_span_attribute_length``. The shim reads the span's effective limits and plans within
  them: passages go into OpenInference per-document attributes while they fit, the rest are
  packed into one JSON attribute (``citemon.passages.overflow``), and ``citemon.passages.count``
  says how many there were. Only when even that cannot fit (a value-length limit shorter than the
  packed passages, more than ``max_passages``) is ``citemon.truncated=true`` set, so the monitor
  scores the answer ``unjudged`` instead of blaming a citation it never saw.

What a passage may be is :mod:`._passages`; what the shim counts, :mod:`._stats`.
:class:`AnswerSpan` plans the passages within the span's limits; both entry points
(:func:`answer_span`, :func:`record_answer`) only start and finish it.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace import Span, StatusCode, Tracer, TracerProvider

from citemon_instrumentation import attributes as A
from citemon_instrumentation._native import parse_response, to_json
from citemon_instrumentation._passages import PassageLike, normalize, utf8
from citemon_instrumentation._stats import LOG_INTERVAL_S, STATS, ShimStats

__all__ = [
    "DEFAULT_MAX_PASSAGES",
    "LOG_INTERVAL_S",
    "STATS",
    "AnswerSpan",
    "PassageLike",
    "Redact",
    "ShimStats",
    "answer_span",
    "record_answer",
]

DEFAULT_MAX_PASSAGES: Final = 1000
"""Passages recorded per answer; beyond it the answer is marked truncated (the monitor's decoder
rejects spans with more than its own ``max_passages``, 1000 by default)."""
Redact = Callable[[str], str]
"""Applied to the question, the answer and every passage's text before they are recorded."""

_SCOPE: Final = "citemon.instrumentation"


@functools.cache
def shim_version() -> str:
    """This distribution's version, from its package metadata (the one place it is set); read
    when the first tracer is made, so importing the shim does not load importlib.metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("citemon-instrumentation")
    except PackageNotFoundError:  # imported from a checkout that was never installed
        return "0+unknown"


_tracers: weakref.WeakKeyDictionary[TracerProvider, Tracer] = weakref.WeakKeyDictionary()
_global_tracer: list[Tracer] = []


_last: list[tuple[TracerProvider, Tracer]] = []


def _tracer(provider: TracerProvider | None) -> Tracer:
    # Tracer lookups are not free on the request path; cache one per provider. The global one
    # may be a ProxyTracer, which follows a provider installed later, so caching it is safe.
    if _last and _last[0][0] is provider:
        return _last[0][1]
    if provider is None:
        if not _global_tracer:
            _global_tracer.append(trace.get_tracer(_SCOPE, shim_version()))
        return _global_tracer[0]
    tracer = _tracers.get(provider)
    if tracer is None:
        tracer = provider.get_tracer(_SCOPE, shim_version())
        _tracers[provider] = tracer
    _last[:] = [(provider, tracer)]  # strong ref to one provider: the one in use anyway
    return tracer


class AnswerSpan:
    """The handle ``answer_span`` yields: record the passages and the answer as they arrive.

    Call :meth:`set_passages` and :meth:`set_answer` once each, in either order. Both are no-ops
    on a span that is not recording (sampled out, or no SDK installed) and never raise.
    """

    __slots__ = (
        "_answer_set",
        "_max_attrs",
        "_max_len",
        "_max_passages",
        "_passages_set",
        "_redact",
        "_stats",
        "_truncated",
        "span",
    )

    def __init__(
        self, span: Span, *, redact: Redact | None, max_passages: int, stats: ShimStats
    ) -> None:
        self.span = span
        self._redact = redact
        self._max_passages = max_passages
        self._stats = stats
        self._passages_set = False
        self._answer_set = False
        self._truncated = False
        # The SDK's Span keeps its effective SpanLimits (TracerProvider(span_limits=...) or the
        # OTEL_*_LIMIT env vars) in `_limits`; another SDK may have none: then we cannot plan.
        limits = getattr(span, "_limits", None)
        self._max_attrs: int | None = limits.max_span_attributes if limits is not None else None
        self._max_len: int | None = limits.max_span_attribute_length if limits is not None else None

    # -- helpers -------------------------------------------------------------------------------

    def _clean(self, text: str) -> str | None:
        """``text`` redacted, or ``None`` if the hook failed (then nothing is recorded)."""
        if self._redact is None:
            return text
        try:
            out = self._redact(text)
            if not isinstance(out, str):
                raise TypeError(f"redact hook returned {type(out).__name__}, not str")
            return out
        except Exception as exc:
            self._stats._error("redact", exc)
            self._truncated = True
            self.span.set_attribute(A.CITEMON_REDACTION_FAILED, True)
            return None

    def _too_long(self, text: str) -> bool:
        return self._max_len is not None and len(text) > self._max_len

    # -- public --------------------------------------------------------------------------------

    def set_passages(self, passages: Iterable[PassageLike]) -> None:
        """Record the retrieved passages, in the order the model saw them."""
        if not self._may_record(self._passages_set, "set_passages"):
            return
        self._passages_set = True
        try:
            self._set_passages(passages)
        except Exception as exc:
            self._lost(exc)

    def set_answer(self, answer: str | None) -> None:
        """Record the generated answer, citation markers included.

        ``None`` (nothing was generated) is recorded as the empty answer: no claims to score.
        """
        if not self._may_record(self._answer_set, "set_answer"):
            return
        self._answer_set = True
        if answer is None:
            answer = ""  # the service answered nothing; never the text "None"
        try:
            a = self._clean(answer if type(answer) is str else str(answer))
            # An answer whose redaction failed is recorded empty and truncated: never raw.
            if a is not None and not a.isascii():
                a = utf8(a)
            self.span.set_attribute(A.OUTPUT_VALUE, "" if a is None else a)
            if a is None or self._too_long(a):
                self._truncated = True  # written by _finish, when the span ends
        except Exception as exc:
            self._lost(exc)

    def set_native_citations(
        self, provider: str, response: Any, request: Mapping[str, Any]
    ) -> bool:
        """Record the passages, the answer and the provider's own citations of ``response``
        (one of ``anthropic``, ``openai``, ``cohere``, ``gemini``; the SDK object or its JSON,
        read duck-typed) with what of its ``request`` the citations point into (documents,
        messages, tools). The ``record_*_citations`` helpers call it; it replaces
        :meth:`set_passages` and :meth:`set_answer`. ``False`` when nothing was recorded (a
        response this provider's reader cannot read is a counted shim error, never raised).

        With a redact hook that changes the answer's length, or an answer the SDK cuts to its
        attribute length limit, the offsets would point into other text: the citations are not
        recorded, and the span says so (``citemon.citations_dropped``): the monitor counts the
        answer as ``citations_not_recorded``, never as uncited.
        """
        try:
            if not self.span.is_recording():
                return False
            out = to_json(response)
            got = parse_response(out, to_json(request)) if isinstance(out, dict) else None
            if got is None or got.provider != provider:
                raise ValueError(f"not a {provider} response with citations")
        except Exception as exc:
            self._stats._error("shim", exc)
            return False
        self.set_passages([p.as_dict() for p in got.passages])
        self.set_answer(got.answer)
        try:
            cleaned = self._clean(got.answer) if self._redact is not None else got.answer
            why = None
            if cleaned is None:
                why = "the redact hook failed on the answer"
            elif len(cleaned) != len(got.answer):
                why = "the redact hook changed the answer's length"
            elif self._too_long(cleaned):
                why = "the answer is longer than the span attribute length limit"
            if why is not None:
                # The offsets would point into other text, or past where the SDK cut the
                # answer: said, so that the monitor does not take the answer as uncited.
                self._citations_dropped(why)
                return False
            items = []
            for c in got.citations:
                item = c.as_dict()
                if c.quote is not None and self._redact is not None:
                    quote = self._clean(c.quote)
                    if quote is None:
                        del item["quote"]
                    else:
                        item["quote"] = quote
                items.append(item)
            packed = json.dumps(items, ensure_ascii=False)
            if self._too_long(packed):
                self._citations_dropped("the citations are longer than the attribute length limit")
                return False
            self.span.set_attribute(A.CITEMON_CITATIONS, utf8(packed))
            return True
        except Exception as exc:
            self._lost(exc)
            return False

    def _citations_dropped(self, why: str) -> None:
        self._truncated = True
        self.span.set_attribute(
            A.CITEMON_CITATIONS_DROPPED,
            f"citemon_instrumentation recorded the answer without its citations: {why}",
        )

    def _may_record(self, done: bool, method: str) -> bool:
        """Whether ``method`` records: the span is recording and this is its first call (a second
        call is counted and logged as a shim error, never raised into the host)."""
        try:
            if not self.span.is_recording():
                return False
        except Exception as exc:
            self._stats._error("shim", exc)
            return False
        if done:
            self._stats._error("shim", RuntimeError(f"{method} called twice on one answer span"))
            return False
        return True

    def _lost(self, exc: Exception) -> None:
        # Some or all of it went unrecorded: the monitor must say `unjudged`, not blame the
        # answer's citations for text it never saw.
        self._truncated = True
        self._stats._error("shim", exc)

    def _set_passages(self, passages: Iterable[PassageLike]) -> None:
        items = passages if isinstance(passages, list | tuple) else list(passages)
        total = len(items)
        if total > self._max_passages:
            items = items[: self._max_passages]
            self._truncated = True
        max_len = self._max_len
        budget: int | None = None
        if self._max_attrs is not None:
            # The SDK span's own attribute dict (cheaper than the public read-only view).
            present = getattr(self.span, "_attributes", None)
            if present is None:
                present = getattr(self.span, "attributes", None)
            used = len(present) if present is not None else 0
            reserved = 3  # citemon.passages.count, citemon.truncated, citemon.passages.overflow
            if not self._answer_set:
                reserved += 1  # output.value, still to come
            if self._redact is not None and (
                present is None or A.CITEMON_REDACTION_FAILED not in present
            ):
                reserved += 1  # citemon.redaction_failed, should the hook fail below
            budget = self._max_attrs - used - reserved

        attrs: dict[str, Any] = {A.CITEMON_PASSAGES_COUNT: total}
        keys = A.document_keys
        redact = self._redact
        used_budget = 0
        inline = 0
        for i, raw in enumerate(items):
            if type(raw) is dict and "metadata" not in raw and "source" not in raw:
                # The hot path (plain dicts), inlined: this loop runs per passage per request.
                pid = raw.get("id")
                text = raw.get("text")
                score = raw.get("score")
                metadata = None
                if (
                    type(pid) is not str
                    or type(text) is not str
                    or (score is not None and type(score) is not float)
                ):
                    pid, text, score, metadata = normalize(raw, i)
                elif not (text.isascii() and pid.isascii()):
                    pid, text = utf8(pid), utf8(text)
            else:
                pid, text, score, metadata = normalize(raw, i)
            need = 2 + (score is not None) + (metadata is not None)
            if budget is not None and used_budget + need > budget:
                break
            if redact is not None:
                text = utf8(self._clean(text) or "")
            k_id, k_content, k_score, k_metadata = keys(i)
            attrs[k_id] = pid
            attrs[k_content] = text
            if score is not None:
                attrs[k_score] = score
            if metadata is not None:
                attrs[k_metadata] = metadata
            if max_len is not None and (
                len(text) > max_len or len(pid) > max_len or len(metadata or "") > max_len
            ):
                self._truncated = True
            used_budget += need
            inline += 1

        if inline < len(items):
            if budget is not None and budget < 0:
                self._truncated = True  # not even the one overflow attribute fits
            else:
                rest = [normalize(raw, i) for i, raw in enumerate(items) if i >= inline]
                packed = json.dumps(
                    [
                        {"id": pid, "content": self._clean(text) or "", "score": sc, "metadata": md}
                        for pid, text, sc, md in rest
                    ],
                    ensure_ascii=False,
                )
                packed = utf8(packed)  # the redact hook's output
                if self._too_long(packed):
                    self._truncated = True
                else:
                    attrs[A.CITEMON_PASSAGES_OVERFLOW] = packed
        attrs[A.CITEMON_TRUNCATED] = self._truncated
        self.span.set_attributes(attrs)

    def _finish(self) -> None:
        """Count the answer, mark truncation and end the span; never raises."""
        try:
            if self.span.is_recording():
                stats = self._stats
                with stats._lock:
                    stats.answers += 1
                    if self._truncated:
                        stats.truncated += 1
                if self._truncated:
                    self.span.set_attribute(A.CITEMON_TRUNCATED, True)
        except Exception as exc:
            self._stats._error("shim", exc)
        try:
            self.span.end()
        except Exception as exc:
            self._stats._error("shim", exc)


def _start(
    question: str,
    *,
    tracer_provider: TracerProvider | None,
    redact: Redact | None,
    name: str,
    attributes: Mapping[str, Any] | None,
    max_passages: int,
    stats: ShimStats,
) -> AnswerSpan:
    try:
        q = question if type(question) is str else ("" if question is None else str(question))
        if not q.isascii():
            q = utf8(q)
        start_attrs: dict[str, Any] = {A.SPAN_KIND: "CHAIN"}
        if redact is None:
            start_attrs[A.INPUT_VALUE] = q  # no hook to run: set it with the span, one lock less
        if attributes:
            start_attrs.update(attributes)
        span = _tracer(tracer_provider).start_span(name, attributes=start_attrs)
        handle = AnswerSpan(span, redact=redact, max_passages=max_passages, stats=stats)
        if span.is_recording():
            if redact is not None:
                cleaned = handle._clean(q)
                if cleaned is not None:
                    q = utf8(cleaned)
                    span.set_attribute(A.INPUT_VALUE, q)
            if handle._too_long(q):
                handle._truncated = True
        return handle
    except Exception as exc:
        stats._error("shim", exc)
        return AnswerSpan(trace.INVALID_SPAN, redact=None, max_passages=max_passages, stats=stats)


@contextmanager
def answer_span(
    question: str,
    *,
    tracer_provider: TracerProvider | None = None,
    redact: Redact | None = None,
    name: str = A.ANSWER_SPAN_NAME,
    attributes: Mapping[str, Any] | None = None,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    stats: ShimStats | None = None,
) -> Iterator[AnswerSpan]:
    """Start a ``rag.answer`` span around a RAG handler's work and make it current.

    ``with answer_span(question) as span: ...; span.set_passages(p); span.set_answer(a)``. Spans
    started inside (the LLM call's, the retriever's) become its children. ``attributes`` are
    extra span attributes of yours; they count against the same attribute limit.
    """
    st = stats if stats is not None else STATS
    handle = _start(
        question,
        tracer_provider=tracer_provider,
        redact=redact,
        name=name,
        attributes=attributes,
        max_passages=max_passages,
        stats=st,
    )
    with trace.use_span(
        handle.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield handle
        except Exception as exc:  # the host's error: record it on the span, then re-raise it
            if handle.span.is_recording():
                # The status first, with a description that cannot fail: an exception whose
                # str() raises still ends the span in error (record_exception calls str() too).
                try:
                    described = f"{type(exc).__name__}: {exc}"
                except Exception:
                    described = type(exc).__name__
                try:
                    handle.span.set_status(StatusCode.ERROR, described)
                    handle.span.record_exception(exc)
                except Exception as inner:
                    st._error("shim", inner)
            raise
        finally:
            handle._finish()


def record_answer(
    *,
    question: str,
    answer: str,
    passages: Iterable[PassageLike],
    tracer_provider: TracerProvider | None = None,
    redact: Redact | None = None,
    name: str = A.ANSWER_SPAN_NAME,
    attributes: Mapping[str, Any] | None = None,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    stats: ShimStats | None = None,
) -> None:
    """Record a finished answer in one call (a ``rag.answer`` span, child of the current span)."""
    st = stats if stats is not None else STATS
    handle = _start(
        question,
        tracer_provider=tracer_provider,
        redact=redact,
        name=name,
        attributes=attributes,
        max_passages=max_passages,
        stats=st,
    )
    handle.set_passages(passages)
    handle.set_answer(answer)
    handle._finish()
