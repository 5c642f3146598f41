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
from typing import IO

from citemon._commands._explain import explain_input
from citemon._commands._files import Progress, detect_format, read_jsonl, render_json, render_table
from citemon._commands._options import add_scoring_arguments, open_input, scoring_options
from citemon._core.calibration import Calibration
from citemon._core.errors import CitemonError, ConfigError, InputError
from citemon._core.records import AnswerRecord, AnswerScore, ClaimResult
from citemon._engine.excerpts import MAX_EXCERPT_CHARS
from citemon._engine.passage_text import fill_from_store
from citemon._engine.scoring import Scorer
from citemon._engine.summary import summarize
from citemon._otlp.files import NoAnswer, iter_otlp_json_lines
from citemon._passages import ManagedStore, add_passage_store_arguments, open_store
from citemon._review.sample import (
    DEFAULT_REVIEW_PASSAGE_CHARS,
    review_key,
    review_record,
    review_selected,
)
from citemon.judges import add_judge_arguments, judge_options, load_judge

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="JSONL file of answers, or - for standard input")
    parser.add_argument("--input-format", choices=("auto", "jsonl", "otlp-json"), default="auto")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--explain", action="store_true", help="show reasons per claim")
    parser.add_argument(
        "--explain-input",
        action="store_true",
        help="for each answer read from traces, show which span gave the passages and which "
        "the answer, and what each citation marker resolved to",
    )
    parser.add_argument("--strict", action="store_true", help="abort on the first bad line")
    parser.add_argument(
        "--calibration",
        metavar="FILE",
        help="a `citemon calibrate --output` file: also report corrected accuracy",
    )
    review = parser.add_argument_group("review sample")
    review.add_argument(
        "--review-output", metavar="FILE", help="also write review records here (JSON lines)"
    )
    review.add_argument(
        "--review-rate",
        type=float,
        default=1.0,
        help="share of answers written to --review-output (default 1: all)",
    )
    review.add_argument(
        "--review-passage-chars",
        type=int,
        default=DEFAULT_REVIEW_PASSAGE_CHARS,
        help=f"characters of each passage in a review record, 1..{MAX_EXCERPT_CHARS} "
        f"(default {DEFAULT_REVIEW_PASSAGE_CHARS})",
    )
    add_scoring_arguments(parser)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="answers scored at once (the judge cap still bounds requests)",
    )
    add_judge_arguments(parser)
    add_passage_store_arguments(parser)


Item = AnswerRecord | CitemonError | NoAnswer


def _records(stream: IO[str], fmt: str) -> Iterator[tuple[int, Item]]:
    first = stream.readline()
    if fmt == "auto":
        fmt = detect_format(first)
    lines = chain([first], stream)
    if fmt == "jsonl":
        yield from read_jsonl(lines)
        return
    yield from iter_otlp_json_lines(lines)


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


def _review_file(args: argparse.Namespace) -> IO[str] | None:
    """The opened --review-output, its flags checked before any answer is scored."""
    if args.review_output is None:
        return None
    if not 0.0 <= args.review_rate <= 1.0:
        raise ConfigError(f"--review-rate must be within [0, 1], not {args.review_rate}")
    if not 1 <= args.review_passage_chars <= MAX_EXCERPT_CHARS:
        raise ConfigError(
            f"--review-passage-chars must be within [1, {MAX_EXCERPT_CHARS}], "
            f"not {args.review_passage_chars}"
        )
    try:
        return open(args.review_output, "w", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write --review-output {args.review_output}: {exc.strerror}"
        ) from None


def _write_review(out: IO[str], score: AnswerScore, args: argparse.Namespace) -> int:
    if not review_selected(review_key(score), args.review_rate):
        return 0
    record = review_record(
        score,
        scored_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        passage_chars=args.review_passage_chars,
    )
    out.write(record.to_json() + "\n")
    return 1


async def _run(args: argparse.Namespace) -> int:
    review_out = _review_file(args)
    reviewed = 0
    calibration = Calibration.load(args.calibration) if args.calibration else None
    # A calibration that chose a threshold for this judge measured its error *at* it: apply it.
    calibrated = calibration.threshold_for(args.judge) if calibration else None
    judge = load_judge(args.judge, judge_options(args, calibrated_threshold=calibrated))
    store = open_store(args)
    scorer = Scorer(judge, scoring_options(args), passages=store)
    errors: list[CitemonError] = []
    unanswered: list[NoAnswer] = []
    scores: list[AnswerScore] = []
    progress = Progress()
    try:
        with open_input(args.input) as stream:
            stream_scores = score_stream(
                scorer,
                _records(stream, args.input_format),
                concurrency=max(1, args.concurrency),
                strict=args.strict,
                errors=errors,
                unanswered=unanswered,
                explain=args.explain_input,
            )
            async for score in stream_scores:
                scores.append(score)
                if review_out is not None:
                    reviewed += _write_review(review_out, score, args)
                progress.step()
    finally:
        progress.close()
        if review_out is not None:
            review_out.close()
            print(
                f"citemon: {reviewed} review record(s) written to {args.review_output}",
                file=sys.stderr,
            )
        aclose = getattr(judge, "aclose", None)
        if aclose is not None:
            await aclose()
        if store is not None:
            await store.aclose()
    summary = summarize(scores)
    if args.format == "json":
        print(render_json(scores, summary, args.policy, calibration))
    else:
        print(
            render_table(
                scores, summary, args.policy, explain=args.explain, calibration=calibration
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
        print(f"citemon: no answers in {args.input}{why}", file=sys.stderr)
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
