"""The pipeline's pure parts: the ledger's ordered offsets and dedupe window, and the judge-outage
gate."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from citemon._core.judge import JudgeObserver
from citemon._core.records import AnswerScore, ClaimResult, UnjudgedCause
from citemon._service.answers import JudgeGate, judge_failed
from citemon._service.ledger import Finished, Ledger

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _ledger(dedupe_window: int = 100_000) -> Ledger:
    ledger = Ledger(dedupe_window=dedupe_window)
    ledger.assign([TP0, TP1], opening=False)
    return ledger


def test_commits_only_the_finished_prefix_with_gaps_in_offsets() -> None:
    ledger = _ledger()
    entries = {o: ledger.take(TP0, o) for o in (5, 6, 9, 10)}  # 7, 8: compacted/markers
    other = ledger.take(TP1, 0)
    assert ledger.ready() == []
    ledger.release(entries[6])  # type: ignore[arg-type]
    ledger.release(entries[9])  # type: ignore[arg-type]
    assert ledger.ready() == []  # 5 still running: nothing after it may commit
    ledger.release(entries[5])  # type: ignore[arg-type]
    (r,) = ledger.ready()
    assert (r.tp, r.offset, [e.offset for e in r.entries]) == (TP0, 10, [5, 6, 9])
    ledger.confirm(r)
    assert ledger.committed(TP0) == 10
    assert len(ledger) == 2 and ledger.unfinished() == 2
    ledger.hold(entries[10])  # type: ignore[arg-type]
    ledger.release(entries[10])  # type: ignore[arg-type]
    assert ledger.ready() == []  # held once more: still pending
    ledger.release(entries[10])  # type: ignore[arg-type]
    assert [x.offset for x in ledger.ready()] == [11]
    lost = ledger.drop([TP1])
    assert lost == [other] and other is not None and not other.alive


def test_out_of_order_take_is_refused() -> None:
    ledger = _ledger()
    ledger.take(TP0, 3)
    with pytest.raises(ValueError, match="not in order"):
        ledger.take(TP0, 3)  # repeated
    with pytest.raises(ValueError, match="not in order"):
        ledger.take(TP0, 2)  # earlier
    assert ledger.take(TP1, 2).offset == 2  # type: ignore[union-attr]  # its own order
    assert ledger.take(TP0, 4).offset == 4  # type: ignore[union-attr]


def test_records_of_a_partition_not_readable_are_not_taken() -> None:
    ledger = Ledger()
    assert ledger.take(TP0, 0) is None  # not assigned
    ledger.assign([TP0], opening=True)
    assert ledger.take(TP0, 0) is None  # its producer is not open yet
    ledger.opened(TP0, 5)
    assert ledger.take(TP0, 4) is None  # below the committed offset read after fencing
    assert ledger.take(TP0, 5) is not None and ledger.records == 1


def _counted(ledger: Ledger, offset: int, trace_id: str) -> int:
    """Finish one answer at ``offset`` of TP0, commit it; how many answers it counted."""
    entry = ledger.take(TP0, offset)
    assert entry is not None
    ledger.finish_answer([entry], Finished(AnswerScore(trace_id=trace_id), "s"))
    (r,) = ledger.ready()
    ledger.confirm(r)
    return len(r.counted)


def test_the_dedupe_window_is_bounded_lru() -> None:
    ledger = _ledger(dedupe_window=3)
    assert [_counted(ledger, i, f"t{i}") for i in range(5)] == [1] * 5
    assert not ledger.seen(("t1", "s")) and ledger.seen(("t4", "s"))
    assert _counted(ledger, 5, "t4") == 0  # in the window: a duplicate, not counted
    assert _counted(ledger, 6, "t1") == 1  # fell out of it: counted again, now newest
    assert ledger.seen(("t1", "s")) and not ledger.seen(("t2", "s"))  # t2 was the oldest
    assert ledger.duplicates == 1


def test_a_duplicate_is_counted_once_though_its_commit_failed_and_was_retried() -> None:
    ledger = _ledger()
    assert _counted(ledger, 0, "t0") == 1
    entry = ledger.take(TP0, 1)
    assert entry is not None
    ledger.finish_answer([entry], Finished(AnswerScore(trace_id="t0"), "s"))  # redelivered
    (failed,) = ledger.ready()  # this commit fails: nothing of it is confirmed
    assert failed.counted == []
    (retried,) = ledger.ready()  # the next tick's retry, confirmed
    ledger.confirm(retried)
    assert retried.counted == [] and ledger.committed(TP0) == 2
    assert ledger.duplicates == 1


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


def test_the_gate_is_a_judge_observer_that_a_successful_request_reopens() -> None:
    # `citemon run` hands the gate to the judge's transport beside the judge metrics.
    now = [0.0]
    gate = JudgeGate(clock=lambda: now[0])
    observer: JudgeObserver = gate
    assert isinstance(observer, JudgeObserver)
    assert gate.report(ok=False, started=0.0, probe=False) is True and gate.down
    for outcome in ("error", "timeout", "rate_limited", "invalid"):
        observer.request_done(outcome, 0.1)
    observer.inflight(1)
    observer.cache(hit=True)
    observer.invalid_reply("truncated")
    assert gate.down  # only a success says the judge answers
    now[0] = 1.0
    observer.request_done("ok", 0.1)
    assert not gate.down and gate.outages == 1
    # A failure begun before that success is the answer's own, not an outage.
    assert gate.report(ok=False, started=0.5, probe=False) is False


def test_a_failure_while_others_succeed_is_the_answers_own() -> None:
    now = [0.0]
    gate = JudgeGate(clock=lambda: now[0])
    started = now[0]
    now[0] = 1.0
    gate.request_ok()  # another request succeeded during the attempt
    now[0] = 2.0
    assert gate.report(ok=False, started=started, probe=False) is False
    assert not gate.down
