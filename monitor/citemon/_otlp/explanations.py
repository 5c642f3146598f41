"""Why a trace gave no answer, in words a user can act on (``citemon score`` prints them):
which spans it held, which dialects were tried, what each found and what was missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from citemon._otlp.assembly import Unanswered, describe
from citemon._otlp.dialects import DIALECTS, Dialect

__all__ = ["NoAnswer", "explain"]

_MAX_NAMES = 12
_MAX_OFF_NAMES = 4


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """A trace that gave no answer: its outcome (``unrecognized``, ``no_passages``,
    ``no_answer``, ``no_content``,
    ``citations_not_recorded``) and the explanation."""

    trace_id: str
    outcome: str
    message: str

    def __str__(self) -> str:
        return self.message


def explain(
    item: Unanswered, seen: Sequence[str], dialects: Sequence[Dialect] = DIALECTS
) -> NoAnswer:
    """The explanation of one unanswered trace; ``seen`` are the names of its spans."""
    names = ", ".join(repr(n) for n in seen[:_MAX_NAMES])
    if len(seen) > _MAX_NAMES:
        names += f", … ({len(seen)} in all)"
    lines = [
        f"trace {item.trace_id} gave no answer ({item.outcome}): "
        f"{len(seen)} span(s) seen: {names or 'none'}",
        f"  dialects tried: {', '.join(d.name for d in dialects)}",
    ]
    off = list(dict.fromkeys(p.no_content for p in item.parts if p.no_content))
    if off:
        hidden = list(dict.fromkeys(p.name for p in item.parts if p.no_content))
        shown = ", ".join(repr(n) for n in hidden[:_MAX_OFF_NAMES])
        if len(hidden) > _MAX_OFF_NAMES:
            shown += ", …"
        lines.append(
            f"  recorded with content capture off (no text, IDs or tool results on {shown}); "
            f"turn it on with {' or '.join(off)}"
        )
        return NoAnswer(item.trace_id, item.outcome, "\n".join(lines))
    docs = [p for p in item.parts if p.documents is not None]
    answers = [p for p in item.parts if p.answer is not None]
    for p in docs:
        lines.append(f"  passages: {describe(p)}: {len(p.documents or ())} document(s)")
    for p in answers:
        lines.append(f"  answer candidate: {describe(p)}")
        if item.outcome == "citations_not_recorded" and p.citations_dropped:
            lines.append(f"  citations not recorded: {p.citations_dropped}")
    unread = [p for p in item.parts if p.tool and p.documents is None and p.answer is None]
    if unread and not docs:
        tools = ", ".join(repr(t) for t in dict.fromkeys(p.tool for p in unread))
        lines.append(
            f"  tool results that do not read as documents: {tools}; name a search tool in "
            "--retrieval-tools to take its result whole, or read its shape with "
            "--tool-result-reader"
        )
    if item.outcome == "citations_not_recorded":
        return NoAnswer(item.trace_id, item.outcome, "\n".join(lines))
    wanted = []
    if not docs:
        wanted.append((0, "retrieved passages"))
    if not answers:
        wanted.append((1, "an answer"))
    for index, what in wanted:
        where = "; ".join(f"{d.name}: {d.looks_for[index]}" for d in dialects)
        lines.append(f"  missing {what}; looked for {where}")
    return NoAnswer(item.trace_id, item.outcome, "\n".join(lines))
