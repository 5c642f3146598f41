"""Human labels: the one reader of WiCE and ExpertQA rows, for calibration and for training.

Two shapes are read, detected per row:

* a **pair** ``{claim, passage, label}`` (WiCE): ``supported`` → entailed, ``not_supported`` →
  not, ``partially_supported`` → the ``partial`` mapping;
* an **answer record** with ``labels`` (ExpertQA): each label's ``claim`` is the annotator's
  sentence (markers and all) judged against the passages its ``cited_ids`` name; ``Complete`` →
  entailed, ``Incomplete`` → not, ``Partial`` → the ``partial`` mapping, anything else
  (``Missing``, ``N/A``) skipped.

:func:`human_labels` yields a :class:`HumanLabel` per usable label and, for every row or label
it cannot use, the reason as a string (the caller counts them): nothing is dropped unsaid.
``citemon calibrate`` matches an ExpertQA claim to the claim citemon itself extracts
(:mod:`citemon._checks.calibration`); training takes the annotator's claim with its markers
stripped (``bench/_training.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ValidationError

from citemon._core.errors import ConfigError
from citemon._core.records import AnswerRecord

__all__ = [
    "EXPERTQA_LABELS",
    "WICE_LABELS",
    "HumanLabel",
    "PartialMapping",
    "human_labels",
    "read_label_rows",
]

PartialMapping = Literal["entailed", "not_entailed", "exclude"]
"""How partial support (ExpertQA ``Partial``, WiCE ``partially_supported``) is read."""

WICE_LABELS: Final[Mapping[str, bool | None]] = {
    "supported": True,
    "not_supported": False,
    "partially_supported": None,
}
EXPERTQA_LABELS: Final[Mapping[str, bool | None]] = {
    "Complete": True,
    "Incomplete": False,
    "Partial": None,
}


@dataclass(frozen=True, slots=True)
class HumanLabel:
    """One usable human label: a claim, the passages it cites (ID → text), the verdict."""

    claim: str
    """As labelled: the WiCE claim, or the ExpertQA annotator's sentence with its markers."""
    passages: dict[str, str]
    entailed: bool
    label: str
    """As written in the data."""
    dataset: Literal["wice", "expertqa"]
    line: int | str
    """The row's line in its file (``?`` when the rows did not come from one)."""
    record: AnswerRecord | None = None
    """The answer an ExpertQA label belongs to (``None`` for a WiCE pair)."""


def read_label_rows(path: str | Path) -> list[dict[str, Any]]:
    """JSON lines of a labels file, each with its line number as ``_line``;
    :class:`ConfigError` on unreadable input."""
    rows = []
    try:
        with Path(path).open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError as exc:
                        raise ValueError(f"line {number}: {exc}") from exc
                    if not isinstance(row, dict):
                        raise ValueError(f"line {number} is not a JSON object")
                    row.setdefault("_line", number)
                    rows.append(row)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read labels {path}: {exc}") from exc
    return rows


def _entailed(value: bool | None, partial: PartialMapping) -> bool | None:
    """A label's verdict; partial support (``None``) as ``partial`` says (``exclude``: None)."""
    if value is not None:
        return value
    return None if partial == "exclude" else partial == "entailed"


def human_labels(
    rows: Iterable[Mapping[str, Any]], *, partial: PartialMapping = "not_entailed"
) -> Iterator[HumanLabel | str]:
    """Each usable label of ``rows`` (either shape), or the reason one was skipped."""
    for row in rows:
        line = row.get("_line", "?")
        if "claim" in row and "passage" in row and "label" in row:
            yield _pair(row, line, partial)
            continue
        if "answer" not in row or "labels" not in row:
            yield "row has neither claim/passage/label nor answer/labels"
            continue
        try:
            record = AnswerRecord.model_validate(row)
        except ValidationError:
            yield "invalid answer record"
            continue
        texts = record.passage_map()
        for lab in record.labels or []:
            yield _answer_label(lab, record, texts, line, partial)


def _pair(row: Mapping[str, Any], line: int | str, partial: PartialMapping) -> HumanLabel | str:
    label = str(row["label"])
    if label not in WICE_LABELS:
        return f"unknown label {label!r}"
    entailed = _entailed(WICE_LABELS[label], partial)
    if entailed is None:
        return f"label {label} (--partial exclude)"
    passage = str(row["passage"])
    if not passage.strip():
        return "passage has no text"
    return HumanLabel(str(row["claim"]), {"1": passage}, entailed, label, "wice", line)


def _answer_label(
    lab: Mapping[str, Any],
    record: AnswerRecord,
    texts: Mapping[str, str],
    line: int | str,
    partial: PartialMapping,
) -> HumanLabel | str:
    support = str(lab.get("support"))
    if support not in EXPERTQA_LABELS:
        return f"label {support}"
    entailed = _entailed(EXPERTQA_LABELS[support], partial)
    if entailed is None:
        return f"label {support} (--partial exclude)"
    ids = [str(i) for i in lab.get("cited_ids") or []]
    if not ids:
        return "label cites no passage"
    if any(i not in texts for i in ids):
        return "cited passage not in record"
    if any(not texts[i].strip() for i in ids):
        return "cited passage has no text"
    passages = {i: texts[i] for i in ids}
    claim = str(lab.get("claim", ""))
    return HumanLabel(claim, passages, entailed, support, "expertqa", line, record)
