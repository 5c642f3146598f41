"""Check the judge reads the passages: shuffle citations between sentences and compare scores.

Faithfulness must not move (same claims, same context) while citation accuracy must fall. Exit
status 1 when it does not: the judge is not discriminating between passages.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import ClassVar

from pydantic_settings import SettingsConfigDict

from citemon._checks.selftest import run_shuffle_selftest
from citemon._commands._files import read_jsonl
from citemon._commands._options import ANSWERS_INPUT, open_input
from citemon._core.errors import InputError
from citemon._core.records import AnswerRecord
from citemon._core.settings import Flag, FlagSettings
from citemon._engine.scoring import Scorer
from citemon.judges import add_judge_arguments, judge_options, load_judge

__all__ = ["SelftestSettings", "add_arguments", "main"]


class SelftestSettings(FlagSettings):
    """``citemon selftest``'s own flags, each with its variable ``CITEMON_SELFTEST_<FIELD>``
    (the judge's are :class:`~citemon.judges.settings.JudgeSettings`'), but for the input file,
    a positional and flag only."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_SELFTEST_", extra="ignore", validate_default=True, frozen=True
    )
    TITLE: ClassVar[str] = "selftest"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        ANSWERS_INPUT,
        Flag("--seed", "seed", "the shuffle's random seed (default 0)", int, metavar="SEED"),
        Flag(
            "--min-drop",
            "min_drop",
            "accuracy must fall by at least this much (default 0.05)",
            float,
            metavar="MIN_DROP",
        ),
    )

    input: str
    seed: int = 0
    min_drop: float = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    SelftestSettings.add_arguments(parser, title="selftest")
    add_judge_arguments(parser)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


async def _run(args: argparse.Namespace) -> int:
    own = SelftestSettings.from_args(args)
    records: list[AnswerRecord] = []
    bad = 0
    with open_input(own.input) as stream:
        for _, item in read_jsonl(stream):
            if isinstance(item, AnswerRecord):
                records.append(item)
                continue
            bad += 1  # reported, never dropped in silence
            print(f"citemon: skipped {item}", file=sys.stderr)  # "line N: why"
    if bad:
        print(f"citemon: {bad} bad input line(s) skipped", file=sys.stderr)
    judging = judge_options(args)
    judge = load_judge(judging.judge, judging)
    try:
        result = await run_shuffle_selftest(Scorer(judge), records, seed=own.seed)
    finally:
        aclose = getattr(judge, "aclose", None)
        if aclose is not None:
            await aclose()
    if not result.original.answers:
        # Nothing to shuffle says nothing about the judge: not exit 1 ("the judge is blind").
        raise InputError(
            f"{len(records)} answer(s) read, none with two or more differently cited "
            "sentences: nothing to shuffle"
        )
    o, s = result.original.as_dict(), result.shuffled.as_dict()
    print(f"answers read {len(records)}, shuffled {result.original.answers}")
    print(
        f"citation accuracy  {_pct(o['citation_accuracy'])} -> {_pct(s['citation_accuracy'])}"
        f"  (drop {_pct(result.accuracy_drop)}, sensitivity {_pct(result.sensitivity)})"
    )
    print(
        f"faithfulness       {_pct(o['faithfulness'])} -> {_pct(s['faithfulness'])}"
        f"  (shift {_pct(result.faithfulness_shift)})"
    )
    if result.passed(min_drop=own.min_drop):
        print("PASS: accuracy fell on shuffled citations while faithfulness held")
        return 0
    print("FAIL: the judge does not tell the cited passage from the others", file=sys.stderr)
    return 1


def main(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
