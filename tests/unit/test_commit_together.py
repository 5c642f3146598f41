"""An answer's records of one partition commit together: no commit ends between them."""

from __future__ import annotations

from citemon.service.offsets import OffsetTracker


def test_a_commit_never_ends_between_the_records_of_one_answer() -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    root, other, retriever = (tracker.add("p", o) for o in (10, 11, 12))
    root.commit_with = 12  # its answer rides on the record at offset 12
    for e in (root, other, retriever):
        tracker.release(e)  # intake done
    tracker.hold(retriever)  # ... but 12 is still held by another trace's part
    assert tracker.ready() == []  # 10 may not commit without 12; 11 sits behind 10
    tracker.release(retriever)
    (ready,) = tracker.ready()
    assert ready.offset == 13 and [e.offset for e in ready.entries] == [10, 11, 12]


def test_records_before_an_answers_first_record_still_commit() -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    a, b, c = (tracker.add("p", o) for o in (1, 2, 3))
    b.commit_with = 3
    for e in (a, b):
        tracker.release(e)
    (ready,) = tracker.ready()  # 3 is pending: the commit stops before 2, after 1
    assert ready.offset == 2 and [e.offset for e in ready.entries] == [1]
    assert c.pending == 1
