"""The review record and the human label: the two shapes of the review loop.

A *review record* is one scored answer sampled for people to read (``--review-rate``), written to
the review topic ``citemon._review`` in the same transaction as its result, or by ``citemon score``
for an offline batch. It carries what a reviewer needs and nothing the monitor would have to look
up later: the question, the answer, every claim with citemon's verdict and the judge's reason, and
the text of the passages its claims cite or are supported by (after the shim's redaction hook,
each cut to a documented cap).

A *label* is one reviewer's answer about one claim, appended to a labels file (JSON lines) the
moment it is given, so a closed tab or a crash loses nothing (its fields: docs/design.md, "Review
loop and estimates").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citemon._core.errors import InputError
from citemon._core.records import VerdictName

__all__ = [
    "CHECKER_CAUSES",
    "LABELS",
    "REVIEW_SCHEMA",
    "CheckerCause",
    "Label",
    "LabelName",
    "ReviewClaim",
    "ReviewRecord",
    "append_label",
    "read_labels",
    "read_review_records",
]

REVIEW_SCHEMA: Final = 1
"""Version of the review record's shape (``schema`` field); bumped on an incompatible change."""

LabelName = Literal["entailed", "partial", "not_entailed", "not_a_claim"]
"""The reviewer's answer: the cited passages support the claim / partly / do not / this is not
one claim (the extractor cut it wrong)."""

LABELS: tuple[LabelName, ...] = ("entailed", "partial", "not_entailed", "not_a_claim")

CheckerCause = Literal["overlap", "fused", "strict", "other"]
"""Why the reviewer disagrees with citemon, when they do: the support sits in an overlapping
chunk, the extractor fused two claims, the isolated judge was too strict, or something else."""

CHECKER_CAUSES: tuple[CheckerCause, ...] = ("overlap", "fused", "strict", "other")


class ReviewClaim(BaseModel):
    """One claim of a review record, with citemon's verdict (hidden from the reviewer until they
    have labelled it)."""

    model_config = ConfigDict(extra="ignore")

    claim: int
    """Index of the claim within its answer (the ``claim`` of a label)."""
    sentence: int
    text: str
    cited_ids: list[str] = Field(default_factory=list)
    """The passage IDs the claim cites (as the scorer resolved them)."""
    verdict: VerdictName
    supported_by: list[str] = Field(default_factory=list)
    reason: str | None = None
    """The judge's reason, when it gave one."""
    unjudged_cause: str | None = None
    faithful: bool | None = None
    overlap: bool = False


class ReviewRecord(BaseModel):
    """One sampled answer, self-contained for a reviewer."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    schema_version: int = Field(default=REVIEW_SCHEMA, alias="schema")
    trace_id: str
    """The answer's trace ID; for an offline answer without one, its ``id`` (or a stable hash
    of the answer text), so labels always have a key."""
    span_id: str | None = None
    id: str | None = None
    service: str | None = None
    version: str | None = None
    environment: str | None = None
    scored_at: str | None = None
    """ISO 8601 UTC time the monitor scored the answer."""
    question: str = ""
    answer: str = ""
    passages: dict[str, str] = Field(default_factory=dict)
    """Passage ID → text (after redaction, capped) of the passages the claims cite or are
    supported by."""
    passages_cut: list[str] = Field(default_factory=list)
    """IDs whose text was cut at the cap."""
    text_source: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Passage ID → ``"store"`` for the passages whose text came from the passage store rather
    than the trace (``--passage-store``); left out when none did."""
    claims: list[ReviewClaim] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


class Label(BaseModel):
    """One human label of one claim (docs/design.md, "Review loop and estimates")."""

    model_config = ConfigDict(extra="ignore")

    trace_id: str
    claim: int
    text: str
    cited_ids: list[str] = Field(default_factory=list)
    label: LabelName
    checker: CheckerCause | None = None
    reviewer: str
    labelled_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    verdict: VerdictName | None = None
    """citemon's verdict on the claim when it was labelled (revealed after the label)."""
    service: str | None = None
    version: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.trace_id, self.claim)


def append_label(path: Path, label: Label) -> None:
    """Append ``label`` as one JSON line and make it durable before returning: a label that was
    acknowledged survives a crash or a closed tab.

    ``os.write`` may write less than it was given (a signal, a full disk, some file systems):
    the rest is written until the whole line is, or the error is raised. The line is then
    fsynced, and for the file's first line its directory too, since the file's entry in the
    directory (just created, here or by the review page) is not made durable by the file's own
    fsync.
    """
    line = memoryview((label.model_dump_json() + "\n").encode("utf-8"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        first = os.fstat(fd).st_size == 0
        while line:
            line = line[os.write(fd, line) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if first:
        _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    try:
        with path.open("rb") as fh:
            for n, line in enumerate(fh, 1):
                try:
                    raw = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"{path}:{n}: not UTF-8 text") from exc
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{n}: not JSON: {exc.msg}") from exc
                except (ValueError, RecursionError) as exc:  # > 4300 digits; nested too deep
                    raise InputError(f"{path}:{n}: not JSON: {exc}") from exc
                if not isinstance(row, dict):
                    raise InputError(f"{path}:{n}: expected a JSON object")
                yield n, row
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_labels(path: Path) -> list[Label]:
    """Every label in a labels file, in order; a later label of the same reviewer for the same
    claim replaces the earlier one (a reviewer may change their mind). Bad lines are an
    :class:`InputError` naming the line."""
    latest: dict[tuple[str, int, str], Label] = {}
    for n, row in _json_lines(path):
        try:
            label = Label.model_validate(row)
        except ValidationError as exc:
            raise InputError(f"{path}:{n}: not a label: {_first_error(exc)}") from exc
        latest.pop((label.trace_id, label.claim, label.reviewer), None)
        latest[(label.trace_id, label.claim, label.reviewer)] = label
    return list(latest.values())


def read_review_records(path: Path) -> list[ReviewRecord]:
    """Review records from a JSON-lines file (a review set, or ``citemon score``'s review
    output); an :class:`InputError` names a bad line."""
    out: list[ReviewRecord] = []
    for n, row in _json_lines(path):
        try:
            out.append(ReviewRecord.model_validate(row))
        except ValidationError as exc:
            raise InputError(f"{path}:{n}: not a review record: {_first_error(exc)}") from exc
    return out


def _first_error(exc: ValidationError) -> str:
    """The first thing wrong, naming its field as the other input errors do
    (``text: Field required (+1 more)``)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "line"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
