"""The held-parts store's pieces without a broker: the value format, what each change writes,
the assembler holding bare roots as a trace ID and bounded in bytes, restoring, and the ledger's
anchor entries (the broker-backed paths: tests/integration/test_busy_topic.py)."""

from __future__ import annotations

import zlib

import pytest
from aiokafka import TopicPartition

from citemon._core.records import Passage
from citemon._otlp.assembly import ROOT_BYTES, TraceAssembler
from citemon._otlp.spans import ResourceInfo, TraceSpan
from citemon._service.held import HeldParts, HeldTrace, decode_held, encode_held
from citemon._service.ledger import Ledger

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
A, B, C = "a" * 32, "b" * 32, "c" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def part(trace: str, span: str, parent: str = "p", **fields: object) -> TraceSpan:
    return TraceSpan(
        trace_id=trace,
        span_id=span,
        parent_span_id=parent,
        kind="RETRIEVER",
        start_ns=1,
        end_ns=2,
        resource=ResourceInfo("rag-bot", "v1", None),
        **fields,  # type: ignore[arg-type]
    )


DOCS = [Passage(id="p-1", text="Audit logs: 90 days.", score=0.5, metadata={"page": 3})]


def test_a_held_trace_reads_back_as_it_was_written() -> None:
    spans = [
        (7, part(A, "1", documents=DOCS, question="how long?", dialect="openinference")),
        (9, part(A, "2", answer="90 days [p-1]", truncated=True, nbytes=321)),
    ]
    back = decode_held(encode_held(HeldTrace(spans, root_seen=True, seen_at=1234.5)))
    assert back.parts == spans and back.root_seen and back.seen_at == 1234.5


def test_an_unreadable_held_value_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unreadable"):
        decode_held(b"not zlib")
    with pytest.raises(ValueError, match="format 9"):
        decode_held(zlib.compress(b'{"v": 9}'))


def test_each_record_writes_the_traces_parts_so_far_and_leaving_writes_a_tombstone() -> None:
    held = HeldParts("g.held-spans", max_value_bytes=100_000)
    first = held.upsert(A, TP1, 3, [part(A, "1", documents=DOCS)], root_seen=False, age_s=0.0)
    second = held.upsert(A, TP1, 8, [part(A, "2", answer="x")], root_seen=False, age_s=0.0)
    assert first is not None and second is not None
    assert (second.topic, second.key, second.partition) == ("g.held-spans", A.encode(), 1)
    assert [o for o, _ in decode_held(second.value or b"").parts] == [3, 8]
    assert held.partitions(A) == [TP1] and held.upserts == 2
    ((tp, tombstone),) = held.gone(A)
    assert (tp, tombstone.key, tombstone.value, tombstone.partition) == (TP1, A.encode(), None, 1)
    assert held.gone(A) == [] and len(held) == 0


def test_parts_too_large_for_the_topic_are_not_kept_there() -> None:
    held = HeldParts("h", max_value_bytes=64)
    big = [part(A, "1", documents=[Passage(id="p", text="x" * 5000 + "y" * 5000)])]
    assert held.upsert(A, TP0, 1, big, root_seen=False, age_s=0.0) is None
    assert held.too_large == 1 and A not in held


def test_a_revoke_forgets_the_traces_with_parts_in_its_partitions() -> None:
    held = HeldParts("h", max_value_bytes=100_000)
    held.upsert(A, TP0, 1, [part(A, "1", answer="x")], root_seen=False, age_s=0.0)
    held.upsert(B, TP1, 1, [part(B, "1", answer="y")], root_seen=False, age_s=0.0)
    assert held.drop({TP0}) == [A]
    assert A not in held and held.partitions(B) == [TP1]


def test_a_bare_root_is_held_as_its_trace_id_and_completes_a_trace_whose_parts_follow() -> None:
    clock = Clock()
    assembler = TraceAssembler(window_s=30, clock=clock)
    assert assembler.add([part(A, "r", parent="")]) == []  # nothing read from it
    assert (len(assembler), assembler.roots, assembler.nbytes) == (0, 1, ROOT_BYTES)
    clock.now = 5.0
    (record,) = assembler.add([part(A, "1", documents=DOCS), part(A, "2", answer="x [p-1]")])
    assert record.trace_id == A and assembler.completed == 1 and assembler.nbytes == 0
    assert assembler.take_gone() == [A]


def test_over_its_bytes_bare_roots_go_first_then_the_oldest_trace() -> None:
    clock = Clock()
    assembler = TraceAssembler(window_s=30, max_bytes=1000, clock=clock)
    assembler.add([part(A, "1", documents=DOCS, nbytes=600)])
    assembler.add([part(f"{i:032x}", "r", parent="") for i in range(4)])  # 4 x 96 bytes
    assert assembler.nbytes == 600 + 4 * ROOT_BYTES
    assembler.add([part(B, "1", documents=DOCS, nbytes=300)])  # over 1000: roots go first
    assert (assembler.roots, len(assembler), assembler.nbytes) == (1, 2, 996)
    assert (assembler.evicted, assembler.unrecognized) == (3, 3)
    assembler.add([part(C, "1", answer="x", nbytes=300)])  # the last root, then the oldest trace
    assert (assembler.roots, assembler.unrecognized, assembler.take_gone()) == (0, 4, [A])
    assert (assembler.evicted, assembler.no_answer, len(assembler), assembler.nbytes) == (
        5,
        1,
        2,
        600,
    )


def test_a_restored_trace_keeps_its_age_and_settles_when_its_window_ends() -> None:
    clock = Clock()
    clock.now = 100.0
    assembler = TraceAssembler(window_s=30, clock=clock)
    assembler.add([part(B, "1", answer="y", nbytes=10)])  # a young trace held here
    spans = [part(A, "1", documents=DOCS), part(A, "2", answer="x [p-1]")]
    assert assembler.restore(A, spans, root_seen=False, age_s=29.0)
    assert not assembler.restore(A, spans, root_seen=False, age_s=29.0)  # held already
    assembler.restored_all()  # the older trace first: the sweep settles it before B
    assert assembler.oldest_age_s() == 29.0
    clock.now = 101.0
    assembler.expire()
    (record,) = assembler.take_ready()
    assert record.trace_id == A and assembler.settled == 1 and assembler.restored == 1
    assert assembler.take_gone() == [A] and B in assembler


def test_an_anchor_commits_at_the_position_and_stays_until_it_is_finished() -> None:
    ledger = Ledger()
    ledger.assign([TP0], opening=False)
    assert ledger.anchor(TP0) is None  # nothing taken, nothing committed: no position
    entry = ledger.take(TP0, 4)
    assert entry is not None
    anchor = ledger.anchor(TP0)
    assert anchor is not None and anchor.offset == 4
    ledger.release(entry)
    (ready,) = ledger.ready()
    assert (ready.offset, ready.entries) == (5, [entry])
    ledger.confirm(ready)
    assert ledger.uncommitted(TP0) == 1  # the anchor, still pending, shares offset 4
    ledger.release(anchor)
    (ready,) = ledger.ready()
    assert (ready.offset, ready.entries) == (5, [anchor])
    later = ledger.take(TP0, 5)  # records after an anchor are in order
    assert later is not None and later.offset == 5
