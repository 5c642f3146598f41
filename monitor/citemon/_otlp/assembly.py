"""Multi-span traces assembled into answers: the parts the dialects read (documents on a
retriever span, answer candidates on chain, chat or workflow spans), in a buffer bounded by time
and bytes; and the traces that gave no answer, counted by outcome.

A trace of other telemetry (an HTTP server span with database and client children: nothing any
dialect reads) costs one small entry: its root's trace ID and when it came, held for the window in
case the rest of a RAG trace follows, and the first thing let go when memory runs short."""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from citemon._core.records import AnswerRecord, Passage
from citemon._otlp.dropped_citations import dropped_citations
from citemon._otlp.spans import DEFAULT_MAX_CONTEXT_BYTES, DEFAULT_MAX_PASSAGES, TraceSpan

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_TRACES",
    "DEFAULT_WINDOW_S",
    "FINAL_OUTCOMES",
    "NO_ANSWER_OUTCOMES",
    "ROOT_BYTES",
    "TRACE_OUTCOMES",
    "TraceAssembler",
    "Unanswered",
    "describe",
    "looks_cut",
    "retrievals",
]
DEFAULT_WINDOW_S: Final = 30.0
"""How long the assembler waits for the rest of a trace, in seconds."""
DEFAULT_MAX_TRACES: Final = None
"""No cap on the count of held traces: memory is bounded in bytes (``max_bytes``)."""
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""Approximate bytes the assembler holds at once (parts' text, and a bare root's entry)."""
ROOT_BYTES: Final = 96
"""What a bare root held alone is charged: its trace ID, time and the dict's slot."""
_MAX_ANSWERED: Final = 50_000
"""Trace IDs remembered as answered, so that late parts of them are not held again."""
_REPR_START: Final = re.compile(r"[A-Za-z_][\w.]*\(")
"""How a Python repr starts (``StopEvent(``, ``AgentOutput(``), as an answer's prose hardly does."""
NO_ANSWER_OUTCOMES: Final = (
    "unrecognized",
    "no_passages",
    "no_answer",
    "no_content",
    "citations_not_recorded",
)
"""Why a trace gave no answer (``citemon_traces_total{outcome}``): ``unrecognized`` — it ended
(its root arrived), no dialect read anything from it and nothing more came within the window;
``no_passages`` — an answer but no retrieved documents; ``no_answer`` — documents but no answer;
``no_content`` — its spans were recorded with content capture off (no text, IDs or results);
``citations_not_recorded`` — the request asked the provider for citations and the
instrumentation recorded none (:mod:`citemon._otlp.dropped_citations`): not scored, since its
claims would count as uncited when the model did cite."""
TRACE_OUTCOMES: Final = (
    "completed",
    "settled",
    "dropped_incomplete",
    "evicted",
    "superseded",
    *NO_ANSWER_OUTCOMES,
)
"""What the assembler did with multi-span traces (any dialect), and the traces that gave no
answer: the values of ``citemon_traces_total{outcome}``, counted by :class:`TraceAssembler`
and read by the metrics at scrape time (:meth:`TraceAssembler.outcomes`).

Every trace the assembler held is counted once, when it leaves, under exactly one of
:data:`FINAL_OUTCOMES`: ``completed`` (the root arrived with documents and an answer),
``settled`` (scored without its root when its window ended, or early for memory),
``superseded`` (the trace carried a self-contained ``rag.answer`` span, which was scored
instead), or one of :data:`NO_ANSWER_OUTCOMES`. Two more values are sums over those, not outcomes
of their own: ``dropped_incomplete`` = ``no_passages`` + ``no_answer`` + ``no_content`` (let go
without documents or an answer, not scored), and ``evicted`` = those of them let go *before*
their window ended to keep the assembler within ``max_bytes`` (bare roots first, then the oldest
traces)."""
FINAL_OUTCOMES: Final = ("completed", "settled", "superseded", *NO_ANSWER_OUTCOMES)
"""The outcomes that partition the traces: each held trace is counted under one of them."""
_MAX_UNANSWERED: Final = 1000


@dataclass(slots=True)
class Unanswered:
    """A trace that gave no answer, for explaining it (``citemon score``): its outcome and the
    parts the dialects did read (none when ``unrecognized``)."""

    trace_id: str
    outcome: str
    parts: list[TraceSpan]


# -- assembly of traces -------------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    first_seen: float
    spans: list[TraceSpan] = field(default_factory=list)
    nbytes: int = 0
    root_seen: bool = False


class TraceAssembler:
    """Joins trace parts, whichever dialect read them (documents on a retriever span, answer
    candidates on chain, chat or workflow spans) into records, holding about ``max_bytes`` (and,
    if given, at most ``max_traces`` traces), each for at most ``window_s`` seconds.

    A trace is complete when its root span has arrived and it holds documents and an answer
    (spans end, and are exported, children first; a root that comes first waits for the rest).
    A trace whose root never comes (it lives in another service) is *settled* when its window
    ends or memory runs short: scored if it has documents and an answer, otherwise dropped and
    counted. The answer is taken from the outermost answer-bearing span that ends
    after retrieval (the chain's final output, not a question-rewriting step before it).
    Documents that several retriever spans report alike (a retriever nested in another) are
    taken once.

    A root no dialect read anything from (a *bare* root: the HTTP server span of a request that
    was no RAG answer, or of one whose other parts are still to come) is held as its trace ID
    alone, charged :data:`ROOT_BYTES`: if a part of its trace follows within the window the trace
    is known to have ended, otherwise it is counted ``unrecognized`` when the window ends. Under
    memory pressure bare roots go first (``evicted`` and ``unrecognized``), then the oldest
    traces with parts.

    Counters: see :data:`TRACE_OUTCOMES` (each trace counted once, under one of
    :data:`FINAL_OUTCOMES`, when it leaves). With ``explain=True`` the assembler keeps the traces
    that gave no answer (at most 1,000 at a time) for :meth:`take_unanswered`.
    """

    def __init__(
        self,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_traces: int | None = DEFAULT_MAX_TRACES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_passages: int = DEFAULT_MAX_PASSAGES,
        max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
        clock: Callable[[], float] = time.monotonic,
        explain: bool = False,
    ) -> None:
        self.window_s = window_s
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.max_passages = max_passages
        self.max_context_bytes = max_context_bytes
        self._clock = clock
        self._traces: OrderedDict[str, _Pending] = OrderedDict()
        self._roots: OrderedDict[str, float] = OrderedDict()  # bare roots alone: when they came
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._ready: list[AnswerRecord] = []
        self._gone: list[str] = []
        self.nbytes = 0
        self.completed = 0
        self.settled = 0
        self.dropped_incomplete = 0
        self.evicted = 0
        self.superseded = 0
        self.discarded = 0
        self.restored = 0
        self.unrecognized = 0
        self.no_passages = 0
        self.no_answer = 0
        self.citations_not_recorded = 0
        self.no_content = 0
        self.explain = explain
        self._unanswered: list[Unanswered] = []

    def __len__(self) -> int:
        """Traces held with parts (bare roots alone are not counted: :attr:`roots`)."""
        return len(self._traces)

    @property
    def roots(self) -> int:
        """Bare roots held alone (their trace's other parts, if any, not come yet)."""
        return len(self._roots)

    def outcomes(self) -> dict[str, int]:
        """The count of every outcome of :data:`TRACE_OUTCOMES`, in that order."""
        return {outcome: getattr(self, outcome) for outcome in TRACE_OUTCOMES}

    def oldest_age_s(self) -> float:
        """How long the oldest trace held with parts has waited, in seconds (0: none held)."""
        for pending in self._traces.values():
            return max(0.0, self._clock() - pending.first_seen)
        return 0.0

    def __contains__(self, trace_id: object) -> bool:
        """Whether the trace is held with parts, waiting for more or for its window."""
        return trace_id in self._traces

    def parts(self, trace_id: str) -> tuple[list[TraceSpan], bool, float] | None:
        """A held trace's parts, whether its root came, and its age in seconds (None: not
        held with parts)."""
        pending = self._traces.get(trace_id)
        if pending is None:
            return None
        return pending.spans, pending.root_seen, max(0.0, self._clock() - pending.first_seen)

    def take_gone(self) -> list[str]:
        """The traces held with parts that left since the last call, whatever became of them
        (completed, settled, dropped, evicted, superseded), in the order they left; not those
        :meth:`discard` forgot."""
        out, self._gone = self._gone, []
        return out

    def discard(self, trace_ids: Iterable[str]) -> int:
        """Forget held traces without scoring them (their Kafka partition was revoked: the
        next owner restores or reads their parts again); returns how many were held. They are
        not remembered as answered, so parts read again later start them afresh."""
        n = 0
        for tid in trace_ids:
            pending = self._traces.pop(tid, None)
            if pending is not None:
                self.nbytes -= pending.nbytes
                n += 1
        self.discarded += n
        return n

    def restore(
        self, trace_id: str, spans: list[TraceSpan], *, root_seen: bool, age_s: float
    ) -> bool:
        """Hold a trace's parts again, as they were held ``age_s`` seconds ago (read back from
        the held-parts store when its partition was assigned here); False when it is held
        already or was answered here. Call :meth:`restored_all` after a batch of these."""
        if trace_id in self._traces or trace_id in self._answered or not spans:
            return False
        pending = self._traces[trace_id] = _Pending(
            first_seen=self._clock() - max(0.0, age_s), root_seen=root_seen
        )
        root = self._roots.pop(trace_id, None)
        if root is not None:
            self.nbytes -= ROOT_BYTES
            pending.root_seen = True
        for s in spans:
            pending.spans.append(s)
            pending.nbytes += s.nbytes
        self.nbytes += pending.nbytes
        self.restored += 1
        return True

    def restored_all(self) -> None:
        """Keep the held traces in the order they came (the window sweeps the oldest first)."""
        ordered = sorted(self._traces.items(), key=lambda item: item[1].first_seen)
        self._traces = OrderedDict(ordered)

    def forget_answered(self, trace_ids: Iterable[str]) -> None:
        """Forget that these traces were answered: their answers were dropped uncommitted
        (partition revoked or lost), so parts read again must assemble them afresh. (True
        redeliveries of a *committed* answer are still dropped by the pipeline's dedupe.)"""
        for tid in trace_ids:
            self._answered.pop(tid, None)

    def __repr__(self) -> str:
        return (
            f"TraceAssembler(pending={len(self._traces)}, roots={len(self._roots)}, "
            f"bytes={self.nbytes}, completed={self.completed}, settled={self.settled}, "
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
                    self._gone.append(tid)
                if self._roots.pop(tid, None) is not None:
                    self.nbytes -= ROOT_BYTES
                    self.superseded += 1
                self._remember(tid)
                continue
            if tid in self._answered:
                continue
            # Nothing read from it; a content-off span or an unread tool is a part (explained).
            bare = s.documents is None and s.answer is None and not (s.no_content or s.tool)
            pending = self._traces.get(tid)
            if pending is None:
                if bare and not s.is_root:
                    continue
                if bare:
                    # Nothing read from it: keep its trace ID alone, in case the rest of a RAG
                    # trace follows (a reordering collector); counted once, when it is
                    # completed or its window ends (``unrecognized`` then).
                    if tid not in self._roots:
                        self._roots[tid] = now
                        self.nbytes += ROOT_BYTES
                    continue
                first_seen = self._roots.pop(tid, None)
                pending = self._traces[tid] = _Pending(
                    first_seen=now if first_seen is None else first_seen
                )
                if first_seen is not None:
                    self.nbytes -= ROOT_BYTES
                    pending.root_seen = True
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
            if record is None and dropped_citations(pending.spans) is not None:
                # The answer is here and its citations never will be: no need to wait.
                del self._traces[tid]
                self.nbytes -= pending.nbytes
                self._not_recorded(pending)
                self._remember(tid)
                continue
            if record is None:
                # The root came first (another exporter's batch, a reordering collector): keep
                # the trace until its other parts arrive or its window settles it.
                continue
            del self._traces[tid]
            self._gone.append(tid)
            self.nbytes -= pending.nbytes
            self.completed += 1
            self._remember(tid)  # parts still in flight (root came first) are ignored
            out.append(record)
        self._evict(out)
        self._sweep(now, out)
        return out

    def _over(self) -> bool:
        held = len(self._traces) + len(self._roots)
        return self.nbytes > self.max_bytes or (
            self.max_traces is not None and held > self.max_traces
        )

    def _evict(self, out: list[AnswerRecord]) -> None:
        """Within the caps: bare roots first (the cheapest to lose: nothing was read from
        them), then the oldest traces with parts, settled early."""
        while self._roots and self._over():
            tid, _ = self._roots.popitem(last=False)
            self.nbytes -= ROOT_BYTES
            self.evicted += 1
            self._unrecognized_root(tid)
        while self._traces and self._over():
            self.evicted += 1
            tid, pending = self._traces.popitem(last=False)
            self._gone.append(tid)
            self._settle(pending, out)

    def _remember(self, tid: str) -> None:
        """Traces already answered, so late parts are not held or scored again (bounded)."""
        self._answered[tid] = None
        if len(self._answered) > _MAX_ANSWERED:
            self._answered.popitem(last=False)

    def expire(self) -> int:
        """Settle traces older than the window; return how many were dropped incomplete.
        Settled answers are returned by the next :meth:`add` (or :meth:`take_ready`)."""
        before = self.dropped_incomplete
        self._sweep(self._clock(), self._ready)
        return self.dropped_incomplete - before

    def take_unanswered(self) -> list[Unanswered]:
        """Traces that gave no answer since the last call (only with ``explain=True``)."""
        out, self._unanswered = self._unanswered, []
        return out

    def _unanswered_add(self, item: Unanswered) -> None:
        if self.explain and len(self._unanswered) < _MAX_UNANSWERED:
            self._unanswered.append(item)

    def take_ready(self) -> list[AnswerRecord]:
        """Answers settled by :meth:`expire` and not yet returned."""
        out, self._ready = self._ready, []
        return out

    def flush(self) -> list[AnswerRecord]:
        """Settle everything now (shutdown, end of a file)."""
        out, self._ready = self._ready, []
        while self._traces:
            tid, pending = self._traces.popitem(last=False)
            self._gone.append(tid)
            self._settle(pending, out)
        while self._roots:
            tid, _ = self._roots.popitem(last=False)
            self.nbytes -= ROOT_BYTES
            self._unrecognized_root(tid)
        return out

    def _sweep(self, now: float, out: list[AnswerRecord]) -> None:
        while self._roots:
            tid, first_seen = next(iter(self._roots.items()))
            if now - first_seen < self.window_s:
                break
            del self._roots[tid]
            self.nbytes -= ROOT_BYTES
            self._unrecognized_root(tid)
        while self._traces:
            tid, pending = next(iter(self._traces.items()))
            if now - pending.first_seen < self.window_s:
                break
            del self._traces[tid]
            self._gone.append(tid)
            self._settle(pending, out)

    def _unrecognized_root(self, tid: str) -> None:
        """Only a bare root came: the trace ended and no dialect read anything from it."""
        self.unrecognized += 1
        self._unanswered_add(Unanswered(tid, "unrecognized", []))

    def _settle(self, pending: _Pending, out: list[AnswerRecord]) -> None:
        self.nbytes -= pending.nbytes
        record = self._assemble(pending)
        if record is None and dropped_citations(pending.spans) is not None:
            self._not_recorded(pending)
        elif record is None and any(s.no_content for s in pending.spans):
            # Recorded with content capture off: nothing to read, and the fix is a setting.
            self.dropped_incomplete += 1
            self.no_content += 1
            tid = pending.spans[0].trace_id if pending.spans else ""
            self._unanswered_add(Unanswered(tid, "no_content", pending.spans))
        elif record is None and all(
            s.documents is None and s.answer is None for s in pending.spans
        ):
            # Only bare roots: the trace ended and no dialect read anything from it.
            self.unrecognized += 1
            tid = pending.spans[0].trace_id if pending.spans else ""
            self._unanswered_add(Unanswered(tid, "unrecognized", pending.spans))
        elif record is None:
            self.dropped_incomplete += 1
            has_docs = any(s.documents is not None for s in pending.spans)
            outcome = "no_answer" if has_docs else "no_passages"
            if has_docs:
                self.no_answer += 1
            else:
                self.no_passages += 1
            tid = pending.spans[0].trace_id if pending.spans else ""
            self._unanswered_add(Unanswered(tid, outcome, pending.spans))
        else:
            self.settled += 1
            out.append(record)

    def _not_recorded(self, pending: _Pending) -> None:
        self.citations_not_recorded += 1
        tid = pending.spans[0].trace_id if pending.spans else ""
        self._unanswered_add(Unanswered(tid, "citations_not_recorded", pending.spans))

    def _assemble(self, pending: _Pending) -> AnswerRecord | None:
        retrievers = sorted(retrievals(pending.spans), key=lambda s: s.start_ns)
        answers = [s for s in pending.spans if s.answer is not None]
        if not retrievers or not answers:
            return None
        retrieved_by = max(s.end_ns for s in retrievers)
        after = [s for s in answers if s.end_ns >= retrieved_by] or answers
        # A candidate cut short (a framework's repr ending in "...") loses to a whole one.
        whole = [s for s in after if not looks_cut(s.answer or "")]
        best = min(whole or after, key=lambda s: (s.start_ns, -s.end_ns))
        # The provider's own citations of this answer (an outer chain may repeat the model's
        # text): they name the documents the model was given, which are then the passages.
        native = next(
            (s for s in (best, *answers) if s.citations is not None and s.answer == best.answer),
            None,
        )
        if native is not None and native.documents is not None:
            retrievers = [native]
        elif dropped_citations(pending.spans) is not None:
            return None  # not uncited: the instrumentation dropped them (_settle counts it)
        passages: list[Passage] = []
        truncated = best.truncated or not whole
        seen: set[tuple[str, str]] = set()
        for r in retrievers:
            truncated |= r.truncated
            for d in r.documents or ():
                if d.id and (d.id, d.text) in seen:
                    continue  # a retriever nested in another reports the same documents
                seen.add((d.id, d.text))
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
        record = AnswerRecord(
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
            citations=native.citations if native is not None else None,
        )
        record.origin.update(
            passages="; ".join(
                f"{describe(r)}: {len(r.documents or ())} document(s)" for r in retrievers
            ),
            answer=describe(best) + ("" if whole else " (cut short: ends with '...')"),
        )
        return record


def retrievals(parts: Iterable[TraceSpan]) -> list[TraceSpan]:
    """The parts whose documents are the answer's retrieved passages. A tool's result gives way
    to a retriever span inside the tool (it holds the same documents, better: scores,
    metadata); tool results read from chat messages count only when no tool span was read, and
    then only the latest chat span's (its input holds every earlier result)."""
    parts = [p for p in parts if p.documents is not None]
    retrievers = [p for p in parts if not p.tool and not p.from_messages]
    spans = [p for p in parts if p.tool and not p.from_messages]
    spans = [t for t in spans if not any(_inside(r, t) for r in retrievers)]
    if spans or retrievers:
        return [*retrievers, *spans]
    in_messages = [p for p in parts if p.from_messages]
    return [max(in_messages, key=lambda p: p.start_ns)] if in_messages else []


def _inside(retriever: TraceSpan, tool: TraceSpan) -> bool:
    """Whether the retriever ran inside the tool: its child, or within the tool's time. The
    parent link decides where times cannot: OpenInference's LangChain.js instrumentation starts
    spans at LangChain's millisecond ``Date.now()`` and ends them on the high-resolution clock,
    so a retriever inside a tool can seem to start after the tool ended."""
    if retriever.parent_span_id == tool.span_id:
        return True
    return tool.start_ns <= retriever.start_ns and retriever.end_ns <= tool.end_ns


def looks_cut(text: str) -> bool:
    """An output cut short for display: a Python repr ending in ``...`` (LlamaIndex's
    ``FunctionAgent.run`` records ``StopEvent(result=AgentOutput(…`` cut at 200 characters).
    Prose that ends in an ellipsis is an answer trailing off, not a cut: taking it for one
    would turn its failing claims ``unjudged`` and lift the accuracy."""
    shown = text.strip()
    return shown.endswith(("...", "…")) and _REPR_START.match(shown) is not None


def describe(part: TraceSpan) -> str:
    """``span 'name' (dialect kind)``: where a part of an answer came from."""
    what = " ".join(x for x in (part.dialect, part.kind) if x)
    # The kind comes from the trace (a span kind attribute, a tool's name): escaped when not
    # printable, as the name is by repr().
    what = what if what.isprintable() else repr(what)[1:-1]
    return f"span {part.name!r} {part.span_id}" + (f" ({what})" if what else "")
