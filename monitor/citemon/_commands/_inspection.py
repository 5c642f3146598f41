"""The claims behind an alert: results records → filtered findings, worst first (``inspect``).

A *finding* is one claim of one results record (docs/design.md, "Kafka topics": the
``answers[]`` element of the score output plus ``span_id``, and ``excerpts`` when the monitor
writes them), with where it came from (the topic's partition and offset, or a file's line) and
when (the Kafka record's timestamp).

Worst first: by :data:`SEVERITY` (misattributed — with the passage that should have been cited —
then unsupported, multi-hop, dangling, uncited, unjudged, correct); within one verdict, newest
first (a file record without a timestamp counts by its line: a later line is newer).
:class:`Worst` keeps only the ``limit`` worst findings in a heap, so reading a busy hour of the
topic takes memory for ``limit`` claims, not for the hour.

This module is pure (no Kafka): :mod:`citemon._commands._results` reads the topic.
"""

from __future__ import annotations

import heapq
import json
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Final

from pydantic import Field, ValidationError, field_validator

from citemon._core.errors import ConfigError, InputError
from citemon._core.labels import OTHER, UNKNOWN
from citemon._core.records import (
    PATTERNS,
    VERDICTS,
    AnswerScore,
    ClaimResult,
    MisattributionPattern,
    VerdictName,
)
from citemon._core.settings import parse_duration_s
from citemon._engine.patterns import GUIDE

__all__ = [
    "DEFAULT_VERDICTS",
    "SEVERITY",
    "Filter",
    "Finding",
    "ResultRecord",
    "Worst",
    "findings",
    "parse_result",
    "read_results_file",
    "render_json_line",
    "render_patterns",
    "render_table",
]

SEVERITY: Final[tuple[VerdictName, ...]] = (
    "misattributed",
    "unsupported",
    "multi_hop",
    "dangling",
    "uncited",
    "unjudged",
    "correct",
)
"""Worst first: the order findings are printed in (newest first within a verdict)."""

DEFAULT_VERDICTS: Final[frozenset[VerdictName]] = frozenset(
    ("misattributed", "unsupported", "multi_hop", "dangling")
)
"""The failed citations: what ``citemon inspect`` shows without ``--verdict``."""

_RANK: Final = {v: i for i, v in enumerate(SEVERITY)}
assert set(_RANK) == set(VERDICTS)


class ResultRecord(AnswerScore):
    """One record of the results topic: the scored answer, its span and optional excerpts.

    ``timestamp_ms`` is not part of the topic's JSON (the Kafka record's timestamp is); a line
    of a scores file may carry a ``timestamp`` key (milliseconds since the epoch, or ISO 8601
    text) so that ``--since`` works on a file.
    """

    span_id: str | None = None
    excerpts: dict[str, str] = Field(default_factory=dict)
    timestamp_ms: int | None = Field(default=None, validation_alias="timestamp")

    @field_validator("timestamp_ms", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_time_ms(value)
        return value


def parse_time_ms(text: str) -> int:
    """ISO 8601 (``2026-12-01T08:00:00Z``; no zone means UTC) → milliseconds since the epoch."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def time_flag_ms(flag: str, text: str, now_ms: int) -> int:
    """A time flag's value (``--since``, ``--until`` of ``inspect`` and ``review pull``): a
    duration ago (``30m``) or an ISO 8601 time → ms since the epoch; ConfigError naming
    ``flag`` otherwise."""
    try:
        return now_ms - int(parse_duration_s(text) * 1000)
    except ValueError:
        pass
    try:
        return parse_time_ms(text)
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r}: not a duration (30m, 2h) or an ISO 8601 time (2026-12-01T08:00:00Z)"
        ) from None


def format_time(timestamp_ms: int | None) -> str:
    if timestamp_ms is None:
        return "-"
    when = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_result(value: bytes | str) -> ResultRecord:
    """A results record from its JSON; :class:`InputError` saying what is wrong otherwise."""
    try:
        record = ResultRecord.model_validate_json(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise InputError(f"not valid JSON ({first['msg']})") from None
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise InputError(f"not a results record: {where}: {first['msg']}") from None
    if "claims" not in record.model_fields_set:
        raise InputError("not a results record: no 'claims'")
    return record


@dataclass(frozen=True, slots=True)
class Finding:
    """One claim of one results record, and where and when the record was written."""

    claim: ClaimResult
    record: ResultRecord
    timestamp_ms: int | None
    source: str
    """``topic/partition/offset`` or ``file:line``."""
    position: tuple[int, int]
    """(partition, offset), or (0, line) for a file: within one millisecond (or without a
    timestamp) a larger offset or line is newer, and the order never depends on fetch order."""

    def sort_key(self) -> tuple[int, int, int, int, int]:
        """Ascending = worst first: severity, then newest, then the answer's sentence order."""
        newest = -(self.timestamp_ms if self.timestamp_ms is not None else -1)
        partition, offset = self.position
        return (_RANK[self.claim.verdict], newest, -offset, partition, self.claim.sentence)

    def excerpt(self, passage_id: str) -> str | None:
        return self.record.excerpts.get(passage_id)

    def as_dict(self, trace_url: str | None = None) -> dict[str, Any]:
        """The JSON object of one finding (``--format json`` prints one per line)."""
        c, r = self.claim, self.record
        ids = list(dict.fromkeys([*c.cited_ids, *c.resolved_ids, *c.supported_by]))
        out: dict[str, Any] = {
            "verdict": c.verdict,
            "claim": c.text,
            "sentence": c.sentence,
            "cited_ids": c.cited_ids,
            "resolved_ids": c.resolved_ids,
            "supported_by": c.supported_by,
            "overlap": c.overlap,
            "irrelevant_ids": c.irrelevant_ids,
            "faithful": c.faithful,
            "reason": c.reason,
            "service": r.service,
            "version": r.version,
            "environment": r.environment,
            "trace_id": r.trace_id,
            "span_id": r.span_id,
            "answer_id": r.id,
            "timestamp": format_time(self.timestamp_ms) if self.timestamp_ms is not None else None,
            "source": self.source,
            "excerpts": {i: r.excerpts[i] for i in ids if i in r.excerpts},
        }
        if c.pattern is not None:
            out["pattern"] = c.pattern
        if trace_url is not None and r.trace_id:
            out["trace_url"] = trace_url.format(trace_id=r.trace_id)
        return out

    def version(self) -> tuple[str, str, str]:
        r = self.record
        return (r.service or UNKNOWN, r.version or UNKNOWN, r.environment or UNKNOWN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    """Which findings to show; an empty set means "any". Label values match the metrics' labels
    (an answer without a service, version or environment is ``unknown``); ``other``, the metrics'
    overflow label, cannot be traced back to versions and matches everything."""

    services: frozenset[str] = frozenset()
    versions: frozenset[str] = frozenset()
    environments: frozenset[str] = frozenset()
    verdicts: frozenset[VerdictName] = DEFAULT_VERDICTS
    patterns: frozenset[str] = frozenset()
    """Misattribution patterns (``--pattern``): only misattributed claims with one of them."""
    trace_ids: frozenset[str] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None
    """Exclusive upper bound."""

    def answer(self, record: ResultRecord, timestamp_ms: int | None) -> bool:
        if not (
            _label(self.services, record.service)
            and _label(self.versions, record.version)
            and _label(self.environments, record.environment)
        ):
            return False
        if self.trace_ids and (record.trace_id or "").lower() not in self.trace_ids:
            return False
        if self.since_ms is not None or self.until_ms is not None:
            if timestamp_ms is None:
                return False
            if self.since_ms is not None and timestamp_ms < self.since_ms:
                return False
            if self.until_ms is not None and timestamp_ms >= self.until_ms:
                return False
        return True

    def claim(self, claim: ClaimResult) -> bool:
        if self.patterns and claim.pattern not in self.patterns:
            return False
        return not self.verdicts or claim.verdict in self.verdicts


def _label(wanted: frozenset[str], value: str | None) -> bool:
    return not wanted or OTHER in wanted or (value or UNKNOWN) in wanted


def findings(
    record: ResultRecord,
    *,
    timestamp_ms: int | None,
    source: str,
    position: tuple[int, int],
    where: Filter,
) -> list[Finding]:
    """The claims of ``record`` that ``where`` selects (none when the answer does not match)."""
    when = timestamp_ms if timestamp_ms is not None else record.timestamp_ms
    if not where.answer(record, when):
        return []
    return [Finding(c, record, when, source, position) for c in record.claims if where.claim(c)]


@dataclass(order=True, slots=True)
class _Kept:
    rank: tuple[int, ...]
    """The finding's sort key negated: the heap's root is the least bad finding kept."""
    finding: Finding = field(compare=False)


@dataclass(slots=True)
class Worst:
    """The ``limit`` worst findings seen (0 = keep all), and how many of each verdict matched."""

    limit: int
    matched: Counter[str] = field(default_factory=Counter)
    patterns: Counter[tuple[tuple[str, str, str], MisattributionPattern]] = field(
        default_factory=Counter
    )
    """(version's labels, pattern) → misattributed claims matched, all of them (not only kept)."""
    examples: dict[tuple[tuple[str, str, str], MisattributionPattern], Finding] = field(
        default_factory=dict
    )
    """The worst (newest) example of each (version, pattern)."""
    _heap: list[_Kept] = field(default_factory=list)
    _n: int = 0

    def add(self, finding: Finding) -> None:
        self.matched[finding.claim.verdict] += 1
        self._n += 1
        if finding.claim.pattern is not None:  # records written before patterns have none
            key = (finding.version(), finding.claim.pattern)
            self.patterns[key] += 1
            seen = self.examples.get(key)
            if seen is None or finding.sort_key() < seen.sort_key():
                self.examples[key] = finding
        item = _Kept(tuple(-k for k in finding.sort_key()), finding)
        if not self.limit or len(self._heap) < self.limit:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            heapq.heapreplace(self._heap, item)

    @property
    def total(self) -> int:
        return self._n

    def sorted(self) -> list[Finding]:
        return [k.finding for k in sorted(self._heap, reverse=True)]


def read_results_file(lines: Iterable[str]) -> Iterator[tuple[int, ResultRecord | InputError]]:
    """Results records from a file: JSON lines as on the topic (read line by line, so a large
    file costs no memory), or a ``citemon score --format json`` document (its ``answers``).
    Yields (line or answer number, record or the error it has); a bad line is reported and the
    others still read."""
    it = iter(lines)
    number = 0
    for first in it:
        number += 1
        if first.strip():
            break
    else:
        return
    if first.strip() == "{":  # an indented document: no results line is a lone brace
        yield from _document("".join([first, *it]))
        return
    for n, line in enumerate(chain([first], it), start=number):
        if not line.strip():
            continue
        try:
            yield n, parse_result(line)
        except InputError as exc:
            if '"answers"' in line and '"claims"' in line:  # a document on one line
                yield from _document(line)
                continue
            yield n, InputError(str(exc), line=n)


def _document(text: str) -> Iterator[tuple[int, ResultRecord | InputError]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        yield exc.lineno, InputError(f"not valid JSON ({exc.msg})", line=exc.lineno)
        return
    answers = doc.get("answers") if isinstance(doc, dict) else None
    if not isinstance(answers, list):
        yield 1, InputError("a JSON document without an 'answers' list", line=1)
        return
    for n, answer in enumerate(answers, start=1):
        try:
            yield n, ResultRecord.model_validate(answer)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            yield n, InputError(f"answers[{n - 1}]: {where}: {first['msg']}")


# -- rendering -------------------------------------------------------------------------------


def render_json_line(finding: Finding, trace_url: str | None = None) -> str:
    return json.dumps(finding.as_dict(trace_url), ensure_ascii=False, separators=(",", ":"))


def render_table(finding: Finding, trace_url: str | None = None, *, width: int = 100) -> str:
    """A few lines per finding: verdict, when, labels and trace; the claim; the evidence."""
    c, r = finding.claim, finding.record
    labels = " ".join(x or UNKNOWN for x in (r.service, r.version, r.environment))
    head = f"{c.verdict.upper():<13} {format_time(finding.timestamp_ms)}  {labels}"
    head += f"  trace {r.trace_id or '-'}"
    lines = [head, textwrap.indent(textwrap.fill(f'"{c.text}"', width - 4), "    ")]
    lines += _evidence("cited", c.cited_ids, finding, width)
    if c.resolved_ids and c.resolved_ids != [i for i in c.cited_ids if i in c.resolved_ids]:
        # A marker named passages by a metadata ID: show which documents it resolved to.
        lines += _evidence("resolved to", c.resolved_ids, finding, width)
    if c.verdict == "misattributed":
        lines += _evidence("should cite", c.supported_by, finding, width)
        if c.pattern is not None:
            lines.append(f"    pattern: {c.pattern} (owner: {GUIDE[c.pattern][0]})")
        if c.overlap:
            lines.append(
                "    (overlap: the supporting passage shares a long span with the cited one)"
            )
    elif c.verdict == "multi_hop" and c.supported_by:
        lines += _evidence("jointly", c.supported_by, finding, width)
    if c.irrelevant_ids:
        lines.append("    over-broad: " + ", ".join(c.irrelevant_ids) + " (not needed: ALCE)")
    if c.reason:
        lines.append("    " + textwrap.shorten(f"reason: {c.reason}", width - 4, placeholder="…"))
    if trace_url is not None and r.trace_id:
        lines.append(f"    {trace_url.format(trace_id=r.trace_id)}")
    return "\n".join(lines)


def _evidence(what: str, ids: list[str], finding: Finding, width: int) -> list[str]:
    if not ids:
        return [f"    {what}: -"]
    out: list[str] = []
    for pid in ids:
        text = finding.excerpt(pid)
        line = f"{what} {pid}"
        if text is not None:
            line = textwrap.shorten(f'{line}: "{text}', width - 5, placeholder="…") + '"'
        out.append("    " + line)
    return out


def render_patterns(worst: Worst, *, width: int = 100) -> str | None:
    """Why citations fail, per version: its misattributed claims by pattern with their count,
    share, the share of the same pattern in the other versions read (the baseline), the likely
    owner and fix, and one example each. ``None`` when no misattributed claim matched."""
    if not worst.patterns:
        return None
    versions = sorted({v for v, _ in worst.patterns})
    lines: list[str] = []
    for version in versions:
        mine = {p: n for (v, p), n in worst.patterns.items() if v == version}
        rest: dict[MisattributionPattern, int] = dict.fromkeys(PATTERNS, 0)
        for (v, p), n in worst.patterns.items():
            if v != version:
                rest[p] += n
        total, rest_total = sum(mine.values()), sum(rest.values())
        lines.append(
            f"why citations fail: {' '.join(version)}: {total} misattributed claim(s) by pattern"
            + (" (rest: the other versions read)" if rest_total else "")
        )
        for pattern in sorted(mine, key=lambda p: (-mine[p], PATTERNS.index(p))):
            n = mine[pattern]
            vs = f"  rest {rest[pattern] / rest_total:4.0%}" if rest_total else ""
            owner, fix = GUIDE[pattern]
            lines.append(f"  {pattern:<18}{n:>6} {n / total:5.0%}{vs}  owner: {owner}")
            lines.append(textwrap.fill(f"fix: {fix}", width, initial_indent=" " * 6,
                                       subsequent_indent=" " * 6))  # fmt: skip
            ex = worst.examples[(version, pattern)]
            cites = ", ".join(ex.claim.cited_ids) or "-"
            should = ", ".join(ex.claim.supported_by) or "-"
            lines.append(
                "      " + textwrap.shorten(f'e.g. "{ex.claim.text}"', width - 6, placeholder="…")
            )
            lines.append(
                f"        cites {cites}, should cite {should} (trace {ex.record.trace_id or '-'})"
            )
    return "\n".join(lines)


def summary_line(worst: Worst, shown: int) -> str:
    """``12 claims matched (misattributed 9 · unsupported 3); showing the 10 worst``."""
    parts = " · ".join(f"{v} {worst.matched[v]}" for v in SEVERITY if worst.matched[v])
    line = f"{worst.total} claim(s) matched" + (f" ({parts})" if parts else "")
    if shown < worst.total:
        line += f"; showing the {shown} worst (--limit)"
    return line
