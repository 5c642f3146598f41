"""Score a file of answers offline and print citation accuracy, coverage and faithfulness.

Reads citemon JSONL records (docs/design.md, "Input records") or an OpenTelemetry Collector
file-exporter dump (OTLP JSON lines; detected from the first line). Bad lines are reported with
their number and skipped (exit status 1), or abort the run with --strict.
With --review-output FILE it also writes review records (for `citemon review pull` and
`citemon calibrate --review-records`) of every answer, or of a fraction --review-rate of them
picked by the same hash of the trace ID (else the answer's id) as `citemon run --review-rate`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from itertools import chain
from typing import IO, Any, ClassVar, Literal

from pydantic import field_validator
from pydantic_settings import SettingsConfigDict

from citemon._commands._explain import explain_input
from citemon._commands._files import Progress, detect_format, read_jsonl, render_json, render_table
from citemon._commands._options import (
    ANSWERS_INPUT,
    add_scoring_arguments,
    open_input,
    scoring_options,
)
from citemon._core.calibration import Calibration
from citemon._core.errors import CitemonError, ConfigError, InputError
from citemon._core.records import AnswerRecord, AnswerScore, ClaimResult
from citemon._core.settings import Flag, FlagSettings
from citemon._engine.excerpts import MAX_EXCERPT_CHARS
from citemon._engine.passage_text import fill_from_store
from citemon._engine.scoring import Scorer
from citemon._engine.summary import summarize
from citemon._otlp.files import NoAnswer, iter_otlp_json_lines
from citemon._otlp.settings import AgentSettings
from citemon._otlp.tool_results import ToolReading
from citemon._passages import ManagedStore, add_passage_store_arguments, open_store
from citemon._review.sample import (
    DEFAULT_REVIEW_PASSAGE_CHARS,
    review_key,
    review_record,
    review_selected,
)
from citemon.judges import add_judge_arguments, judge_options, load_judge

__all__ = ["ScoreSettings", "add_arguments", "main"]


class ScoreSettings(FlagSettings):
    """``citemon score``'s own flags (the judge's, the scoring's and the passage store's are
    their models'), each with its variable ``CITEMON_SCORE_<FIELD>``: one settings path, as
    every command's settings are (:mod:`citemon._core.settings`). The input file is flag only
    (a positional)."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_SCORE_", extra="ignore", validate_default=True, frozen=True
    )
    TITLE: ClassVar[str] = "score"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        ANSWERS_INPUT,
        Flag(
            "--input-format",
            "input_format",
            "auto (default: from the first line), jsonl or otlp-json",
            choices=("auto", "jsonl", "otlp-json"),
        ),
        Flag("--format", "format", "table (default) or json", choices=("table", "json")),
        Flag("--explain", "explain", "show reasons per claim", bool),
        Flag(
            "--explain-input",
            "explain_input",
            "for each answer read from traces, show which span gave the passages and which "
            "the answer, and what each citation marker resolved to",
            bool,
        ),
        Flag("--strict", "strict", "abort on the first bad line", bool),
        Flag(
            "--calibration",
            "calibration",
            "a `citemon calibrate --output` file: also report corrected accuracy",
            metavar="FILE",
        ),
        Flag(
            "--concurrency",
            "concurrency",
            "answers scored at once (the judge cap still bounds requests; default 16)",
            int,
        ),
        Flag(
            "--review-output",
            "review_output",
            "also write review records here (JSON lines)",
            metavar="FILE",
            group="review sample",
        ),
        Flag(
            "--review-rate",
            "review_rate",
            "share of answers written to --review-output (default 1: all)",
            float,
            group="review sample",
        ),
        Flag(
            "--review-passage-chars",
            "review_passage_chars",
            f"characters of each passage in a review record, 1..{MAX_EXCERPT_CHARS} "
            f"(default {DEFAULT_REVIEW_PASSAGE_CHARS})",
            int,
            group="review sample",
        ),
    )

    input: str
    input_format: Literal["auto", "jsonl", "otlp-json"] = "auto"
    format: Literal["table", "json"] = "table"
    explain: bool = False
    explain_input: bool = False
    strict: bool = False
    calibration: str | None = None
    concurrency: int = 16
    review_output: str | None = None
    review_rate: float = 1.0
    review_passage_chars: int = DEFAULT_REVIEW_PASSAGE_CHARS

    @field_validator("calibration", "review_output", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ScoreSettings.add_arguments(parser, title="score")
    add_scoring_arguments(parser)
    add_judge_arguments(parser)
    add_passage_store_arguments(parser)
    AgentSettings.add_arguments(parser, title=AgentSettings.TITLE)


Item = AnswerRecord | CitemonError | NoAnswer


def _records(stream: IO[str], fmt: str, tools: ToolReading) -> Iterator[tuple[int, Item]]:
    first = stream.readline()
    if fmt == "auto":
        fmt = detect_format(first)
    lines = chain([first], stream)
    if fmt == "jsonl":
        yield from read_jsonl(lines)
        return
    yield from iter_otlp_json_lines(lines, tools=tools)


async def score_stream(
    scorer: Scorer,
    items: Iterator[tuple[int, Item]],
    *,
    concurrency: int,
    strict: bool,
    errors: list[CitemonError],
    unanswered: list[NoAnswer] | None = None,
    explain: bool = False,
) -> AsyncIterator[AnswerScore]:
    """Score records in input order with at most ``concurrency`` answers in flight. A trace
    that gave no answer is explained on stderr (and kept in ``unanswered``)."""
    window: list[asyncio.Task[AnswerScore]] = []
    for number, item in items:
        if isinstance(item, NoAnswer):
            print(f"citemon: {item}", file=sys.stderr)
            if unanswered is not None:
                unanswered.append(item)
            continue
        if isinstance(item, CitemonError):
            if strict:
                raise item
            where = "" if isinstance(item, InputError) else f"line {number}: "
            print(f"citemon: skipped {where}{item}", file=sys.stderr)
            errors.append(item)
            continue
        if explain:
            if scorer.passages is not None:  # show what the store gave (asked once, here)
                item, _ = await fill_from_store(
                    item, scorer.passages, hash_key=scorer.passage_hash_key
                )
            print(explain_input(item, scorer.syntax))
        window.append(asyncio.create_task(scorer.score(item)))
        if len(window) >= concurrency:
            yield await window.pop(0)
    for task in window:
        yield await task


def _review_file(settings: ScoreSettings) -> IO[str] | None:
    """The opened --review-output, its flags checked before any answer is scored."""
    if settings.review_output is None:
        return None
    if not 0.0 <= settings.review_rate <= 1.0:
        raise ConfigError(f"--review-rate must be within [0, 1], not {settings.review_rate}")
    if not 1 <= settings.review_passage_chars <= MAX_EXCERPT_CHARS:
        raise ConfigError(
            f"--review-passage-chars must be within [1, {MAX_EXCERPT_CHARS}], "
            f"not {settings.review_passage_chars}"
        )
    try:
        return open(settings.review_output, "w", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write --review-output {settings.review_output}: {exc.strerror}"
        ) from None


def _write_review(out: IO[str], score: AnswerScore, settings: ScoreSettings) -> int:
    if not review_selected(review_key(score), settings.review_rate):
        return 0
    record = review_record(
        score,
        scored_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        passage_chars=settings.review_passage_chars,
    )
    out.write(record.to_json() + "\n")
    return 1


async def _run(args: argparse.Namespace) -> int:
    tools = AgentSettings.from_args(args).reading  # how agents' tool calls are read
    own = ScoreSettings.from_args(args)
    review_out = _review_file(own)
    reviewed = 0
    calibration = Calibration.load(own.calibration) if own.calibration else None
    # A calibration that chose a threshold for this judge measured its error *at* it: apply it.
    name = judge_options(args).judge
    calibrated = calibration.threshold_for(name) if calibration else None
    judge = load_judge(name, judge_options(args, calibrated_threshold=calibrated))
    store = open_store(args)
    scoring = scoring_options(args)
    scorer = Scorer(judge, scoring, passages=store)
    errors: list[CitemonError] = []
    unanswered: list[NoAnswer] = []
    scores: list[AnswerScore] = []
    progress = Progress()
    try:
        with open_input(own.input) as stream:
            stream_scores = score_stream(
                scorer,
                _records(stream, own.input_format, tools),
                concurrency=max(1, own.concurrency),
                strict=own.strict,
                errors=errors,
                unanswered=unanswered,
                explain=own.explain_input,
            )
            async for score in stream_scores:
                scores.append(score)
                if review_out is not None:
                    reviewed += _write_review(review_out, score, own)
                progress.step()
    finally:
        progress.close()
        if review_out is not None:
            review_out.close()
            print(
                f"citemon: {reviewed} review record(s) written to {own.review_output}",
                file=sys.stderr,
            )
        aclose = getattr(judge, "aclose", None)
        if aclose is not None:
            await aclose()
        if store is not None:
            await store.aclose()
    summary = summarize(scores)
    if own.format == "json":
        print(render_json(scores, summary, scoring.policy, calibration))
    else:
        print(
            render_table(
                scores, summary, scoring.policy, explain=own.explain, calibration=calibration
            )
        )
    claims = [c for s in scores for c in s.claims]
    failed = [c for c in claims if c.unjudged_cause == "judge_failure"]
    if failed:  # the table shows why only with --explain; a dead judge must not pass quietly
        print(
            f"citemon: the judge failed on {len(failed)} of {len(claims)} claim(s), so they have "
            f"no verdict (first: {failed[0].reason})",
            file=sys.stderr,
        )
    _say_textless(claims, store)
    no_verdict = bool(claims) and all(c.faithful is None for c in claims)
    if no_verdict:
        print("citemon: no claim got a verdict", file=sys.stderr)
    if errors:
        print(f"citemon: {len(errors)} bad input line(s) skipped", file=sys.stderr)
    elif not scores:  # an empty file or pipe is more likely a mistake than a result
        why = f": {len(unanswered)} trace(s) gave none (see above)" if unanswered else ""
        print(f"citemon: no answers in {own.input}{why}", file=sys.stderr)
    if scores and unanswered:
        print(f"citemon: {len(unanswered)} trace(s) gave no answer (see above)", file=sys.stderr)
    return 1 if errors or no_verdict or not scores else 0


def _say_textless(claims: list[ClaimResult], store: ManagedStore | None) -> None:
    """Why claims went unjudged for want of passage text (the table says only "unjudged")."""
    failed = [c for c in claims if c.unjudged_cause == "passage_lookup_failed"]
    if failed:
        why = store.last_error if store is not None else None
        print(
            f"citemon: the passage store failed on {len(failed)} of {len(claims)} claim(s), so "
            f"they have no verdict (passage_lookup_failed): {why or failed[0].reason}",
            file=sys.stderr,
        )
    textless = [c for c in claims if c.unjudged_cause == "no_passage_text"]
    if textless:
        hint = (
            "the passage store does not hold them"
            if store is not None
            else "their passages came without text; --passage-store URL looks it up"
        )
        print(
            f"citemon: {len(textless)} of {len(claims)} claim(s) unjudged (no_passage_text): "
            f"{hint} (first: {textless[0].reason})",
            file=sys.stderr,
        )


def main(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
