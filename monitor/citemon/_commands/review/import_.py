"""Read a Label Studio export (JSON or JSON_MIN) of citemon's tasks into a labels file.

Each annotation becomes one label, appended to --labels; its reviewer is the annotator's e-mail
(or label-studio:ID) unless --reviewer names one. Skipped annotations are counted, not imported.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import ClassVar

from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._review.labelstudio import labels_from_export
from citemon._review.model import append_label

__all__ = ["ImportSettings", "add_arguments", "main"]


class ImportSettings(FlagSettings):
    """``citemon review import``'s arguments (flag only: one export, one labels file per run)."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "export",
            "export",
            "Label Studio's export (JSON or JSON_MIN)",
            Path,
            metavar="EXPORT.json",
            env=False,
            positional=True,
        ),
        Flag(
            "--labels",
            "labels",
            "labels file to append to (made if missing)",
            Path,
            metavar="LABELS.jsonl",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--reviewer",
            "reviewer",
            "reviewer name for every label (default: annotator)",
            env=False,
            group=MAIN,
        ),
    )

    export: Path
    labels: Path
    reviewer: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ImportSettings.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    own = ImportSettings.from_args(args)
    result = labels_from_export(own.export, reviewer=own.reviewer)
    for label in result.labels:  # all parsed before the first is written: bad input adds nothing
        append_label(own.labels, label)
    print(
        f"{len(result.labels)} labels → {own.labels} (skipped: {result.cancelled} cancelled,"
        f" {result.unlabelled} without a label)"
    )
    return 0
