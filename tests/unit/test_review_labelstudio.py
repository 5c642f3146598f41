"""Label Studio's task format and config out, its export shapes in (the real server's round
trip is tests/integration/test_review_labelstudio.py); bad exports add nothing."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from citemon._core.errors import InputError
from citemon._review.labelstudio import LABEL_CONFIG, labels_from_export, tasks_for_label_studio
from citemon._review.model import CHECKER_CAUSES, LABELS
from citemon._review.tasks import load_review_set
from citemon.cli import main
from tests.review_sets import HOSTILE, write_review_set


def test_the_config_has_the_four_labels_and_the_cause_shown_after_a_label() -> None:
    root = ET.fromstring(LABEL_CONFIG)
    label = root.find("Choices[@name='label']")
    assert label is not None
    assert [(c.get("value"), c.get("hotkey")) for c in label] == [
        (name, str(i)) for i, name in enumerate(LABELS, 1)
    ]
    after = root.find("View[@visibleWhen='choice-selected']")
    assert after is not None and after.get("whenTagName") == "label"
    checker = after.find("Choices[@name='checker']")
    assert checker is not None
    assert [c.get("value") for c in checker] == list(CHECKER_CAUSES)
    shown = after.find("Text")
    assert shown is not None and shown.get("value") == "$verdict_shown"  # only after the label


def test_one_task_per_cited_claim_with_its_passages_as_text(tmp_path: Path) -> None:
    tasks = tasks_for_label_studio(load_review_set(write_review_set(tmp_path / "set.jsonl")))
    assert len(tasks) == 8
    first = tasks[0]["data"]
    assert isinstance(first, dict)
    assert first["passages"] == [{"id": "p-1", "text": HOSTILE}]
    regions = tasks[4]["data"]
    assert isinstance(regions, dict)
    assert regions["passages"] == [
        {"id": "r-1", "text": "The service is deployed in eu-west-1."},
        {"id": "r-9", "text": "(no text for this passage in the record)"},
    ]
    assert (regions["verdict"], regions["cited_ids"], regions["version"]) == (
        "dangling", ["r-1", "r-9"], "v3",
    )  # fmt: skip


def _annotation(
    label: str | None, checker: str | None = None, **extra: object
) -> dict[str, object]:
    result = []
    for tag, value in (("label", label), ("checker", checker)):
        if value is not None:
            result.append({"from_name": tag, "to_name": "claim_text", "type": "choices",
                           "value": {"choices": [value]}})  # fmt: skip
    return {"completed_by": 3, "result": result, "was_cancelled": False,
            "updated_at": "2026-12-01T10:00:00Z"} | extra  # fmt: skip


def _task(claim: int, *annotations: dict[str, object]) -> dict[str, object]:
    data = {"trace_id": "t1", "claim": claim, "claim_text": f"claim {claim}", "cited_ids": ["p"],
            "verdict": "correct", "service": "s", "version": "v1"}  # fmt: skip
    return {"id": claim + 10, "data": data, "annotations": list(annotations)}


def test_a_json_export_gives_one_label_per_annotation(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    rows = [
        _task(0, _annotation("entailed"), _annotation("partial", "strict", completed_by=4)),
        _task(1, _annotation(None, was_cancelled=True)),
        _task(2),
        _task(3, _annotation("not_a_claim", "fused")),
    ]
    export.write_text(json.dumps(rows))
    result = labels_from_export(export)
    assert (result.cancelled, result.unlabelled) == (1, 1)
    assert [(x.claim, x.label, x.checker, x.reviewer, x.verdict) for x in result.labels] == [
        (0, "entailed", None, "label-studio:3", "correct"),
        (0, "partial", "strict", "label-studio:4", "correct"),
        (3, "not_a_claim", "fused", "label-studio:3", "correct"),
    ]
    assert result.labels[0].labelled_at == "2026-12-01T10:00:00Z"
    assert {x.reviewer for x in labels_from_export(export, reviewer="ann").labels} == {"ann"}


def test_a_json_min_export_reads_the_flat_rows(tmp_path: Path) -> None:
    export = tmp_path / "min.json"
    row = {"trace_id": "t1", "claim": 2, "claim_text": "c", "verdict": "unsupported", "id": 9,
           "label": "entailed", "checker": "overlap", "annotator": 1,
           "updated_at": "2026-12-01T11:00:00Z"}  # fmt: skip
    export.write_text(json.dumps([row]))
    (label,) = labels_from_export(export).labels
    assert (label.key, label.label, label.checker, label.reviewer, label.verdict) == (
        ("t1", 2), "entailed", "overlap", "label-studio:1", "unsupported",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{not json", "not JSON"),
        ('{"tasks": []}', "expected a list of tasks"),
        (json.dumps([_task(0, _annotation("maybe"))]), "label 'maybe' is not one of"),
        (json.dumps([_task(0, _annotation("entailed", "lazy"))]), "checker 'lazy' is not one of"),
        (json.dumps([{"data": {"text": "x"}, "annotations": [_annotation("entailed")]}]),
         "not a citemon task"),
        # Shapes no Label Studio export has: named, never a traceback.
        (json.dumps([{**_task(0), "annotations": 5}]), "annotations is not a list"),
        (json.dumps([{**_task(0), "annotations": {"a": 1}}]), "annotations is not a list"),
        (json.dumps([_task(0, "x")]), "annotation 0: not an object"),  # type: ignore[arg-type]
        (json.dumps([_task(0, _annotation(None, result=5))]), "result is not a list of objects"),
        (json.dumps([_task(0, _annotation(None, result=["x"]))]),
         "result is not a list of objects"),
        (json.dumps([_task(0, _annotation(None, result=[
            {"type": "choices", "from_name": "label", "value": ["entailed"]}]))]),
         "value is not an object"),
    ],
)  # fmt: skip
def test_a_bad_export_is_named_and_adds_no_label(
    tmp_path: Path, content: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "export.json"
    # a good task first: nothing of it may be written when a later one is bad
    if content.startswith("[{"):
        content = json.dumps([_task(5, _annotation("entailed")), *json.loads(content)])
    export.write_text(content)
    with pytest.raises(InputError, match=error):
        labels_from_export(export)
    labels = tmp_path / "labels.jsonl"
    assert main(["review", "import", str(export), "--labels", str(labels)]) == 2
    assert error.split("'")[0] in capsys.readouterr().err
    assert not labels.exists()


def test_an_export_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    export.write_bytes(b'[{"data": "\xff"}]')
    with pytest.raises(InputError, match="not UTF-8 text"):
        labels_from_export(export)


def test_export_writes_tasks_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    review_set = write_review_set(tmp_path / "set.jsonl")
    out = tmp_path / "out"
    assert (
        main(["review", "export", "--format", "label-studio", str(review_set), "-o", str(out)]) == 0
    )
    assert "8 tasks" in capsys.readouterr().out
    assert len(json.loads((out / "tasks.json").read_text())) == 8
    assert (out / "config.xml").read_text() == LABEL_CONFIG
    with pytest.raises(InputError):
        labels_from_export(out / "missing.json")
