"""The text toolkit (:mod:`citemon.core.text`): markers by the configured syntax, and each
offline judge's vocabulary kept exactly as its measured figures and shipped weights need it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from citemon.checks.labelled_pairs import pairs_from_rows
from citemon.core.records import AnswerRecord
from citemon.core.text import (
    DEFAULT_SYNTAX,
    CitationSyntax,
    content_words,
    overlap_words,
    stem,
    strip_markers,
    tokens,
)
from citemon.engine.claims import extract_claims
from citemon.judges.learned import load_model
from citemon.judges.training import load_expertqa

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# The learned judge's feature vectors on examples/*.jsonl, computed by the feature code as it
# was before the text toolkit was brought together (commit 2045a72): per answer, a SHA-256 of
# every (claim, passage IDs, vector) it gives, for the whole context, the cited set and each
# single passage. JSON writes a float's shortest round-trip repr, so equal digests mean
# bit-identical features; the shipped weights (citemon/data/learned_judge.json) stay valid.
# Computed with PYTHONHASHSEED=0: a few features sum IDF weights over a *set* of words, whose
# order follows the string hash, so their last bit varies from process to process (it did
# before the toolkit too); a fixed seed makes "bit-identical" checkable.
PINNED_FEATURES = {
    "sample.jsonl:a-1": "6ddf4293ed16e866",
    "sample.jsonl:hc-7-uncited": "d2e0407ecd5384ae",
    "sample.jsonl:hc-6-uncited": "52a810c04696ab8f",
    "sample.jsonl:hc-3-unsupported": "91c8e7b398e275ae",
    "sample.jsonl:hc-3-uncited": "73caa92383d631bb",
    "sample.jsonl:hc-2-over_broad": "eb431c4671adef64",
    "sample.jsonl:hc-8-over_broad": "180d49f2211ef0a0",
    "sample.jsonl:hc-2-dangling": "2e2e177630bfd669",
    "sample.jsonl:hc-3-over_broad": "b8a044e7ee192bbf",
    "sample.jsonl:hc-6-misattributed": "329444b2c288a08a",
    "sample.jsonl:hc-7-correct": "e0f38467e31acc7f",
    "sample.jsonl:hc-7-over_broad": "cc8968f133a715dc",
    "sample.jsonl:hc-8-correct": "e19fed6f8d96760e",
    "sample.jsonl:hc-5-over_broad": "745ca0bfcf064957",
    "sample.jsonl:hc-2-unsupported": "81ea2720b4f04bdc",
    "sample.jsonl:hc-1-correct": "5f51cffe04842f22",
    "sample.jsonl:hc-4-over_broad": "8b68b55575a788d6",
    "sample.jsonl:hc-4-misattributed": "5d36401b8c84cf1a",
    "sample.jsonl:hc-3-correct": "d9a8c273f02450de",
    "sample.jsonl:hc-8-uncited": "30b3cb936f0d3fc4",
    "sample.jsonl:hc-5-correct": "94bc363581e2d000",
    "sample.jsonl:hc-4-uncited": "160be2cd86351ac6",
    "sample.jsonl:hc-8-dangling": "30b3cb936f0d3fc4",
    "sample.jsonl:hc-5-dangling": "9e0199793e767c37",
    "sample.jsonl:hc-7-unsupported": "927996f9d5d64f5c",
    "sample.jsonl:hc-4-correct": "b5a7f20a7461a81b",
    "sample.jsonl:hc-1-misattributed": "8bba3fe0723a763f",
    "sample.jsonl:hc-6-dangling": "52a810c04696ab8f",
    "sample.jsonl:hc-3-dangling": "73caa92383d631bb",
    "sample.jsonl:hc-6-correct": "68986e68fe8fe04e",
    "sample.jsonl:hc-2-misattributed": "0950cb7baaeddde1",
    "sample.jsonl:hc-8-unsupported": "476ec2e512ca7fc6",
    "sample.jsonl:hc-5-unsupported": "14d4d73543af0dca",
    "sample.jsonl:hc-5-uncited": "9e0199793e767c37",
    "sample.jsonl:hc-1-dangling": "d1d1bb8a291ace7c",
    "sample.jsonl:hc-1-unsupported": "4a2da98f40f51961",
    "sample.jsonl:hc-3-misattributed": "a0966edadceba2be",
    "sample.jsonl:hc-6-unsupported": "38dd95169ef9d80e",
    "sample.jsonl:hc-8-misattributed": "f22bb2d64a06db0e",
    "sample.jsonl:hc-7-misattributed": "9084113c0e3960b2",
    "sample.jsonl:hc-4-dangling": "160be2cd86351ac6",
    "sample.jsonl:hc-2-correct": "993345501a8fd358",
    "sample.jsonl:hc-6-over_broad": "c8fee733ff28cd69",
    "sample.jsonl:hc-1-over_broad": "8ec8c948fc4dd262",
    "sample.jsonl:hc-1-uncited": "d1d1bb8a291ace7c",
    "sample.jsonl:hc-7-dangling": "d2e0407ecd5384ae",
    "sample.jsonl:hc-5-misattributed": "6454b7a73ac1e22b",
    "sample.jsonl:hc-2-uncited": "2e2e177630bfd669",
    "sample.jsonl:hc-4-unsupported": "5268d156090a1dbc",
    "specimen.jsonl:a-1": "6ddf4293ed16e866",
}


def _feature_cases(record: AnswerRecord) -> list[list[Any]]:
    model = load_model()
    texts = record.passage_map()
    cases: list[list[Any]] = []
    for claim in extract_claims(record):
        sets = [list(texts)]
        cited = [c for c in claim.cited_ids if c in texts]
        if cited and cited != list(texts):
            sets.append(cited)
        sets += [[p] for p in texts if [p] not in sets]
        for ids in sets:
            features = model.features(claim.text, {i: texts[i] for i in ids})
            cases.append([claim.text, ids, features])
    return cases


def feature_digests() -> dict[str, str]:
    got = {}
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            if line.strip():
                record = AnswerRecord.model_validate_json(line)
                cases = json.dumps(_feature_cases(record)).encode()
                got[f"{path.name}:{record.id}"] = hashlib.sha256(cases).hexdigest()[:16]
    return got


def test_learned_features_are_bit_identical_to_the_pinned_ones() -> None:
    code = (
        "import json; from tests.unit.test_text import feature_digests as f; print(json.dumps(f()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == PINNED_FEATURES


def test_the_specimen_first_vector_in_full() -> None:
    """One vector written out, so a change shows which features moved (to 1e-12: this process's
    hash seed decides the last bit of the set-summed features)."""
    record = AnswerRecord.model_validate_json((EXAMPLES / "specimen.jsonl").read_text())
    claim, ids, features = _feature_cases(record)[0]
    assert (claim, ids) == (
        "Audit logs are retained for 90 days on the Business plan.",
        ["p-3310", "p-3311", "p-3312"],
    )
    assert features == pytest.approx([
        0.8571428571428571, 0.82515053506245, 0.8571428571428571, 0.82515053506245,
        0.6666666666666666, 0.6666666666666666, 0.75, 0.420325, 0.6931471805599453, 1.0, 1.0,
        1.0, 0.0, 0.0, 2.0794415416798357, 3.7376696182833684, 0.36585365853658536,
        0.8571428571428571, 0.8251505350624498,
    ], rel=1e-12)  # fmt: skip


def test_each_judge_keeps_its_own_stems() -> None:
    # The learned judge's stems and the lexical judge's 6-letter prefixes differ on purpose.
    assert [stem(w) for w in ("children", "studies", "retained", "logs")] == [
        "child", "study", "retain", "log",
    ]  # fmt: skip
    assert overlap_words("Audit logs are retained for 90 days on the Business plan.") == {
        "audit", "log", "retain", "day", "busine", "plan",
    }  # fmt: skip
    assert content_words(tokens("The children were not studying [edit] here")) == [
        "child", "study",
    ]  # fmt: skip


def test_strip_markers_follows_the_configured_syntax() -> None:
    braces = CitationSyntax(r"\{\{([\w,\s-]+)\}\}")
    assert strip_markers("Kept for 90 days {{p-1, p-2}} .", braces) == "Kept for 90 days."
    assert strip_markers("Kept for 90 days [p-1].", braces) == "Kept for 90 days [p-1]."
    assert strip_markers("Kept for 90 days [p-1].", DEFAULT_SYNTAX) == "Kept for 90 days."


def _answer_row(marker: str) -> dict[str, Any]:
    return {
        "id": "q1",
        "question": "How long are audit logs kept?",
        "answer": f"Audit logs are kept for 90 days {marker}.",
        "passages": [{"id": "7", "text": "Audit logs are kept for 90 days."}],
        "labels": [{"claim": f"Audit logs are kept for 90 days {marker}.", "support": "Complete",
                    "cited_ids": ["7"]}],
    }  # fmt: skip


def test_calibration_reads_labels_with_the_configured_syntax() -> None:
    braces = CitationSyntax(r"\{\{(\w+)\}\}")
    pairs, skipped = pairs_from_rows([_answer_row("{{7}}")], syntax=braces)
    assert [(p.claim, p.passages, p.entailed) for p in pairs] == [
        ("Audit logs are kept for 90 days.", {"7": "Audit logs are kept for 90 days."}, True)
    ]
    assert not skipped


def test_training_strips_annotator_markers_with_the_configured_syntax(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps(_answer_row("{{7}}")) + "\n", encoding="utf-8")
    braces = CitationSyntax(r"\{\{(\w+)\}\}")
    assert [e.claim for e in load_expertqa(path, syntax=braces)] == [
        "Audit logs are kept for 90 days."
    ]
    assert [e.claim for e in load_expertqa(path)] == ["Audit logs are kept for 90 days {{7}}."]


_OLD_TRAINING_MARKER = re.compile(r"\s*\[\s*[\w\-]+(?:\s*,\s*[\w\-]+)*\s*\]")
"""The regex training stripped ExpertQA annotator claims with before the toolkit."""


@pytest.mark.shared_data
def test_annotator_claims_tokenise_as_before_on_expertqa(shared_data: Path) -> None:
    """The configured default syntax gives the very tokens the old regex gave on every ExpertQA
    annotator claim, so the training data (and the held-out figures in the weights' metadata)
    are unchanged."""
    claims = [
        label["claim"]
        for line in (shared_data / "expertqa" / "val.jsonl").open(encoding="utf-8")
        for label in json.loads(line).get("labels") or []
    ]
    assert len(claims) == 1520
    for claim in claims:
        assert tokens(strip_markers(claim)) == tokens(_OLD_TRAINING_MARKER.sub("", claim)), claim
