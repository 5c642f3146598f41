"""OTLP JSON-lines files (``citemon score`` input, the Collector's ``file`` exporter), read one
line at a time through the same decoder and assembler as Kafka."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp_json
from citemon._otlp.explanations import NoAnswer, explain
from citemon._otlp.spans import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_CONTEXT_BYTES,
    DEFAULT_MAX_PASSAGES,
)
from citemon._otlp.tool_results import ToolReading

__all__ = ["NoAnswer", "is_otlp_json_line", "iter_otlp_json_lines"]

_MAX_TRACES_SEEN = 100_000
"""Traces whose span names are remembered for explanations while a file is read."""


# -- files --------------------------------------------------------------------------------------


def is_otlp_json_line(line: str) -> bool:
    """Whether one line looks like OTLP JSON traces (for auto-detecting ``citemon score`` input)."""
    s = line.lstrip()
    if not s.startswith("{") or '"resourceSpans"' not in s[:4096]:
        return False
    try:
        obj = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and "resourceSpans" in obj


def iter_otlp_json_lines(
    source: str | Path | Iterable[str | bytes],
    *,
    max_passages: int = DEFAULT_MAX_PASSAGES,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
    tools: ToolReading | None = None,
) -> Iterator[tuple[int, AnswerRecord | DecodeError | NoAnswer]]:
    """Records from a Collector file-exporter dump: ``(line number, record, error or
    explanation)``.

    ``source`` is a path, or the lines themselves (an open text file, standard input);
    ``tools`` says how agents' tool calls are read (``citemon score``'s settings).

    Every bad line yields its :class:`DecodeError`. Traces are joined across lines; any left
    incomplete at the end of the file are settled then (numbered with the last line). A trace
    that gives no answer yields a :class:`NoAnswer` saying why.
    """
    assembler = TraceAssembler(
        window_s=math.inf,
        max_passages=max_passages,
        max_context_bytes=max_context_bytes,
        clock=lambda: 0.0,
        explain=True,
    )
    seen: dict[str, list[str]] = {}

    def explained() -> Iterator[NoAnswer]:
        for item in assembler.take_unanswered():
            yield explain(item, seen.pop(item.trace_id, []))

    lineno = 0
    with ExitStack() as stack:
        lines = (
            stack.enter_context(Path(source).open("rb"))
            if isinstance(source, str | Path)
            else source
        )
        for lineno, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                batch = decode_otlp_json(
                    raw,
                    max_passages=max_passages,
                    max_answer_bytes=max_answer_bytes,
                    max_context_bytes=max_context_bytes,
                    tools=tools,
                )
            except DecodeError as exc:
                if exc.reason != "no_answer_spans":
                    yield lineno, exc
                continue
            for tid, names in batch.seen.items():
                if tid in seen or len(seen) < _MAX_TRACES_SEEN:
                    seen.setdefault(tid, []).extend(names)
            for record in batch.records:
                seen.pop(record.trace_id or "", None)
                yield lineno, record
            for err in batch.errors:
                yield lineno, err
            for record in assembler.add(batch.spans):
                seen.pop(record.trace_id or "", None)
                yield lineno, record
            for item in explained():
                yield lineno, item
    for record in assembler.flush():
        yield lineno, record
    for item in explained():
        yield lineno, item
