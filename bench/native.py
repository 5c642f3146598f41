"""Native citations: how reading a Gemini response grows with its grounding supports.

A Gemini segment's offsets are UTF-8 bytes; turning them into character offsets once per answer
is linear, decoding the answer's prefix once per support (as citemon first did) is quadratic.
The figure is the time to read a response with 10 × the supports (and 10 × the text) ÷ the time
for the smaller one, interleaved round by round: about 10 when linear, about 100 when quadratic.
Beside it, reading ÷ ``json.loads`` of the same response (the work no reader avoids).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from citemon_instrumentation._native import parse_response

ROUNDS = 7
SENTENCE = "Les journaux sont conservés quatre-vingt-dix jours ici. "  # 2-byte characters
SMALL, LARGE = 1_100, 11_000


def gemini_response(supports: int) -> dict[str, Any]:
    """One candidate whose text is ``supports`` sentences, each grounded in one chunk."""
    size = len(SENTENCE.encode())
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": SENTENCE * supports}]},
                "grounding_metadata": {
                    "grounding_chunks": [
                        {"retrieved_context": {"title": "a.md", "text": "Conservés 90 jours."}}
                    ],
                    "grounding_supports": [
                        {
                            "segment": {"start_index": i * size, "end_index": (i + 1) * size - 1},
                            "grounding_chunk_indices": [0],
                        }
                        for i in range(supports)
                    ],
                },
            }
        ]
    }


def _time(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run() -> None:
    small, large = gemini_response(SMALL), gemini_response(LARGE)
    text = json.dumps(large)
    found = parse_response(large, {})
    assert found is not None and len(found.citations) == LARGE
    t_small, t_large, t_json = [], [], []
    for _ in range(ROUNDS):
        t_small.append(_time(lambda: parse_response(small, {})))
        t_large.append(_time(lambda: parse_response(large, {})))
        t_json.append(_time(lambda: json.loads(text)))
    s, lg, j = (statistics.median(t) for t in (t_small, t_large, t_json))
    print(
        f"Gemini response, {len(text.encode()) / 1e6:.2f} MB with {LARGE:,} supports: read in "
        f"{lg * 1000:.0f} ms; {SMALL:,} supports in {s * 1000:.1f} ms "
        f"(medians of {ROUNDS} interleaved rounds)"
    )
    print(f"10 × the supports ÷ 1 ×: {lg / s:.1f} (linear ≈ 10, quadratic ≈ 100)")
    print(f"reading ÷ json.loads of the same response: {lg / j:.1f}")
