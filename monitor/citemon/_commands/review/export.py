"""Write a review set as Label Studio tasks (tasks.json) and labelling config (config.xml).

Create a Label Studio project with config.xml as its labelling interface, import tasks.json,
annotate, export as JSON (or JSON_MIN), and read it back with `citemon review import`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from citemon._review.labelstudio import export_label_studio
from citemon._review.tasks import load_review_set

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("review_set", type=Path, metavar="SET.jsonl", help="the review set")
    parser.add_argument(
        "--format",
        choices=("label-studio",),
        default="label-studio",
        help="what to write (default label-studio)",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        metavar="DIR",
        help="directory to write tasks.json and config.xml into",
    )


def main(args: argparse.Namespace) -> int:
    review_set = load_review_set(args.review_set)
    tasks, config = export_label_studio(review_set, args.output)
    print(f"{len(review_set.tasks)} tasks → {tasks}; labelling config → {config}")
    return 0
