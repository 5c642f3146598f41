"""The classifier judge's requests on ExpertQA: batched pairs beside one call per question.

The server is the loopback one in TEI's exact ``/predict`` shape (tests/tei_server.py, TEI's
default limits: 32 pairs per request, 512 tokens, whitespace words as tokens), so what is
counted is real HTTP requests and the (chunk, claim) pairs in them. Two runs of the same judge,
nothing cached (each answer judged as if new, as in production):

* per question — the scorer sees only ``entails`` (each check its own request of chunks);
* batched — the scorer uses the judge's batch methods: every claim citing the same passages
  in one request, then the subsets ALCE precision and the misattribution search need.

Both must give the same verdict on every claim, which is checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from citemon._core.records import AnswerRecord, AnswerScore, Verdict
from citemon._engine.scoring import Scorer
from citemon.judges.cache import ReplyCache
from citemon.judges.classifier import ClassifierJudge
from citemon.judges.transport import HTTPTransport

__all__ = ["DATA", "Counted", "measure", "run"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "expertqa" / "val.jsonl"


class _EntailsOnly:
    """The judge with its batch methods hidden: the scorer's per-question path."""

    def __init__(self, judge: ClassifierJudge) -> None:
        self.judge = judge

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return await self.judge.entails(claim, passages)


@dataclass(frozen=True)
class Counted:
    requests: int
    pairs: int
    largest: int
    scores: list[AnswerScore]


async def _count(records: Sequence[AnswerRecord], *, batched: bool) -> Counted:
    from tests.tei_server import TEIServer  # the benchmark's server lives with the tests

    async with TEIServer() as server:
        judge = ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", max_inflight=8), cache=ReplyCache(0)
        )
        try:
            scorer = Scorer(judge if batched else _EntailsOnly(judge))
            scores = await scorer.score_many(records, max_concurrent_answers=16)
        finally:
            await judge.aclose()
        sizes = server.batch_sizes()
    return Counted(len(sizes), sum(sizes), max(sizes, default=0), scores)


def measure(records: Sequence[AnswerRecord]) -> tuple[Counted, Counted, int, int]:
    """(per question, batched, claims, claims with the same verdict in both)."""
    per_question = asyncio.run(_count(records, batched=False))
    batched = asyncio.run(_count(records, batched=True))
    claims = same = 0
    for a, b in zip(per_question.scores, batched.scores, strict=True):
        for x, y in zip(a.claims, b.claims, strict=True):
            claims += 1
            same += x.verdict == y.verdict and x.supported_by == y.supported_by
    return per_question, batched, claims, same


def run() -> None:
    if not DATA.is_file():
        print(f"skipped: {DATA} not found (the labelled data is only in the project's CI)")
        return
    records = [AnswerRecord.model_validate_json(line) for line in DATA.open(encoding="utf-8")]
    one, many, claims, same = measure(records)
    k = len(records)
    print(f"answers {k}, claims {claims}; TEI-shaped loopback server, 32 pairs per request max")
    print(f"{'scheme':<16}{'requests/answer':>16}{'pairs/answer':>14}{'pairs/request':>15}")
    for name, c in [("per question", one), ("batched", many)]:
        print(f"{name:<16}{c.requests / k:>16.1f}{c.pairs / k:>14.1f}{c.pairs / c.requests:>15.1f}")
    print(
        f"batched / per question requests {many.requests / one.requests:.2f}; "
        f"largest batch {many.largest}; same verdicts: {same}/{claims} claims"
    )
