"""Read a Label Studio export (JSON or JSON_MIN) of citemon's tasks into a labels file.

Each annotation becomes one label, appended to --labels; its reviewer is the annotator's e-mail
(or label-studio:ID) unless --reviewer names one. Skipped annotations are counted, not imported.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from citemon._review.labelstudio import labels_from_export
from citemon._review.model import append_label

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "export", type=Path, metavar="EXPORT.json", help="Label Studio's export (JSON or JSON_MIN)"
    )
    parser.add_argument(
        "--labels",
        required=True,
        type=Path,
        metavar="LABELS.jsonl",
        help="labels file to append to (made if missing)",
    )
    parser.add_argument("--reviewer", help="reviewer name for every label (default: annotator)")


def main(args: argparse.Namespace) -> int:
    result = labels_from_export(args.export, reviewer=args.reviewer)
    for label in result.labels:  # all parsed before the first is written: bad input adds nothing
        append_label(args.labels, label)
    print(
        f"{len(result.labels)} labels → {args.labels} (skipped: {result.cancelled} cancelled,"
        f" {result.unlabelled} without a label)"
    )
    return 0
