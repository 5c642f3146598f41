"""Cohen's kappa of two reviewers on one set, per label, and their confusion table.

Uses each reviewer's latest label per claim, on the claims both labelled.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import ClassVar, Literal

from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._review.agreement import agreement, render_agreement
from citemon._review.model import read_labels

__all__ = ["AgreementSettings", "add_arguments", "main"]


class AgreementSettings(FlagSettings):
    """``citemon review agreement``'s arguments: which file and reviewers, and how to print.
    All flag only: each run asks about one file."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "labels",
            "labels",
            "the labels file",
            Path,
            metavar="LABELS.jsonl",
            env=False,
            positional=True,
        ),
        Flag(
            "--reviewers",
            "reviewers",
            "the two reviewers (default: the only two in the file)",
            metavar=("A", "B"),
            nargs=2,
            env=False,
            group=MAIN,
        ),
        Flag("--format", "format", "", choices=("table", "json"), env=False, group=MAIN),
    )

    labels: Path
    reviewers: tuple[str, str] | None = None
    format: Literal["table", "json"] = "table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    AgreementSettings.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    own = AgreementSettings.from_args(args)
    result = agreement(read_labels(own.labels), own.reviewers)
    if own.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render_agreement(result))
    return 0
