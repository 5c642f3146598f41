"""``citemon demo --review DIR``: the review records and a review set written to DIR, from the
live demo's review topic or (with ``--offline``) the review loop's worked example scored
offline (docs/review.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from citemon._commands._results import ResultsReader, Start
from citemon._core.errors import ConfigError
from citemon._engine.scoring import Scorer
from citemon._engine.summary import summarize
from citemon._review.model import ReviewRecord
from citemon._review.selection import DEFAULT_SIZE, SeededSample
from citemon._service.settings import Settings
from citemon.judges import load_judge
from citemon.judges.settings import JudgeSettings

__all__ = ["offline_review", "review_dir", "save_review_topic", "write_review_set"]


def review_dir(directory: Path) -> None:
    """``--review DIR``, made now: refused before any topic or traffic exists."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--review {directory}: {exc.strerror}") from None


def write_review_set(directory: Path, reviews: list[ReviewRecord]) -> None:
    """The review records to DIR/review-records.jsonl and a set of 50 (seed 0) pulled from
    them to DIR/review-set.jsonl, as `citemon review pull` would."""
    chosen = SeededSample(DEFAULT_SIZE, seed=0)
    for review in reviews:
        chosen.offer(review)
    pool, review_set = directory / "review-records.jsonl", directory / "review-set.jsonl"
    pool.write_text("".join(r.to_json() + "\n" for r in reviews), encoding="utf-8")
    picked = chosen.records()
    review_set.write_text("".join(r.to_json() + "\n" for r in picked), encoding="utf-8")
    print(
        f"{len(reviews)} review records → {pool}\n"
        f"review set of {len(picked)} answers "
        f"({sum(len(r.claims) for r in picked)} claims, seed 0) → {review_set}"
    )


async def save_review_topic(settings: Settings, directory: Path) -> None:
    """Everything the monitor committed to the demo's review topic, as files."""
    reviews: list[ReviewRecord] = []
    async with ResultsReader(
        settings, settings.review_topic, what="review topic", set_by="the demo"
    ) as reader:
        await reader.seek(Start("offset", 0))
        async for batch in reader.batches(asyncio.Event()):
            reviews += [ReviewRecord.model_validate_json(r.value) for r in batch]
    print()
    write_review_set(directory, reviews)


def offline_review(judging: JudgeSettings, directory: Path) -> int:
    """The worked example: the review traffic scored offline, deterministic."""
    from citemon._demo.review import review_traffic
    from citemon._review.sample import review_record

    review_dir(directory)
    scorer = Scorer(load_judge(judging.judge, judging))
    scores = asyncio.run(scorer.score_many(review_traffic()))
    reviews = [review_record(score) for score in scores]
    for version in ("v1", "v2"):
        summary = summarize(s for s in scores if s.version == version)
        counts = " · ".join(f"{v} {n}" for v, n in summary.verdicts.items() if n)
        accuracy = summary.tally.citation_accuracy  # None for a version never cited: no fake 0
        shown = "– (no cited claims)" if accuracy is None else f"{accuracy:.3f}"
        print(
            f"{version}: {summary.answers} answers, citemon's citation accuracy "
            f"{shown} ({counts}; overlap "
            f"{summary.overlap_misattributions})"
        )
    write_review_set(directory, reviews)
    return 0
