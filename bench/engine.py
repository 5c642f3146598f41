"""Engine cost on ExpertQA answers: CPU per answer of the whole engine vs pysbd alone.

The whole engine (extraction + scoring with an instant judge) per answer, divided by pysbd's own
split time for the same answers, measured interleaved in one run (target ≤ 1.5). Judge calls and
prompt tokens per answer against the naive scheme are in :mod:`bench.judge_cost`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from citemon._core.records import AnswerRecord, Verdict
from citemon._engine.claims import _PARAGRAPH, _segmenter
from citemon._engine.scoring import Scorer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "expertqa" / "val.jsonl"


class CountingJudge:
    """Instant judge: entailed iff the claim's first word appears in the passages."""

    def __init__(self) -> None:
        self.calls = 0
        self.chars = 0

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        self.calls += 1
        self.chars += len(claim) + sum(len(p) for p in passages.values())
        head = claim.split()[0].lower() if claim.split() else ""
        return Verdict(entailed=any(head in p.lower() for p in passages.values()))


def run() -> None:
    if not DATA.is_file():
        print(f"skipped: {DATA} not found (the labelled data is only in the project's CI)")
        return
    records = [AnswerRecord.model_validate_json(line) for line in DATA.open(encoding="utf-8")]
    judge = CountingJudge()
    scorer = Scorer(judge)
    seg = _segmenter()
    split_cpu = engine_cpu = 0.0

    def split(record: AnswerRecord) -> None:
        for para in _PARAGRAPH.split(record.answer):
            seg.segment(para)

    for round_ in range(3):  # interleaved record by record, alternating which goes first
        for i, record in enumerate(records):
            first_split = (i + round_) % 2 == 0
            t0 = time.process_time()
            split(record) if first_split else asyncio.run(scorer.score(record))
            t1 = time.process_time()
            asyncio.run(scorer.score(record)) if first_split else split(record)
            t2 = time.process_time()
            split_cpu += (t1 - t0) if first_split else (t2 - t1)
            engine_cpu += (t2 - t1) if first_split else (t1 - t0)
    n = 3 * len(records)
    print(f"answers {len(records)} × 3 rounds")
    print(f"pysbd split CPU per answer   {split_cpu / n * 1e3:8.2f} ms")
    print(f"engine CPU per answer        {engine_cpu / n * 1e3:8.2f} ms")
    print(f"engine / pysbd               {engine_cpu / split_cpu:8.2f}  (target ≤ 1.5)")
