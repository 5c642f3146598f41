"""One reader of human labels (:mod:`citemon._core.human_labels`) for calibration and training."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench._training import load_expertqa, load_wice
from citemon._checks.labelled_pairs import pairs_from_rows
from citemon._core.human_labels import HumanLabel, human_labels

ANSWER: dict[str, Any] = {
    "id": "q1",
    "question": "How long are audit logs kept?",
    "answer": "Audit logs are kept for 90 days [1]. Exports are daily [2].",
    "passages": [
        {"id": "1", "text": "Audit logs are kept for 90 days."},
        {"id": "2", "text": ""},
    ],
    "labels": [
        {"claim": "Audit logs are kept for 90 days [1].", "support": "Complete", "cited_ids": [1]},
        {"claim": "Exports are daily [2].", "support": "Incomplete", "cited_ids": [2]},
        {"claim": "Exports are daily.", "support": "Partial", "cited_ids": []},
        {"claim": "Something else [9].", "support": "Complete", "cited_ids": [9]},
        {"claim": "Missing one.", "support": "Missing", "cited_ids": [1]},
    ],
}
ROWS: list[dict[str, Any]] = [
    {"claim": "Logs are kept 90 days.", "passage": "Kept for 90 days.", "label": "supported"},
    {"claim": "Logs are kept.", "passage": "Kept.", "label": "partially_supported"},
    {"claim": "Logs are kept.", "passage": " ", "label": "not_supported"},
    {"claim": "Logs are kept.", "passage": "Kept.", "label": "maybe"},
    {"question": "no shape"},
    ANSWER,
]


def test_every_label_is_read_or_its_skip_said() -> None:
    got = list(human_labels(ROWS, partial="exclude"))
    labels = [g for g in got if isinstance(g, HumanLabel)]
    assert [(h.claim, h.passages, h.entailed, h.dataset) for h in labels] == [
        ("Logs are kept 90 days.", {"1": "Kept for 90 days."}, True, "wice"),
        ("Audit logs are kept for 90 days [1].", {"1": "Audit logs are kept for 90 days."},
         True, "expertqa"),
    ]  # fmt: skip
    assert Counter(g for g in got if isinstance(g, str)) == {
        "label partially_supported (--partial exclude)": 1,
        "passage has no text": 1,
        "unknown label 'maybe'": 1,
        "row has neither claim/passage/label nor answer/labels": 1,
        "cited passage has no text": 1,
        "label Partial (--partial exclude)": 1,
        "cited passage not in record": 1,
        "label Missing": 1,
    }


def test_calibration_and_training_read_the_same_labels(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    pairs, _ = pairs_from_rows(ROWS)
    wice, expertqa = load_wice(path), load_expertqa(path)
    assert [(p.claim, p.passages, p.entailed) for p in pairs] == [
        (e.claim, e.passages, e.entailed) for e in wice + expertqa
    ]
    # partially_supported → not entailed by default; the ExpertQA claim with markers stripped
    assert [(e.claim, e.entailed) for e in wice + expertqa] == [
        ("Logs are kept 90 days.", True),
        ("Logs are kept.", False),
        ("Audit logs are kept for 90 days.", True),
    ]
    assert [e.group for e in expertqa] == ["q1"]


@pytest.mark.shared_data
def test_wice_reads_alike_for_calibration_and_training(shared_data: Path) -> None:
    from citemon._core.human_labels import read_label_rows

    path = shared_data / "wice" / "dev.jsonl"
    pairs, skipped = pairs_from_rows(read_label_rows(path))
    assert not skipped
    assert len(pairs) == 349
    assert [(p.claim, p.passages, p.entailed) for p in pairs] == [
        (e.claim, e.passages, e.entailed) for e in load_wice(path)
    ]
