"""Cohen's kappa of two reviewers on one set, per label, and their confusion table.

Uses each reviewer's latest label per claim, on the claims both labelled.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from citemon._review.agreement import agreement, render_agreement
from citemon._review.model import read_labels

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("labels", type=Path, metavar="LABELS.jsonl", help="the labels file")
    parser.add_argument(
        "--reviewers",
        nargs=2,
        metavar=("A", "B"),
        help="the two reviewers (default: the only two in the file)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")


def main(args: argparse.Namespace) -> int:
    result = agreement(read_labels(args.labels), args.reviewers)
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render_agreement(result))
    return 0
