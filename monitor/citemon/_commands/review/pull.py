"""Pull a review set: a random sample of review records, for people to label in one sitting.

Reads the review topic that `citemon run --review-rate R` writes (read_committed, so a record
of an aborted transaction is never pulled), or review-record files (`citemon score
--review-output`, or an earlier review set) given with --input. Keeps the records of
--service / --version (repeatable) written between --since and --until (a duration ago such as
2h, or an ISO 8601 time; on the topic the Kafka record time, in files the record's scored_at),
and writes --size of them (default 50 answers; 0 = all) as JSON lines to --output (- =
standard output). Which answers is decided by --seed alone: each answer's rank is a keyed hash
of its trace ID, and the --size lowest ranks are kept, so the same seed pulls the same set
whatever order the records were read in, and memory stays bounded by --size. An answer seen
twice is kept once. Kafka connection: the same CITEMON_* settings and flags as `citemon run`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import IO, ClassVar, Final

from pydantic import Field, ValidationError

from citemon._commands._inspection import parse_time_ms, time_flag_ms
from citemon._commands._results import ResultsReader, Start
from citemon._core.errors import ConfigError, InputError
from citemon._core.settings import Flag, FlagSettings
from citemon._review.model import ReviewRecord, read_review_records
from citemon._review.selection import DEFAULT_SIZE, SeededSample
from citemon._service.settings import (
    KAFKA_CONNECTION_FIELDS,
    add_settings_arguments,
    settings_from_args,
)

__all__ = ["PullSettings", "add_arguments", "main"]

_KAFKA_FIELDS: Final = (*KAFKA_CONNECTION_FIELDS, "review_topic")
_WHERE: Final = "where to read and write"


class PullSettings(FlagSettings):
    """``citemon review pull``'s query: which answers, from where, to where. All flag only (a
    variable would silently narrow every later pull); the Kafka connection is ``run``'s."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag("--service", "services", "service (repeatable)", env=False, repeat=True),
        Flag("--version", "versions", "version (repeatable)", env=False, repeat=True),
        Flag(
            "--since",
            "since",
            "written since: a duration ago (2h, 7d is 168h) or ISO 8601",
            env=False,
        ),
        Flag("--until", "until", "written before: a duration ago or ISO 8601", env=False),
        Flag(
            "--size",
            "size",
            f"answers in the set (default {DEFAULT_SIZE}; 0 = every matching answer)",
            int,
            env=False,
        ),
        Flag("--seed", "seed", "which random set (default 0)", int, env=False),
        Flag(
            "--input",
            "inputs",
            "review-record files instead of the topic (repeatable)",
            Path,
            metavar="FILE",
            env=False,
            repeat=True,
            group=_WHERE,
        ),
        Flag(
            "--output",
            "output",
            "the review set, JSON lines (- = stdout)",
            short="-o",
            env=False,
            required=True,
            group=_WHERE,
        ),
    )

    services: list[str] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    since: str | None = None
    until: str | None = None
    size: int = DEFAULT_SIZE
    seed: int = 0
    inputs: list[Path] = Field(default_factory=list)
    output: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    PullSettings.add_arguments(parser, title="which answers")
    add_settings_arguments(parser, _KAFKA_FIELDS, "kafka (as citemon run)")


def _from_files(
    paths: list[Path], chosen: SeededSample, since_ms: int | None, until_ms: int | None
) -> int:
    """Offer every record of ``paths``; returns how many lack a usable ``scored_at`` while a
    time range was asked for (left out)."""
    untimed = 0
    for path in paths:
        for record in read_review_records(path):
            if since_ms is not None or until_ms is not None:
                try:
                    at = parse_time_ms(record.scored_at) if record.scored_at else None
                except ValueError:
                    at = None
                if at is None:
                    untimed += 1
                    continue
                if (since_ms is not None and at < since_ms) or (
                    until_ms is not None and at >= until_ms
                ):
                    continue
            chosen.offer(record)
    return untimed


async def _from_topic(
    args: argparse.Namespace, chosen: SeededSample, since_ms: int | None, until_ms: int | None
) -> tuple[str, int]:
    settings = settings_from_args(args)
    topic = settings.review_topic
    bad = 0
    start = Start("time", since_ms) if since_ms is not None else Start("offset", 0)
    async with ResultsReader(
        settings,
        topic,
        client_id=f"{settings.client_id}-review",
        what="review topic",
        set_by="--review-topic / CITEMON_REVIEW_TOPIC",
    ) as reader:
        await reader.seek(start, until_ms=until_ms)
        async for batch in reader.batches(asyncio.Event()):
            for r in batch:
                try:
                    chosen.offer(ReviewRecord.model_validate_json(r.value))
                except ValidationError as exc:
                    bad += 1
                    print(
                        f"citemon review pull: skipped {r.topic}/{r.partition}/{r.offset}: "
                        f"not a review record: {exc.errors()[0]['msg']}",
                        file=sys.stderr,
                    )
    return topic, bad


def main(args: argparse.Namespace) -> int:
    own = PullSettings.from_args(args)
    if own.size < 0:
        raise ConfigError(f"--size must be 0 or more, not {own.size}")
    now_ms = int(time.time() * 1000)
    since_ms = time_flag_ms("--since", own.since, now_ms) if own.since is not None else None
    until_ms = time_flag_ms("--until", own.until, now_ms) if own.until is not None else None
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ConfigError(f"--until {own.until!r} is not after --since {own.since!r}")
    chosen = SeededSample(own.size, own.seed, services=own.services, versions=own.versions)
    bad = untimed = 0
    if own.inputs:
        untimed = _from_files(own.inputs, chosen, since_ms, until_ms)
        where = ", ".join(str(p) for p in own.inputs)
    else:
        topic, bad = asyncio.run(_from_topic(args, chosen, since_ms, until_ms))
        where = f"topic {topic}"
    records = chosen.records()
    out: IO[str]
    try:
        with (
            nullcontext(sys.stdout)
            if own.output == "-"
            else open(own.output, "w", encoding="utf-8")
        ) as out:
            for record in records:
                out.write(record.to_json() + "\n")
    except OSError as exc:
        raise InputError(f"cannot write --output {own.output}: {exc.strerror or exc}") from None
    claims = sum(len(r.claims) for r in records)
    print(
        f"citemon review pull: {len(records)} answers ({claims} claims) of {chosen.matched} "
        f"matching, {chosen.read} read from {where}; seed {own.seed}",
        file=sys.stderr,
    )
    if untimed:
        print(
            f"citemon review pull: {untimed} record(s) without scored_at left out "
            "by --since/--until",
            file=sys.stderr,
        )
    return 1 if bad else 0
