"""An answer's records of one partition commit together: no commit ends between them."""

from __future__ import annotations

from citemon._core.records import AnswerScore
from citemon._service.ledger import Entry, Finished, Ledger

ANSWER = Finished(AnswerScore(trace_id="t"), "s")


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.assign(["p"], opening=False)
    return ledger


def _take(ledger: Ledger, *offsets: int) -> list[Entry]:
    entries = [ledger.take("p", o) for o in offsets]
    assert all(e is not None for e in entries)
    return [e for e in entries if e is not None]


def test_a_commit_never_ends_between_the_records_of_one_answer() -> None:
    ledger = _ledger()
    root, other, retriever = _take(ledger, 10, 11, 12)
    ledger.hold(root)  # the answer's job holds its two records
    ledger.hold(retriever)
    ledger.release_all([root, other, retriever])  # intake done
    ledger.hold(retriever)  # ... but 12 is also held by another trace's part
    ledger.finish_answer([root, retriever], ANSWER)  # it rides on 12; 10 commits with it
    assert root.commit_with == 12
    assert ledger.ready() == []  # 10 may not commit without 12; 11 sits behind 10
    ledger.release(retriever)
    (ready,) = ledger.ready()
    assert ready.offset == 13 and [e.offset for e in ready.entries] == [10, 11, 12]
    assert ready.counted == [ANSWER]


def test_records_before_an_answers_first_record_still_commit() -> None:
    ledger = _ledger()
    a, b, c = _take(ledger, 1, 2, 3)
    ledger.hold(b)  # the answer's job
    ledger.hold(c)
    ledger.release_all([a, b])  # intake done with 1 and 2; 3 is still being taken
    ledger.finish_answer([b, c], ANSWER)
    (ready,) = ledger.ready()  # 3 is pending: the commit stops before 2, after 1
    assert ready.offset == 2 and [e.offset for e in ready.entries] == [1]
    assert c.pending == 1
