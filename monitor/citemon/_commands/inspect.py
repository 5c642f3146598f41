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
import os
import signal
import sys
import time
from collections.abc import Iterable
from typing import IO, Any, Final

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
from citemon._core.records import PATTERNS, VERDICTS
from citemon._service.settings import (
    KAFKA_CONNECTION_FIELDS,
    add_settings_arguments,
    settings_from_args,
)

__all__ = ["ENV_TRACE_URL", "add_arguments", "main"]

ENV_TRACE_URL: Final = "CITEMON_TRACE_URL"
"""Default of ``--trace-url``: a link template with ``{trace_id}``, e.g. Grafana's Tempo view."""

DEFAULT_SINCE: Final = "1h"
DEFAULT_LIMIT: Final = 20

_KAFKA_FIELDS: Final = (*KAFKA_CONNECTION_FIELDS, "results_topic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("what to show")
    where.add_argument("--service", action="append", default=[], help="service label (repeatable)")
    where.add_argument("--version", action="append", default=[], help="version label (repeatable)")
    where.add_argument(
        "--environment", action="append", default=[], help="environment label (repeatable)"
    )
    where.add_argument(
        "--verdict",
        action="append",
        default=[],
        choices=(*VERDICTS, "all"),
        help="verdicts to show (repeatable; default the failed ones: misattributed, "
        "unsupported, multi_hop, dangling)",
    )
    where.add_argument(
        "--pattern",
        action="append",
        default=[],
        choices=PATTERNS,
        help="only misattributed claims of this pattern (repeatable; docs/why-citations-fail.md)",
    )
    where.add_argument("--trace-id", action="append", default=[], help="trace ID (repeatable)")
    where.add_argument(
        "--since",
        help=f"records written since a time: a duration ago (30m, 2h) or ISO 8601 "
        f"(default {DEFAULT_SINCE} on the topic, everything in a file)",
    )
    where.add_argument("--until", help="records written before a time (duration ago or ISO 8601)")
    where.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"claims shown, the worst first; 0 = all (default {DEFAULT_LIMIT}; "
        "--follow prints every new one)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--format", choices=("table", "json"), default="table", help="json: one line per claim"
    )
    out.add_argument(
        "--trace-url",
        default=None,
        help="link template for trace IDs, e.g. 'https://grafana/explore?traceId={trace_id}' "
        f"[env {ENV_TRACE_URL}]",
    )
    src = parser.add_argument_group("where to read")
    src.add_argument(
        "--input", metavar="FILE", help="a scores file instead of the topic (- = stdin)"
    )
    start = src.add_mutually_exclusive_group()
    start.add_argument("--offset", type=int, help="from offset N of each partition")
    start.add_argument("--last", type=int, help="the last N records of each partition")
    src.add_argument("--partition", type=int, action="append", default=[], help="only partition P")
    src.add_argument(
        "--follow", action="store_true", help="keep printing new claims (Ctrl-C stops)"
    )
    add_settings_arguments(parser, _KAFKA_FIELDS, "kafka (as citemon run)")


def _trace_url(args: argparse.Namespace) -> str | None:
    template: str | None = args.trace_url or os.environ.get(ENV_TRACE_URL) or None
    if template is None:
        return None
    flag = "--trace-url" if args.trace_url else ENV_TRACE_URL
    try:
        probe = template.format(trace_id="0" * 32)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"{flag}: only {{trace_id}} may be substituted ({exc!r})") from None
    if probe == template:
        raise ConfigError(f"{flag} {template!r} has no {{trace_id}}")
    return template


def _filter(args: argparse.Namespace, now_ms: int, *, from_file: bool) -> Filter:
    verdicts = frozenset(args.verdict)
    since = args.since
    if since is None and not from_file and args.offset is None and args.last is None:
        since = DEFAULT_SINCE  # the topic holds days: without a start, the last hour
    since_ms = time_flag_ms("--since", since, now_ms) if since is not None else None
    until_ms = time_flag_ms("--until", args.until, now_ms) if args.until is not None else None
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ConfigError(f"--until {args.until!r} is not after --since {since!r}")
    return Filter(
        services=frozenset(args.service),
        versions=frozenset(args.version),
        environments=frozenset(args.environment),
        verdicts=frozenset() if "all" in verdicts else (verdicts or DEFAULT_VERDICTS),
        patterns=frozenset(args.pattern),
        trace_ids=frozenset(t.lower() for t in args.trace_id),
        since_ms=since_ms,
        until_ms=until_ms,
    )


def _check(args: argparse.Namespace) -> None:
    if args.limit < 0:
        raise ConfigError(f"--limit must be 0 (all) or more, not {args.limit}")
    if args.offset is not None and args.offset < 0:
        raise ConfigError(f"--offset must be 0 or more, not {args.offset}")
    if args.last is not None and args.last < 1:
        raise ConfigError(f"--last must be at least 1, not {args.last}")
    if args.input is not None:
        for flag, given in (
            ("--follow", args.follow),
            ("--offset", args.offset is not None),
            ("--last", args.last is not None),
            ("--partition", bool(args.partition)),
        ):
            if given:
                raise ConfigError(f"{flag} reads the results topic; not with --input")
    if args.since is not None and (args.offset is not None or args.last is not None):
        flag = "--offset" if args.offset is not None else "--last"
        raise ConfigError(f"--since and {flag} both say where to start: give one")
    if args.follow and args.until is not None:
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


def _from_file(args: argparse.Namespace, where: Filter, printer: _Printer) -> int:
    worst = Worst(args.limit)
    bad: list[str] = []
    answers = untimed = 0
    timed = where.since_ms is not None or where.until_ms is not None
    with open_input(args.input) as stream:
        for number, item in read_results_file(stream):
            if isinstance(item, InputError):
                _skip(args.input, item, bad)
                continue
            answers += 1
            untimed += timed and item.timestamp_ms is None
            for f in findings(
                item,
                timestamp_ms=None,
                source=f"{args.input}:{number}",
                position=(0, number),
                where=where,
            ):
                worst.add(f)
    shown = worst.sorted()
    printer.groups(worst)
    printer.write(shown)
    _report(worst, len(shown), f"read {answers} answer(s) from {args.input}", bad)
    if untimed:
        print(
            f"citemon: {untimed} answer(s) carry no timestamp and were left out by --since/--until",
            file=sys.stderr,
        )
    return 1 if bad else 0


async def _from_topic(args: argparse.Namespace, where: Filter, printer: _Printer) -> int:
    from aiokafka.errors import KafkaError

    settings = settings_from_args(args)
    topic = settings.results_topic or DEFAULT_RESULTS_TOPIC
    if args.offset is not None:
        start = Start("offset", args.offset)
    elif args.last is not None:
        start = Start("last", args.last)
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
        async with ResultsReader(settings, topic, partitions=frozenset(args.partition)) as reader:
            spans = await reader.seek(start, until_ms=where.until_ms)
            worst = Worst(args.limit)
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
            if args.follow:
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
    _check(args)
    now_ms = int(time.time() * 1000)
    where = _filter(args, now_ms, from_file=args.input is not None)
    printer = _Printer(args.format, _trace_url(args), sys.stdout)
    if args.input is not None:
        return _from_file(args, where, printer)
    return asyncio.run(_from_topic(args, where, printer))
