"""Traces that give no answer are counted by outcome (``citemon_traces_total``) and, when
asked, kept for an explanation."""

from __future__ import annotations

from citemon._core.records import Passage
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.spans import ResourceInfo, TraceSpan


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
    # Nothing is counted before the window ends: the rest of "c" may still come.
    assert (assembler.unrecognized, assembler.no_passages, assembler.no_answer) == (0, 0, 0)
    assert assembler.flush() == []
    assert (assembler.no_passages, assembler.no_answer, assembler.dropped_incomplete) == (1, 1, 2)
    assert assembler.unrecognized == 1
    assert [(u.trace_id[0], u.outcome, len(u.parts)) for u in assembler.take_unanswered()] == [
        ("a", "no_passages", 2),
        ("b", "no_answer", 2),
        ("c", "unrecognized", 0),  # a bare root alone is held as its trace ID only
    ]
    assert assembler.take_unanswered() == []


def test_without_explain_nothing_is_kept() -> None:
    assembler = TraceAssembler()
    assembler.add([part("c" * 32, "5", parent="")])
    assembler.flush()
    assert assembler.unrecognized == 1 and assembler.take_unanswered() == []


def test_a_root_that_comes_first_is_counted_once_when_the_rest_arrives() -> None:
    """A bare root (nothing any dialect reads on it) ahead of the trace's other parts: one
    trace, one outcome (``completed``), not ``unrecognized`` at once and ``settled`` later."""
    now = [0.0]
    assembler = TraceAssembler(window_s=30.0, clock=lambda: now[0])
    docs = [Passage(id="d-1", text="t")]
    assert assembler.add([part("e" * 32, "1", parent="")]) == []
    now[0] = 10.0
    got = assembler.add(
        [part("e" * 32, "2", documents=docs), part("e" * 32, "3", answer="x [d-1]")]
    )
    assert [r.trace_id for r in got] == ["e" * 32]
    now[0] = 100.0
    assembler.expire()
    counts = (assembler.completed, assembler.settled, assembler.unrecognized)
    assert counts == (1, 0, 0)
    assert (assembler.dropped_incomplete, assembler.no_passages, assembler.no_answer) == (0, 0, 0)


def test_a_bare_root_alone_is_unrecognized_when_its_window_ends() -> None:
    now = [0.0]
    assembler = TraceAssembler(window_s=30.0, clock=lambda: now[0])
    assembler.add([part("f" * 32, "1", parent="")])
    now[0] = 29.0
    assert assembler.expire() == 0 and assembler.unrecognized == 0
    now[0] = 31.0
    assembler.expire()
    assert (assembler.unrecognized, assembler.dropped_incomplete, len(assembler)) == (1, 0, 0)
