"""The offline judges' verdicts on the shared labelled sets, pinned.

Every verdict (entailed, confidence, reason) the lexical and learned judges give on every usable
ExpertQA and WiCE label is hashed; the digests were recorded before the judges were rebuilt by
composition, so a refactoring that changes one verdict, one confidence or one reason fails here.
A deliberate change to a judge (new weights, a new rule) updates the pins in the same commit and
says why.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from citemon._core.human_labels import HumanLabel, human_labels, read_label_rows
from citemon.judges import load_judge

# dataset, judge → (labels, entailed verdicts, verdicts agreeing with the label, sha256)
PINNED = {
    ("expertqa", "lexical"): (
        911,
        37,
        282,
        "29cf98de66b30457c7e3bc2f0e1212fb1a43e926891d48f68953f06d2aafb500",
    ),
    ("expertqa", "learned"): (
        911,
        436,
        521,
        "2487288ba85f576b47569929c47b388db86d0e0d25590f196e0a20a98e9bf485",
    ),
    ("wice", "lexical"): (
        349,
        173,
        233,
        "a9153fb6cefb25fc13dff7d754c2bbcca24fc016ad82cd2f43cbda2c7622aec3",
    ),
    ("wice", "learned"): (
        349,
        169,
        245,
        "674599a6824012463a5c6cea2e030d20492d111f3bf16ab5c4a0011bb6e33562",
    ),
}
FILES = {"expertqa": "expertqa/val.jsonl", "wice": "wice/dev.jsonl"}


@pytest.mark.shared_data
@pytest.mark.parametrize(("dataset", "spec"), sorted(PINNED))
async def test_verdicts_are_the_pinned_ones(shared_data: Path, dataset: str, spec: str) -> None:
    rows = read_label_rows(shared_data / FILES[dataset])
    labels = [h for h in human_labels(rows) if isinstance(h, HumanLabel)]
    judge = load_judge(spec)
    verdicts = [await judge.entails(h.claim, h.passages) for h in labels]
    record = [[v.entailed, v.confidence, v.reason] for v in verdicts]
    digest = hashlib.sha256(json.dumps(record).encode()).hexdigest()
    entailed = sum(v.entailed for v in verdicts)
    agree = sum(v.entailed == h.entailed for v, h in zip(verdicts, labels, strict=True))
    assert (len(labels), entailed, agree, digest) == PINNED[dataset, spec]
