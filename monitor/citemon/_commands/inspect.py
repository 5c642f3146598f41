"""Show the claims behind an alert: failing verdicts from the results topic, worst first.

Reads the results topic that `citemon run --results-topic` writes (read_committed: an aborted
transaction's records are never shown) from --since (default 1h ago), --offset N or --last N,
or a scores file (--input FILE|-: results JSON lines, or `citemon score --format json`).
Filters by --service, --version, --environment, --verdict, --trace-id and --until; prints the
worst claims first, after a block that groups each version's misattributed claims by pattern
(count, share, the other versions' share, likely owner and fix, an example each; --pattern
keeps one pattern's claims only), then the claims (misattributed with the passage that should
have been cited, then
unsupported, multi_hop, dangling, uncited, unjudged, correct), newest first within a verdict,
each with its cited and supporting IDs, their excerpts when the record carries them, the
judge's reason and the trace ID (a link with --trace-url or CITEMON_TRACE_URL). --follow keeps
printing new claims until Ctrl-C or SIGTERM. Kafka connection: the same CITEMON_* settings and
flags as `citemon run`. Exit status 0, 1 when bad records were skipped, 2 on bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Iterable
from typing import IO, Any, ClassVar, Final, Literal

from pydantic import Field, field_validator

from citemon._commands._inspection import (
    DEFAULT_VERDICTS,
    Filter,
    Finding,
    Worst,
    findings,
    format_time,
    parse_result,
    read_results_file,
    render_json_line,
    render_patterns,
    render_table,
    summary_line,
    time_flag_ms,
)
from citemon._commands._options import open_input
from citemon._commands._results import DEFAULT_RESULTS_TOPIC, ResultsReader, Start
from citemon._core.errors import ConfigError, InputError, KafkaUnavailable
from citemon._core.records import PATTERNS, VERDICTS, VerdictName
from citemon._core.settings import Exclusive, Flag, FlagSettings
from citemon._service.settings import (
    KAFKA_CONNECTION_FIELDS,
    add_settings_arguments,
    settings_from_args,
)

__all__ = ["ENV_TRACE_URL", "InspectSettings", "add_arguments", "main"]

ENV_TRACE_URL: Final = "CITEMON_TRACE_URL"
"""Default of ``--trace-url``: a link template with ``{trace_id}``, e.g. Grafana's Tempo view."""

DEFAULT_SINCE: Final = "1h"
DEFAULT_LIMIT: Final = 20

_KAFKA_FIELDS: Final = (*KAFKA_CONNECTION_FIELDS, "results_topic")
_SOURCE: Final = "where to read"


class InspectSettings(FlagSettings):
    """``citemon inspect``'s query: what to show, how, from where. Flag only (a variable would
    silently filter every later look, and ``CITEMON_VERSION`` or ``CITEMON_SINCE`` would mean
    something else to every other command), but for ``--trace-url``: the link template is
    configuration, ``CITEMON_TRACE_URL``. The Kafka connection is ``run``'s settings."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag("--service", "services", "service label (repeatable)", env=False, repeat=True),
        Flag("--version", "versions", "version label (repeatable)", env=False, repeat=True),
        Flag(
            "--environment",
            "environments",
            "environment label (repeatable)",
            env=False,
            repeat=True,
        ),
        Flag(
            "--verdict",
            "verdicts",
            "verdicts to show (repeatable; default the failed ones: misattributed, "
            "unsupported, multi_hop, dangling)",
            choices=(*VERDICTS, "all"),
            env=False,
            repeat=True,
        ),
        Flag(
            "--pattern",
            "patterns",
            "only misattributed claims of this pattern (repeatable; docs/why-citations-fail.md)",
            choices=PATTERNS,
            env=False,
            repeat=True,
        ),
        Flag("--trace-id", "trace_ids", "trace ID (repeatable)", env=False, repeat=True),
        Flag(
            "--since",
            "since",
            f"records written since a time: a duration ago (30m, 2h) or ISO 8601 "
            f"(default {DEFAULT_SINCE} on the topic, everything in a file)",
            env=False,
        ),
        Flag(
            "--until",
            "until",
            "records written before a time (duration ago or ISO 8601)",
            env=False,
        ),
        Flag(
            "--limit",
            "limit",
            f"claims shown, the worst first; 0 = all (default {DEFAULT_LIMIT}; "
            "--follow prints every new one)",
            int,
            env=False,
        ),
        Flag(
            "--format",
            "format",
            "json: one line per claim",
            choices=("table", "json"),
            env=False,
            group="output",
        ),
        Flag(
            "--trace-url",
            "trace_url",
            "link template for trace IDs, e.g. 'https://grafana/explore?traceId={trace_id}'",
            metavar="TRACE_URL",
            group="output",
        ),
        Flag(
            "--input",
            "input",
            "a scores file instead of the topic (- = stdin)",
            metavar="FILE",
            env=False,
            group=_SOURCE,
        ),
        Flag(
            "--offset", "offset", "from offset N of each partition", int, env=False, group=_SOURCE
        ),
        Flag(
            "--last",
            "last",
            "the last N records of each partition",
            int,
            env=False,
            group=_SOURCE,
        ),
        Flag(
            "--partition",
            "partitions",
            "only partition P",
            int,
            env=False,
            repeat=True,
            group=_SOURCE,
        ),
        Flag(
            "--follow",
            "follow",
            "keep printing new claims (Ctrl-C stops)",
            bool,
            env=False,
            group=_SOURCE,
        ),
    )
    EXCLUSIVE: ClassVar[tuple[Exclusive, ...]] = (Exclusive(("offset", "last")),)

    services: list[str] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    environments: list[str] = Field(default_factory=list)
    verdicts: list[VerdictName | Literal["all"]] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    trace_ids: list[str] = Field(default_factory=list)
    since: str | None = None
    until: str | None = None
    limit: int = DEFAULT_LIMIT
    format: Literal["table", "json"] = "table"
    trace_url: str | None = Field(None, validation_alias=ENV_TRACE_URL)
    input: str | None = None
    offset: int | None = None
    last: int | None = None
    partitions: list[int] = Field(default_factory=list)
    follow: bool = False

    @field_validator("trace_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    InspectSettings.add_arguments(parser, title="what to show")
    add_settings_arguments(parser, _KAFKA_FIELDS, "kafka (as citemon run)")


def _trace_url(own: InspectSettings) -> str | None:
    template = own.trace_url
    if template is None:
        return None
    source = f"(from the flag or {ENV_TRACE_URL})"
    try:
        probe = template.format(trace_id="0" * 32)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"--trace-url: only {{trace_id}} may be substituted ({exc!r}) {source}"
        ) from None
    if probe == template:
        raise ConfigError(f"--trace-url {template!r} has no {{trace_id}} {source}")
    return template


def _filter(own: InspectSettings, now_ms: int, *, from_file: bool) -> Filter:
    verdicts = frozenset(v for v in VERDICTS if v in own.verdicts)  # typed, "all" aside
    since = own.since
    if since is None and not from_file and own.offset is None and own.last is None:
        since = DEFAULT_SINCE  # the topic holds days: without a start, the last hour
    since_ms = time_flag_ms("--since", since, now_ms) if since is not None else None
    until_ms = time_flag_ms("--until", own.until, now_ms) if own.until is not None else None
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ConfigError(f"--until {own.until!r} is not after --since {since!r}")
    return Filter(
        services=frozenset(own.services),
        versions=frozenset(own.versions),
        environments=frozenset(own.environments),
        verdicts=frozenset() if "all" in own.verdicts else (verdicts or DEFAULT_VERDICTS),
        patterns=frozenset(own.patterns),
        trace_ids=frozenset(t.lower() for t in own.trace_ids),
        since_ms=since_ms,
        until_ms=until_ms,
    )


def _check(own: InspectSettings) -> None:
    if own.limit < 0:
        raise ConfigError(f"--limit must be 0 (all) or more, not {own.limit}")
    if own.offset is not None and own.offset < 0:
        raise ConfigError(f"--offset must be 0 or more, not {own.offset}")
    if own.last is not None and own.last < 1:
        raise ConfigError(f"--last must be at least 1, not {own.last}")
    if own.input is not None:
        for flag, given in (
            ("--follow", own.follow),
            ("--offset", own.offset is not None),
            ("--last", own.last is not None),
            ("--partition", bool(own.partitions)),
        ):
            if given:
                raise ConfigError(f"{flag} reads the results topic; not with --input")
    if own.since is not None and (own.offset is not None or own.last is not None):
        flag = "--offset" if own.offset is not None else "--last"
        raise ConfigError(f"--since and {flag} both say where to start: give one")
    if own.follow and own.until is not None:
        raise ConfigError("--until ends the read; not with --follow")


class _Printer:
    """Writes findings in the chosen format, flushing (``--follow`` is read live)."""

    def __init__(self, fmt: str, trace_url: str | None, stream: IO[str]) -> None:
        self.fmt = fmt
        self.trace_url = trace_url
        self.stream = stream
        self.printed = 0

    def groups(self, worst: Worst) -> None:
        """The table's first block: the version's misattributions by pattern (not in JSON,
        whose lines are claims; each carries its ``pattern``)."""
        block = render_patterns(worst) if self.fmt == "table" else None
        if block is not None:
            self.stream.write(block + "\n\n")
            self.stream.flush()

    def write(self, items: Iterable[Finding]) -> None:
        for f in items:
            if self.fmt == "json":
                self.stream.write(render_json_line(f, self.trace_url) + "\n")
            else:
                self.stream.write(
                    ("\n" if self.printed else "") + render_table(f, self.trace_url) + "\n"
                )
            self.printed += 1
        self.stream.flush()


def _skip(where: str, exc: InputError, bad: list[str]) -> None:
    print(f"citemon: skipped {where}: {exc}", file=sys.stderr)
    bad.append(where)


def _report(worst: Worst, shown: int, read: str, bad: list[str]) -> None:
    print(f"citemon inspect: {read}; {summary_line(worst, shown)}", file=sys.stderr)
    if bad:
        print(f"citemon: {len(bad)} bad record(s) skipped", file=sys.stderr)


def _from_file(own: InspectSettings, path: str, where: Filter, printer: _Printer) -> int:
    worst = Worst(own.limit)
    bad: list[str] = []
    answers = untimed = 0
    timed = where.since_ms is not None or where.until_ms is not None
    with open_input(path) as stream:
        for number, item in read_results_file(stream):
            if isinstance(item, InputError):
                _skip(path, item, bad)
                continue
            answers += 1
            untimed += timed and item.timestamp_ms is None
            for f in findings(
                item,
                timestamp_ms=None,
                source=f"{path}:{number}",
                position=(0, number),
                where=where,
            ):
                worst.add(f)
    shown = worst.sorted()
    printer.groups(worst)
    printer.write(shown)
    _report(worst, len(shown), f"read {answers} answer(s) from {path}", bad)
    if untimed:
        print(
            f"citemon: {untimed} answer(s) carry no timestamp and were left out by --since/--until",
            file=sys.stderr,
        )
    return 1 if bad else 0


async def _from_topic(
    args: argparse.Namespace, own: InspectSettings, where: Filter, printer: _Printer
) -> int:
    from aiokafka.errors import KafkaError

    settings = settings_from_args(args)
    topic = settings.results_topic or DEFAULT_RESULTS_TOPIC
    if own.offset is not None:
        start = Start("offset", own.offset)
    elif own.last is not None:
        start = Start("last", own.last)
    else:
        assert where.since_ms is not None
        start = Start("time", where.since_ms)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bad: list[str] = []

    def take(records: list[Any], sink: Worst) -> None:  # aiokafka ConsumerRecords
        for r in records:
            source = f"{r.topic}/{r.partition}/{r.offset}"
            try:
                record = parse_result(r.value)
            except InputError as exc:
                _skip(source, exc, bad)
                continue
            at = (r.partition, r.offset)
            for f in findings(
                record, timestamp_ms=r.timestamp, source=source, position=at, where=where
            ):
                sink.add(f)

    try:
        async with ResultsReader(settings, topic, partitions=frozenset(own.partitions)) as reader:
            spans = await reader.seek(start, until_ms=where.until_ms)
            worst = Worst(own.limit)
            async for batch in reader.batches(stop):
                take(batch, worst)
            shown = worst.sorted()
            printer.groups(worst)
            printer.write(shown)
            offsets = ", ".join(f"{tp.partition}:{a}-{b}" for tp, (a, b) in spans.items())
            since = f" since {format_time(where.since_ms)}" if start.kind == "time" else ""
            _report(worst, len(shown), f"read {topic}{since} (offsets {offsets})", bad)
            if stop.is_set():  # a signal before the end: what was shown is partial
                print("citemon inspect: interrupted before the end of the read", file=sys.stderr)
                return 130
            if own.follow:
                print(
                    f"citemon inspect: following {topic} (Ctrl-C to stop)",
                    file=sys.stderr,
                    flush=True,
                )
                async for batch in reader.batches(stop, follow=True):
                    new = Worst(0)
                    take(batch, new)
                    printer.write(new.sorted())
                print(
                    f"citemon inspect: stopped; {printer.printed} claim(s) printed", file=sys.stderr
                )
    except KafkaError as exc:  # an ACL that denies the topic, a broker gone mid-read, …
        raise KafkaUnavailable(f"reading {topic}: {type(exc).__name__}: {exc}") from exc
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    return 1 if bad else 0


def main(args: argparse.Namespace) -> int:
    own = InspectSettings.from_args(args)
    _check(own)
    now_ms = int(time.time() * 1000)
    where = _filter(own, now_ms, from_file=own.input is not None)
    printer = _Printer(own.format, _trace_url(own), sys.stdout)
    if own.input is not None:
        return _from_file(own, own.input, where, printer)
    return asyncio.run(_from_topic(args, own, where, printer))
