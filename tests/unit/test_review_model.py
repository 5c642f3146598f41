"""The review loop's two shapes: labels survive as written, bad lines are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from citemon.core.errors import InputError
from citemon.review.model import (
    Label,
    ReviewClaim,
    ReviewRecord,
    append_label,
    read_labels,
    read_review_records,
)


def test_labels_are_appended_and_the_latest_per_reviewer_wins(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    first = Label(trace_id="t1", claim=0, text="a", label="entailed", reviewer="ann")
    second = Label(trace_id="t1", claim=1, text="b", label="partial", reviewer="ann")
    changed = Label(trace_id="t1", claim=0, text="a", label="not_entailed", reviewer="ann")
    other = Label(trace_id="t1", claim=0, text="a", label="entailed", reviewer="bob")
    for label in (first, second, changed, other):
        append_label(path, label)
    assert len(path.read_text().splitlines()) == 4
    got = read_labels(path)
    assert [(g.claim, g.reviewer, g.label) for g in got] == [
        (1, "ann", "partial"),
        (0, "ann", "not_entailed"),
        (0, "bob", "entailed"),
    ]


def test_a_bad_label_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"trace_id": "t", "claim": 0, "text": "a", "label": "yes", "reviewer": "r"}\n')
    with pytest.raises(InputError, match=r"labels.jsonl:1: not a label"):
        read_labels(path)
    path.write_text("\n{not json\n")
    with pytest.raises(InputError, match=r"labels.jsonl:2: not JSON"):
        read_labels(path)


def test_review_records_round_trip_with_the_schema_field(tmp_path: Path) -> None:
    record = ReviewRecord(
        trace_id="t1",
        question="q",
        answer="A. [p-1]",
        passages={"p-1": "text"},
        claims=[ReviewClaim(claim=0, sentence=0, text="A.", cited_ids=["p-1"], verdict="correct")],
    )
    line = record.to_json()
    assert '"schema":1' in line
    path = tmp_path / "set.jsonl"
    path.write_text(line + "\n")
    (back,) = read_review_records(path)
    assert back == record


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b'{"trace_id": "\xff"}\n', ":2: not UTF-8 text"),
        (b"[" * 100_000 + b"\n", ":2: not JSON"),
        (b'{"claim": ' + b"1" * 5000 + b"}\n", ":2: not JSON"),
    ],
    ids=["latin-1", "deep", "digits"],
)
def test_lines_json_cannot_read_are_named_in_both_files(
    tmp_path: Path, line: bytes, error: str
) -> None:
    good = Label(trace_id="t1", claim=0, text="a", label="entailed", reviewer="ann")
    for read in (read_labels, read_review_records):
        path = tmp_path / f"{read.__name__}.jsonl"
        path.write_bytes(good.model_dump_json().encode() + b"\n" + line)
        with pytest.raises(InputError, match=error):
            read(path)
