"""Traces that give no answer are counted by outcome (``citemon_traces_total``) and, when
asked, kept for an explanation."""

from __future__ import annotations

from citemon.core.records import Passage
from citemon.otlp.assembly import TraceAssembler
from citemon.otlp.spans import ResourceInfo, TraceSpan


def part(trace: str, span: str, parent: str = "p", **fields: object) -> TraceSpan:
    return TraceSpan(
        trace_id=trace,
        span_id=span,
        parent_span_id=parent,
        kind="",
        start_ns=1,
        end_ns=2,
        resource=ResourceInfo(),
        **fields,  # type: ignore[arg-type]
    )


def test_each_trace_without_an_answer_is_counted_once_by_outcome() -> None:
    assembler = TraceAssembler(explain=True)
    docs = [Passage(id="d-1", text="t")]
    got = assembler.add(
        [
            part("a" * 32, "1", answer="an answer [d-1]"),  # no passages
            part("a" * 32, "2", parent=""),
            part("b" * 32, "3", documents=docs),  # no answer
            part("b" * 32, "4", parent=""),
            part("c" * 32, "5", parent=""),  # nothing any dialect read
            part("d" * 32, "6", documents=docs),  # a whole answer
            part("d" * 32, "7", answer="x [d-1]"),
            part("d" * 32, "8", parent=""),
        ]
    )
    assert [r.trace_id for r in got] == ["d" * 32]
    assert assembler.unrecognized == 1 and (assembler.no_passages, assembler.no_answer) == (0, 0)
    assert assembler.flush() == []
    assert (assembler.no_passages, assembler.no_answer, assembler.dropped_incomplete) == (1, 1, 2)
    assert [(u.trace_id[0], u.outcome, len(u.parts)) for u in assembler.take_unanswered()] == [
        ("c", "unrecognized", 1),
        ("a", "no_passages", 2),
        ("b", "no_answer", 2),
    ]
    assert assembler.take_unanswered() == []


def test_without_explain_nothing_is_kept() -> None:
    assembler = TraceAssembler()
    assembler.add([part("c" * 32, "5", parent="")])
    assert assembler.unrecognized == 1 and assembler.take_unanswered() == []
