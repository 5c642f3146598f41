"""Label Studio for teams that already have annotators: tasks and a labelling config out, its
JSON export back in as labels.

``citemon review export --format label-studio`` writes ``tasks.json`` (one task per cited claim;
``data`` holds the question, the claim, the answer, the cited passages as a list for the
``Paragraphs`` tag, and — shown only after a label is chosen — citemon's verdict) and
``config.xml`` (the labelling config: the four labels with hotkeys 1–4, and the checker cause).
Label Studio renders ``Text`` and ``Paragraphs`` values as text, never as markup, so passage text
stays data. ``citemon review import`` reads its ``JSON`` export (``annotations[].result``) or its
``JSON_MIN`` export (one flat row per annotation, the choices under their tag names).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from citemon._core.errors import InputError
from citemon._review.model import CHECKER_CAUSES, LABELS, Label
from citemon._review.tasks import ReviewSet

__all__ = [
    "CHECKER_TAG",
    "LABEL_CONFIG",
    "LABEL_TAG",
    "ImportResult",
    "export_label_studio",
    "labels_from_export",
    "tasks_for_label_studio",
]

LABEL_TAG: Final = "label"
"""The ``Choices`` tag that holds the reviewer's label (its ``from_name`` in the export)."""
CHECKER_TAG: Final = "checker"
"""The ``Choices`` tag for why the reviewer disagrees with citemon."""

_HINTS: Final = {
    "entailed": "the cited passages support the claim",
    "partial": "they support part of it",
    "not_entailed": "they do not support it",
    "not_a_claim": "this is not one claim (cut wrong)",
    "overlap": "the support sits in an overlapping chunk",
    "fused": "the extractor fused two claims",
    "strict": "the judge was too strict",
    "other": "something else",
}

LABEL_CONFIG: Final = (
    """<View>
  <Header value="Question"/>
  <Text name="question" value="$question"/>
  <Header value="Claim"/>
  <Text name="claim_text" value="$claim_text"/>
  <Header value="Answer (the claim in context)" size="6"/>
  <Text name="answer" value="$answer"/>
  <Header value="Cited passages"/>
  <Paragraphs name="passages" value="$passages" nameKey="id" textKey="text"/>
  <Header value="Do the cited passages support the claim?"/>
  <Choices name="label" toName="claim_text" choice="single" showInline="true" required="true">
"""
    + "".join(
        f'    <Choice value="{name}" hint="{_HINTS[name]}" hotkey="{i}"/>\n'
        for i, name in enumerate(LABELS, 1)
    )
    + """  </Choices>
  <View visibleWhen="choice-selected" whenTagName="label">
    <Header value="citemon's verdict (shown after your label)" size="6"/>
    <Text name="verdict" value="$verdict_shown"/>
    <Header value="If you disagree with citemon: why?" size="6"/>
    <Choices name="checker" toName="claim_text" choice="single" showInline="true">
"""
    + "".join(f'      <Choice value="{name}" hint="{_HINTS[name]}"/>\n' for name in CHECKER_CAUSES)
    + """    </Choices>
  </View>
</View>
"""
)
"""The labelling config (Label Studio's XML) that goes with :func:`tasks_for_label_studio`."""


def _passage_text(text: str | None, cut: bool) -> str:
    if text is None:
        return "(no text for this passage in the record)"
    return text + (" … (cut at the cap)" if cut else "")


def tasks_for_label_studio(review_set: ReviewSet) -> list[dict[str, object]]:
    """One Label Studio task per cited claim, in the set's order."""
    out: list[dict[str, object]] = []
    for task in review_set.tasks:
        record, claim = review_set.claims[task.key]
        verdict = claim.verdict + (f" — {claim.reason}" if claim.reason else "")
        out.append(
            {
                "data": {
                    "trace_id": record.trace_id,
                    "claim": claim.claim,
                    "claim_text": claim.text,
                    "question": record.question,
                    "answer": record.answer,
                    "cited_ids": list(claim.cited_ids),
                    "passages": [
                        {
                            "id": pid,
                            "text": _passage_text(
                                record.passages.get(pid), pid in record.passages_cut
                            ),
                        }
                        for pid in claim.cited_ids
                    ],
                    "verdict": claim.verdict,
                    "verdict_shown": verdict,
                    "service": record.service,
                    "version": record.version,
                }
            }
        )
    return out


def export_label_studio(review_set: ReviewSet, directory: Path) -> tuple[Path, Path]:
    """Write ``tasks.json`` and ``config.xml`` into ``directory`` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tasks = directory / "tasks.json"
        config = directory / "config.xml"
        tasks.write_text(
            json.dumps(tasks_for_label_studio(review_set), ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8",
        )
        config.write_text(LABEL_CONFIG, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write to {directory}: {exc.strerror or exc}") from exc
    return tasks, config


@dataclass(slots=True)
class ImportResult:
    """What an import found: the labels, and what it left out and why."""

    labels: list[Label] = field(default_factory=list)
    cancelled: int = 0
    """Annotations the annotator skipped (``was_cancelled``)."""
    unlabelled: int = 0
    """Annotations without a choice in the ``label`` tag, and tasks with no annotation."""


def _reviewer(annotator: object) -> str:
    if isinstance(annotator, Mapping):
        email = annotator.get("email")
        if isinstance(email, str) and email:
            return email
        annotator = annotator.get("id")
    return f"label-studio:{annotator}"


def _choice(value: object, tag: str, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != 1:
            raise InputError(f"{where}: expected one {tag} choice, got {value!r}")
        value = value[0]
    if not isinstance(value, str):
        raise InputError(f"{where}: the {tag} choice is not a string")
    allowed = LABELS if tag == LABEL_TAG else CHECKER_CAUSES
    if value not in allowed:
        raise InputError(f"{where}: {tag} {value!r} is not one of {', '.join(allowed)}")
    return value


def _label(
    data: Mapping[str, Any],
    label: str,
    checker: str | None,
    reviewer: str,
    labelled_at: object,
    where: str,
) -> Label:
    trace_id, claim = data.get("trace_id"), data.get("claim")
    if not isinstance(trace_id, str) or not isinstance(claim, int) or isinstance(claim, bool):
        raise InputError(f"{where}: the task has no trace_id and claim (not a citemon task)")
    extra = {"labelled_at": labelled_at} if isinstance(labelled_at, str) and labelled_at else {}
    try:
        return Label.model_validate(
            {
                "trace_id": trace_id,
                "claim": claim,
                "text": data.get("claim_text", ""),
                "cited_ids": data.get("cited_ids", []),
                "label": label,
                "checker": checker,
                "reviewer": reviewer,
                "verdict": data.get("verdict"),
                "service": data.get("service"),
                "version": data.get("version"),
                **extra,
            }
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InputError(f"{where}: not a citemon task: {exc}") from exc


def _from_full(rows: Iterable[Mapping[str, Any]], reviewer: str | None) -> ImportResult:
    out = ImportResult()
    for n, task in enumerate(rows):
        data = task.get("data")
        if not isinstance(data, Mapping):
            raise InputError(f"task {n}: no data object (not a Label Studio JSON export)")
        annotations = task.get("annotations") or []
        if not isinstance(annotations, list):
            raise InputError(f"task {n}: annotations is not a list (not a Label Studio export)")
        if not annotations:
            out.unlabelled += 1
        for a, annotation in enumerate(annotations):
            where = f"task {n} (id {task.get('id')}) annotation {a}"
            if not isinstance(annotation, Mapping):
                raise InputError(f"{where}: not an object (not a Label Studio export)")
            if annotation.get("was_cancelled"):
                out.cancelled += 1
                continue
            choices: dict[str, object] = {}
            results = annotation.get("result") or []
            if not isinstance(results, list) or not all(isinstance(r, Mapping) for r in results):
                raise InputError(f"{where}: result is not a list of objects")
            for result in results:
                if result.get("type") == "choices" and result.get("from_name") in (
                    LABEL_TAG,
                    CHECKER_TAG,
                ):
                    value = result.get("value") or {}
                    if not isinstance(value, Mapping):
                        raise InputError(f"{where}: a choices result's value is not an object")
                    choices[result["from_name"]] = value.get("choices")
            label = _choice(choices.get(LABEL_TAG), LABEL_TAG, where)
            if label is None:
                out.unlabelled += 1
                continue
            who = reviewer or _reviewer(annotation.get("completed_by"))
            at = annotation.get("updated_at") or annotation.get("created_at")
            checker = _choice(choices.get(CHECKER_TAG), CHECKER_TAG, where)
            out.labels.append(_label(data, label, checker, who, at, where))
    return out


def _from_min(rows: Iterable[Mapping[str, Any]], reviewer: str | None) -> ImportResult:
    out = ImportResult()
    for n, row in enumerate(rows):
        where = f"row {n} (id {row.get('id')})"
        label = _choice(row.get(LABEL_TAG), LABEL_TAG, where)
        if label is None:
            out.unlabelled += 1
            continue
        checker = _choice(row.get(CHECKER_TAG), CHECKER_TAG, where)
        who = reviewer or _reviewer(row.get("annotator"))
        at = row.get("updated_at") or row.get("created_at")
        out.labels.append(_label(row, label, checker, who, at, where))
    return out


def labels_from_export(path: Path, reviewer: str | None = None) -> ImportResult:
    """The labels in a Label Studio export of citemon tasks (``JSON`` or ``JSON_MIN``, told
    apart by their shape). Reviewers are the annotators' e-mails (or ``label-studio:ID`` when
    the export gives only an ID), unless ``reviewer`` names one for every label."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON: {exc.msg}") from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{path}: expected a list of tasks (Label Studio's JSON export)")
    if not rows:
        return ImportResult()
    full = all("data" in r and "annotations" in r for r in rows)
    return _from_full(rows, reviewer) if full else _from_min(rows, reviewer)
