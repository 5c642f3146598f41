"""The ``citemon`` command: ``score | selftest | run | compare | calibrate | demo | inspect``."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from citemon import __version__, commands
from citemon.core.errors import CitemonError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="citemon", description="Monitor whether a RAG service's citations say what it says."
    )
    parser.add_argument("--version", action="version", version=f"citemon {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue  # shared helpers, not commands
        module = importlib.import_module(f"citemon.commands.{info.name}")
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(
            info.name,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
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
