"""The ``citemon`` command: ``score | selftest | run | compare | calibrate | demo | inspect``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import field_validator

from citemon import __version__
from citemon._core.errors import CitemonError
from citemon._core.settings import MAIN, Flag, FlagSettings

__all__ = ["COMMANDS", "CliSettings", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": (
        "citemon._commands.calibrate",
        "Measure a judge against human labels and write a calibration file for corrected "
        "estimates.",
    ),
    "compare": (
        "citemon._commands.compare",
        "Compare a candidate version's citation quality with a baseline's: a deploy gate.",
    ),
    "demo": (
        "citemon._commands.demo",
        "Live demo on Kafka: a RAG service ships a buggy deploy and citemon sees citation "
        "accuracy drop.",
    ),
    "inspect": (
        "citemon._commands.inspect",
        "Show the claims behind an alert: failing verdicts from the results topic, worst first.",
    ),
    "review": (
        "citemon._commands.review",
        "Measure citemon on your own traffic: review sets, a blind review page, Label Studio, "
        "agreement.",
    ),
    "run": (
        "citemon._commands.run",
        "Run the online monitor: score answer spans from Kafka and serve Prometheus metrics.",
    ),
    "score": (
        "citemon._commands.score",
        "Score a file of answers offline and print citation accuracy, coverage and faithfulness.",
    ),
    "selftest": (
        "citemon._commands.selftest",
        "Check the judge reads the passages: shuffle citations between sentences and compare "
        "scores.",
    ),
}
"""Command → (its module, its one-line help: the first line of the module's docstring).

``citemon --help`` is built from this table alone; a command's module (and what it imports:
Kafka, the judges, the service) is imported only when that command runs or shows its help.
"""


def _log_level(value: str) -> str:
    """A logging level's name (``info`` is ``INFO``), checked when the flags are read."""
    name = value.upper()
    if name not in logging.getLevelNamesMapping():
        raise ValueError(value)
    return name


class CliSettings(FlagSettings):
    """What every command shares: ``--log-level`` (``CITEMON_LOG_LEVEL``). ``--version`` is
    argparse's own action, not a setting."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--log-level",
            "log_level",
            "logging level (default WARNING)",
            _log_level,
            what="a logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL)",
            group=MAIN,
        ),
    )

    log_level: str = "WARNING"

    @field_validator("log_level", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # ``CITEMON_LOG_LEVEL=`` (set but empty) reaches here unconverted: it means unset, as
        # elsewhere; passed on, logging.basicConfig raised ValueError before any command ran.
        return "WARNING" if isinstance(value, str) and not value.strip() else value


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser that imports its module the first time it is used."""

    def __init__(self, *args: Any, module: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._module = module

    def _load(self) -> None:
        if not self._module:
            return
        module = importlib.import_module(self._module)
        self._module = ""
        self.description = (module.__doc__ or "").strip()
        module.add_arguments(self)
        self.set_defaults(handler=module.main)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._load()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._load()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="citemon", description="Monitor whether a RAG service's citations say what it says."
    )
    parser.add_argument("--version", action="version", version=f"citemon {__version__}")
    CliSettings.add_arguments(parser)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser
    )
    for name, (module, help_line) in COMMANDS.items():
        sub.add_parser(
            name,
            help=help_line,
            module=module,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=CliSettings.from_args(args).log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except CitemonError as exc:
        print(f"citemon: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `citemon score … | head`: the reader left, not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
