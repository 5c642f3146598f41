"""``citemon score --explain-input``: where an answer read from a trace came from, and what
each citation marker (or each of the provider's own citations) resolved to (docs/design.md,
"Passage identity", "Native citations")."""

from __future__ import annotations

import textwrap

from citemon._core.records import AnswerRecord
from citemon._core.text import CitationSyntax
from citemon._engine.claims import resolve_marker, split_sentences

__all__ = ["explain_input"]

_HOW = {
    "id": "document ID",
    "metadata": "metadata ID",
    "position": "position",
    "dangling": "no retrieved document: dangling",
}


def explain_input(record: AnswerRecord, syntax: CitationSyntax) -> str:
    """A few lines: the answer's trace and spans, its documents, each marker's resolution."""
    lines = [
        f"answer {record.id or '(no id)'}"
        + (f" · trace {record.trace_id}" if record.trace_id else "")
    ]
    for key in ("passages", "answer"):
        if key in record.origin:
            lines.append(f"  {key + ':':<10} {record.origin[key]}")
    for i, p in enumerate(record.passages, start=1):
        meta = {k: p.metadata[k] for k in syntax.passage_id_keys if p.metadata and k in p.metadata}
        shown = " ".join(f"{k}={v}" for k, v in meta.items())
        text = textwrap.shorten(p.text, 50, placeholder="…") if p.text else "(no text)"
        if p.id in record.from_store:
            text += " [text from the passage store]"
        elif p.id in record.lookup_failed:
            text += " [the passage store failed]"
        elif p.id in record.asked_store:
            text += " [not in the passage store]"
        lines.append(f"  [{i}] {p.id}" + (f" ({shown})" if shown else "") + f": {text}")
    if record.citations is not None:
        # The provider's own citations: where each falls in the answer and what it names.
        for c in record.citations:
            where = f"{c.start}..{c.end}" if c.end > c.start else f"at {c.start}"
            phrase = textwrap.shorten(record.answer[c.start : c.end], 40, placeholder="…")
            quoted = f" {phrase!r}" if phrase else " (insertion point)"
            lines.append(f"  citation {where}{quoted} → {', '.join(c.ids) or '-'}")
        if not record.citations:
            lines.append("  citations: none (the provider returned no citations)")
        return "\n".join(lines)
    done: set[str] = set()
    for sentence in split_sentences(record.answer, syntax):
        for match in syntax.regex.finditer(sentence):
            for token in (t.strip() for t in match.group(1).replace(";", ",").split(",")):
                if not token or token in done:
                    continue
                done.add(token)
                _, pids, how = resolve_marker(record, token, syntax)
                named = ", ".join(pids) if pids else "-"
                lines.append(f"  marker [{token}] → {named} (by {_HOW[how]})")
    return "\n".join(lines)
