"""Write a review set as Label Studio tasks (tasks.json) and labelling config (config.xml).

Create a Label Studio project with config.xml as its labelling interface, import tasks.json,
annotate, export as JSON (or JSON_MIN), and read it back with `citemon review import`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import ClassVar, Literal

from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._review.labelstudio import export_label_studio
from citemon._review.tasks import load_review_set

__all__ = ["ExportSettings", "add_arguments", "main"]


class ExportSettings(FlagSettings):
    """``citemon review export``'s arguments (flag only: one set, one directory per run)."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "review_set",
            "review_set",
            "the review set",
            Path,
            metavar="SET.jsonl",
            env=False,
            positional=True,
        ),
        Flag(
            "--format",
            "format",
            "what to write (default label-studio)",
            choices=("label-studio",),
            env=False,
            group=MAIN,
        ),
        Flag(
            "--output",
            "output",
            "directory to write tasks.json and config.xml into",
            Path,
            metavar="DIR",
            short="-o",
            env=False,
            required=True,
            group=MAIN,
        ),
    )

    review_set: Path
    format: Literal["label-studio"] = "label-studio"
    output: Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ExportSettings.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    own = ExportSettings.from_args(args)
    review_set = load_review_set(own.review_set)
    tasks, config = export_label_studio(review_set, own.output)
    print(f"{len(review_set.tasks)} tasks → {tasks}; labelling config → {config}")
    return 0
