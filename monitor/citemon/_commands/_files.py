"""Reading answer files and writing score reports (the ``table`` and ``json`` formats)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from pydantic import ValidationError

from citemon._core.errors import InputError
from citemon._core.records import AnswerRecord, AnswerScore
from citemon._engine.scoring import Policy
from citemon._engine.summary import Summary

if TYPE_CHECKING:
    from citemon._core.calibration import Calibration

__all__ = ["Progress", "detect_format", "read_jsonl", "render_json", "render_table"]


def detect_format(first_line: str) -> str:
    """``otlp-json`` for a Collector file-exporter line, else ``jsonl`` (citemon records)."""
    from citemon._otlp.files import is_otlp_json_line

    return "otlp-json" if is_otlp_json_line(first_line) else "jsonl"


def read_jsonl(lines: Iterable[str]) -> Iterator[tuple[int, AnswerRecord | InputError]]:
    """Yield (line number, record or the error that line has); blank lines are skipped."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, AnswerRecord.model_validate_json(line)
        except ValidationError as exc:
            yield number, InputError(_describe(exc), line=number)


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['msg']})"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def render_json(
    scores: list[AnswerScore],
    summary: Summary,
    policy: Policy,
    calibration: Calibration | None = None,
) -> str:
    out: dict[str, Any] = {
        "summary": summary.as_dict(policy, calibration),
        "answers": [s.model_dump(mode="json") for s in scores],
    }
    return json.dumps(out, ensure_ascii=False, indent=1)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render_table(
    scores: list[AnswerScore],
    summary: Summary,
    policy: Policy,
    *,
    explain: bool = False,
    calibration: Calibration | None = None,
) -> str:
    lines: list[str] = []
    for score in scores:
        where = " ".join(x for x in (score.service, score.version) if x)
        lines.append(f"{score.id or '(no id)'}" + (f" · {where}" if where else ""))
        for c in score.claims:
            cites = ", ".join(c.cited_ids) or "-"
            if c.verdict == "misattributed":
                cites += " → " + ", ".join(c.supported_by)
            if c.irrelevant_ids:
                cites += " (over-broad: " + ", ".join(c.irrelevant_ids) + ")"
            flag = (" overlap" if c.overlap else "") + (f" · {c.pattern}" if c.pattern else "")
            flag += " · quote not in the cited passage" if c.quote_mismatch else ""
            text = textwrap.shorten(c.text, 70, placeholder="…")
            lines.append(f"  {c.sentence:>2}  {c.verdict:<14} {cites:<26} {text}{flag}")
            if explain:
                faithful = {True: "yes", False: "no", None: "unjudged"}[c.faithful]
                lines.append(f"      faithful: {faithful}" + (f" · {c.reason}" if c.reason else ""))
    s = summary.as_dict(policy, calibration)
    ci = s["citation_accuracy_ci95"]
    v = s["verdicts"]
    lines += [
        "",
        f"answers {s['answers']} · claims {s['claims']} · cited claims {s['cited_claims']}"
        f" · policy {policy}",
        f"citation accuracy {_fmt(s['citation_accuracy'])}"
        + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        + f" · coverage {_fmt(s['citation_coverage'])}"
        f" · faithfulness {_fmt(s['faithfulness'])}"
        f" · IDs per claim {_fmt(s['ids_per_claim'])}"
        f" · citation precision {_fmt(s['citation_precision'])}",
        "verdicts: "
        + " · ".join(f"{k} {n}" for k, n in v.items())
        + f" (overlap {s['overlap_misattributions']})",
    ]
    if v["misattributed"]:
        mix = " · ".join(f"{k} {n}" for k, n in s["misattribution_patterns"].items() if n)
        lines.append(f"misattributed by pattern: {mix}")
    if s["multi_hop_ceiling"] is not None:
        lines.append(
            f"multi-hop ceiling {_fmt(s['multi_hop_ceiling'])}"
            f" (accuracy cannot exceed it: {v['multi_hop']} of {s['cited_claims']} cited claims"
            " are multi_hop)"
        )
    if calibration is not None:
        corrected, cci = s["citation_accuracy_corrected"], s["citation_accuracy_corrected_ci95"]
        lines.append(
            f"corrected citation accuracy {_fmt(corrected)} [{cci[0]:.2f}, {cci[1]:.2f}]"
            f" (judge sensitivity {_fmt(calibration.sensitivity)},"
            f" specificity {_fmt(calibration.specificity)})"
            if cci
            else "corrected citation accuracy n/a (the calibrated judge is uninformative)"
        )
    return "\n".join(lines)


class Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, stream: IO[str] | None = None, *, every: int = 10) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.every = every
        self.done = 0

    def step(self) -> None:
        self.done += 1
        if self.enabled and self.done % self.every == 0:
            self.stream.write(f"\rscored {self.done} answers")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done >= self.every:
            self.stream.write("\r\033[K")
            self.stream.flush()
