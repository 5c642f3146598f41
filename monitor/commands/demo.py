"""Score the bundled sample (the DESIGN specimen and a synthetic help centre) and show the table."""

from __future__ import annotations

import argparse
import asyncio

from monitor.judges import add_judge_arguments, judge_options, load_judge
from monitor.report import render_table
from monitor.sample import sample_records
from monitor.scoring import Scorer, summarize

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--explain", action="store_true", help="show reasons per claim")
    add_judge_arguments(parser)


async def _run(args: argparse.Namespace) -> int:
    scorer = Scorer(load_judge(args.judge, judge_options(args)))
    scores = await scorer.score_many(sample_records())
    print(render_table(scores, summarize(scores), "any_of", explain=args.explain))
    return 0


def main(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
