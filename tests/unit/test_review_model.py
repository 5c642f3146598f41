"""The review loop's two shapes: labels survive as written, bad lines are named."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from citemon._core.errors import InputError
from citemon._review.model import (
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


def test_a_label_without_a_field_names_the_field_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    good = Label(trace_id="t", claim=0, text="a", label="entailed", reviewer="r")
    path.write_text(
        good.model_dump_json() + '\n{"trace_id": "t", "claim": 1, "label": "entailed", '
        '"reviewer": "r"}\n'
    )
    with pytest.raises(InputError) as caught:
        read_labels(path)
    assert str(caught.value) == f"{path}:2: not a label: text: Field required"
    path.write_text('{"trace_id": "t", "claim": "x", "label": "entailed"}\n')
    with pytest.raises(InputError, match=r"labels.jsonl:1: not a label: claim: .*\(\+2 more\)$"):
        read_labels(path)


def test_a_short_write_is_finished_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.write`` may take part of what it is given and return the count (the OS boundary);
    the label is written whole all the same."""
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))  # at most 7 bytes a call

    monkeypatch.setattr(os, "write", short_write)
    path = tmp_path / "labels.jsonl"
    labels = [
        Label(trace_id="t1", claim=i, text="a claim " * 20, label="entailed", reviewer="ann")
        for i in range(3)
    ]
    for label in labels:
        append_label(path, label)
    monkeypatch.undo()
    assert len(calls) > 3 * 20  # it really was written 7 bytes at a time
    assert path.read_text(encoding="utf-8") == "".join(
        label.model_dump_json() + "\n" for label in labels
    )
    assert read_labels(path) == labels


def test_the_first_label_also_makes_the_files_directory_entry_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    synced: list[str] = []

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    label = Label(trace_id="t1", claim=0, text="a", label="entailed", reviewer="ann")
    append_label(tmp_path / "new.jsonl", label)  # creates the file
    assert synced == ["file", "dir"]
    append_label(tmp_path / "new.jsonl", label)
    assert synced == ["file", "dir", "file"]  # the entry is durable already
    (tmp_path / "empty.jsonl").touch()  # as the review page creates it, before the first label
    synced.clear()
    append_label(tmp_path / "empty.jsonl", label)
    assert synced == ["file", "dir"]


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
