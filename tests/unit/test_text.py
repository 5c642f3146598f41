"""The text toolkit (:mod:`citemon._core.text`): markers by the configured syntax, and each
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

from bench._training import load_expertqa
from citemon._checks.labelled_pairs import pairs_from_rows
from citemon._core.records import AnswerRecord
from citemon._core.text import (
    DEFAULT_SYNTAX,
    CitationSyntax,
    content_words,
    overlap_words,
    stem,
    strip_markers,
    tokens,
)
from citemon._engine.claims import extract_claims
from citemon.judges.learned import load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# The learned judge's feature vectors on examples/*.jsonl, computed by the feature code as it
# was before the text toolkit was brought together (commit 2045a72): per answer, a SHA-256 of
# every (claim, passage IDs, vector) it gives, for the whole context, the cited set and each
# single passage. JSON writes a float's shortest round-trip repr, so equal digests mean
# bit-identical features; the shipped weights (citemon/data/learned_judge.json) stay valid.
# The learned features sum IDF weights with math.fsum, exact in any order, so they no longer
# follow the string hash (a plain sum over a set of words did, in its last bit): the test
# checks that in processes with two different seeds.
PINNED_FEATURES = {
    "sample.jsonl:a-1": "11f89a358c1bdefe",
    "sample.jsonl:hc-7-uncited": "7fa4c91ec82e5284",
    "sample.jsonl:hc-6-uncited": "3f20b02ffbae9def",
    "sample.jsonl:hc-3-unsupported": "91c8e7b398e275ae",
    "sample.jsonl:hc-3-uncited": "73caa92383d631bb",
    "sample.jsonl:hc-2-over_broad": "79ad3adf3fa7f76f",
    "sample.jsonl:hc-8-over_broad": "180d49f2211ef0a0",
    "sample.jsonl:hc-2-dangling": "313486b999672645",
    "sample.jsonl:hc-3-over_broad": "b8a044e7ee192bbf",
    "sample.jsonl:hc-6-misattributed": "72abafc15a658df1",
    "sample.jsonl:hc-7-correct": "1c81723ba5464b88",
    "sample.jsonl:hc-7-over_broad": "b6a146834214a391",
    "sample.jsonl:hc-8-correct": "e19fed6f8d96760e",
    "sample.jsonl:hc-5-over_broad": "afb49c6d9af33d73",
    "sample.jsonl:hc-2-unsupported": "b9bbd9e807148f1d",
    "sample.jsonl:hc-1-correct": "a93fa4b7db6a2868",
    "sample.jsonl:hc-4-over_broad": "a1c5e8e38e902b6a",
    "sample.jsonl:hc-4-misattributed": "d32429a76e9292bf",
    "sample.jsonl:hc-3-correct": "d9a8c273f02450de",
    "sample.jsonl:hc-8-uncited": "30b3cb936f0d3fc4",
    "sample.jsonl:hc-5-correct": "beabf8da6b322bcf",
    "sample.jsonl:hc-4-uncited": "fc16b788465ecd56",
    "sample.jsonl:hc-8-dangling": "30b3cb936f0d3fc4",
    "sample.jsonl:hc-5-dangling": "78069fabcbf44c3c",
    "sample.jsonl:hc-7-unsupported": "d6827a91c2554ce1",
    "sample.jsonl:hc-4-correct": "e139722e9fc1949d",
    "sample.jsonl:hc-1-misattributed": "28da0106feb9f4de",
    "sample.jsonl:hc-6-dangling": "3f20b02ffbae9def",
    "sample.jsonl:hc-3-dangling": "73caa92383d631bb",
    "sample.jsonl:hc-6-correct": "d112bbe86cea6719",
    "sample.jsonl:hc-2-misattributed": "cae9333554ad272e",
    "sample.jsonl:hc-8-unsupported": "476ec2e512ca7fc6",
    "sample.jsonl:hc-5-unsupported": "27a6b4e049a5997e",
    "sample.jsonl:hc-5-uncited": "78069fabcbf44c3c",
    "sample.jsonl:hc-1-dangling": "d165d92e4939d885",
    "sample.jsonl:hc-1-unsupported": "e29af62c3b76979c",
    "sample.jsonl:hc-3-misattributed": "a0966edadceba2be",
    "sample.jsonl:hc-6-unsupported": "bf65bd53224f7bdb",
    "sample.jsonl:hc-8-misattributed": "f22bb2d64a06db0e",
    "sample.jsonl:hc-7-misattributed": "995892748160766b",
    "sample.jsonl:hc-4-dangling": "fc16b788465ecd56",
    "sample.jsonl:hc-2-correct": "f61d2faf8a2ea1f2",
    "sample.jsonl:hc-6-over_broad": "b2fd83db53896be2",
    "sample.jsonl:hc-1-over_broad": "a4951a4ca501792c",
    "sample.jsonl:hc-1-uncited": "d165d92e4939d885",
    "sample.jsonl:hc-7-dangling": "7fa4c91ec82e5284",
    "sample.jsonl:hc-5-misattributed": "1c49d3b3c5c79a4b",
    "sample.jsonl:hc-2-uncited": "313486b999672645",
    "sample.jsonl:hc-4-unsupported": "7fab83a93f150638",
    "specimen.jsonl:a-1": "11f89a358c1bdefe",
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
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == PINNED_FEATURES


def test_the_specimen_first_vector_in_full() -> None:
    """One vector written out, so a change shows which features moved (to 1e-12: the decimals
    below are shown rounded)."""
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
