"""The pipeline's pure parts: ordered offsets, the dedupe window, and the judge-outage gate."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from citemon.core.records import AnswerScore, ClaimResult, UnjudgedCause
from citemon.service.dedupe import DedupeWindow
from citemon.service.gate import JudgeGate, judge_failed
from citemon.service.offsets import OffsetTracker

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_commits_only_the_finished_prefix_with_gaps_in_offsets() -> None:
    tracker: OffsetTracker[TopicPartition] = OffsetTracker()
    tracker.assign([TP0, TP1])
    entries = {o: tracker.add(TP0, o) for o in (5, 6, 9, 10)}  # 7, 8: compacted/markers
    other = tracker.add(TP1, 0)
    assert tracker.ready() == []
    tracker.release(entries[6])
    tracker.release(entries[9])
    assert tracker.ready() == []  # 5 still running: nothing after it may commit
    tracker.release(entries[5])
    (r,) = tracker.ready()
    assert (r.tp, r.offset, [e.offset for e in r.entries]) == (TP0, 10, [5, 6, 9])
    tracker.confirm([r])
    assert tracker.committed(TP0) == 10
    assert len(tracker) == 2 and tracker.unfinished() == 2
    tracker.hold(entries[10])
    tracker.release(entries[10])
    assert tracker.ready() == []  # held once more: still pending
    tracker.release(entries[10])
    assert [x.offset for x in tracker.ready()] == [11]
    lost = tracker.revoke([TP1])
    assert lost == [other] and not other.alive


def test_out_of_order_add_is_refused() -> None:
    tracker: OffsetTracker[TopicPartition] = OffsetTracker()
    tracker.add(TP0, 3)
    with pytest.raises(ValueError, match="not in order"):
        tracker.add(TP0, 3)  # repeated
    with pytest.raises(ValueError, match="not in order"):
        tracker.add(TP0, 2)  # earlier
    assert tracker.add(TP1, 2).offset == 2  # another partition keeps its own order
    assert tracker.add(TP0, 4).offset == 4


def test_dedupe_window_is_bounded_lru() -> None:
    window = DedupeWindow(3)
    for i in range(5):
        window.add((f"t{i}", "s"))
    assert len(window) == 3
    assert ("t1", "s") not in window and ("t4", "s") in window
    window.add(("t2", "s"))  # touched: now newest
    window.add(("t5", "s"))
    assert ("t2", "s") in window and ("t3", "s") not in window


def _score(cause: UnjudgedCause | None, reason: str | None = None) -> AnswerScore:
    return AnswerScore(
        claims=[
            ClaimResult(
                sentence=0,
                text="x",
                cited_ids=["p"],
                verdict="unjudged",
                reason=reason,
                unjudged_cause=cause,
            )
        ]
    )


def test_judge_failed_only_for_judge_errors() -> None:
    assert judge_failed(_score("judge_failure"))
    assert not judge_failed(_score("truncated"))
    assert not judge_failed(_score("search_cut"))
    assert not judge_failed(_score(None, reason="judge failed: 503"))  # the cause, not the text


async def test_gate_holds_during_an_outage_and_probes_one_at_a_time() -> None:
    now = [100.0]
    gate = JudgeGate(backoff_s=0.05, backoff_max_s=0.2, clock=lambda: now[0])
    assert await gate.acquire() is False  # healthy: pass
    # An attempt fails and nothing succeeded since it began: outage.
    assert gate.report(ok=False, started=99.0, probe=False) is True
    assert gate.down
    waiters = [asyncio.create_task(gate.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    now[0] += 1.0  # past the backoff: the first waiter becomes the probe
    gate._dispatch()
    await asyncio.sleep(0)
    assert [w.done() for w in waiters] == [True, False, False]
    assert waiters[0].result() is True
    # The probe succeeds: everyone goes, as non-probes.
    gate.report(ok=True, started=now[0], probe=True)
    await asyncio.sleep(0)
    assert [w.result() for w in waiters[1:]] == [False, False]
    assert not gate.down and gate.outages == 1 and gate.probes == 1


def test_a_failure_while_others_succeed_is_the_answers_own() -> None:
    now = [0.0]
    gate = JudgeGate(clock=lambda: now[0])
    started = now[0]
    now[0] = 1.0
    gate.request_ok()  # another request succeeded during the attempt
    now[0] = 2.0
    assert gate.report(ok=False, started=started, probe=False) is False
    assert not gate.down
