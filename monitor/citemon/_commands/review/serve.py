"""Serve the blind review page for one reviewer on a review set (127.0.0.1 unless --host).

One task per cited claim: the question, the claim in its answer, the cited passages with the
words the claim shares marked. Keys 1-4 give the label (entailed, partial, not entailed, not a
claim); citemon's verdict is shown only then, and where it disagrees, o/f/s/x say why (overlap,
fused, strict, other) or Enter gives no reason; u undoes. Each label is appended to the labels
file (fsynced) before the page moves on; reloading resumes at the first unlabelled claim.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from citemon._core.errors import ConfigError
from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._review.page import ReviewPage, ReviewServer
from citemon._review.tasks import load_review_set

__all__ = ["ServeSettings", "add_arguments", "main"]


class ServeSettings(FlagSettings):
    """``citemon review serve``'s settings. Where the page listens is configuration, with its
    variable (``CITEMON_REVIEW_SERVE_HOST``, ``CITEMON_REVIEW_SERVE_PORT``); the set, the labels
    file and the reviewer are this sitting's, flag only."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_REVIEW_SERVE_", extra="ignore", validate_default=True, frozen=True
    )
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--set",
            "review_set",
            "the review set (review records, JSON lines)",
            Path,
            metavar="SET.jsonl",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--labels",
            "labels",
            "the labels file: labels are appended to it (made if missing)",
            Path,
            metavar="LABELS.jsonl",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--reviewer",
            "reviewer",
            "who is labelling (kept in each label)",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--host",
            "host",
            "address to listen on (default 127.0.0.1: this machine only)",
            group=MAIN,
        ),
        Flag(
            "--port",
            "port",
            "port to listen on (default 0: any free port, printed)",
            int,
            group=MAIN,
        ),
    )

    review_set: Path
    labels: Path
    reviewer: str
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)

    @field_validator("host", mode="before")
    @classmethod
    def _empty_is_this_machine(cls, value: Any) -> Any:
        # Empty means unset, as for every variable: the server would bind "" to every
        # interface, opening the answers under review to the network (say --host 0.0.0.0).
        return "127.0.0.1" if isinstance(value, str) and not value.strip() else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ServeSettings.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    own = ServeSettings.from_args(args)
    page = ReviewPage(load_review_set(own.review_set), own.labels, own.reviewer)
    try:
        server = ReviewServer(page, host=own.host, port=own.port)
    except OSError as exc:  # a port in use, a host that is no address here
        raise ConfigError(
            f"cannot listen on {own.host}:{own.port}: {exc.strerror or exc} (--host, --port)"
        ) from None
    total = len(page.review_set.tasks)
    print(
        f"review page: {server.url}  ({page.labelled} / {total} labelled by {own.reviewer};"
        " Ctrl-C to stop)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print(f"{page.labelled} / {total} labelled; labels in {own.labels}", file=sys.stderr)
    return 0
