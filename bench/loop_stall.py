"""The event loop's worst stall while a 2 MB answer is scored (target: under 100 ms).

The answer is the one ``tests/integration/test_monitor_robust.py`` sends: a 0.99 MB answer of
~13,000 identical cited sentences, plus p0 (which entails each) and 99 filler passages of
10 kB, scored with the lexical judge. A ticker task on the same loop sleeps 1 ms at a time
and records how late it wakes: that lateness is how long heartbeats, ``/healthz`` and
``/metrics`` would have waited. Side by side in one run:

* **inline** (before): sentence splitting and the judge on the event loop;
* **off-loop** (now, what ``citemon run`` does): the whole answer scored in a pool of
  ``--cpu-workers`` threads (default 2), the loop only awaiting; start-up objects frozen out
  of the garbage collector (``gc.freeze()``) in both runs, as ``citemon run`` does.

Also timed: decoding the 2 MB OTLP payload, which still runs on the loop.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

REPO: Final = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import SpanLimits, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from citemon._core.records import AnswerRecord, AnswerScore  # noqa: E402
from citemon._engine.scoring import Scorer  # noqa: E402
from citemon._otlp.decoding import decode_otlp  # noqa: E402
from citemon.judges.lexical import LexicalJudge  # noqa: E402

SENTENCE: Final = (
    "The reactor output rose by twelve percent in the third quarter of the year. [p0] "
)
_T = TypeVar("_T")
TICK_S: Final = 0.001
WORKERS: Final = 2


def payload() -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "bench"}),
        span_limits=SpanLimits(max_span_attributes=1000),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    attributes: dict[str, Any] = {"output.value": SENTENCE * (990_000 // len(SENTENCE))}
    texts = [SENTENCE.split(" [")[0]] + [("filler text " * 850)[:10_000] for _ in range(99)]
    for i, text in enumerate(texts):
        attributes[f"retrieval.documents.{i}.document.id"] = f"p{i}"
        attributes[f"retrieval.documents.{i}.document.content"] = text
    provider.get_tracer("bench").start_span("rag.answer", attributes=attributes).end()
    data: bytes = encode_spans(list(exporter.get_finished_spans())).SerializeToString()
    return data


async def _stalls_during(work: Awaitable[_T], *, warmup_s: float = 0.0) -> tuple[float, float, _T]:
    """(worst stall s, p99 stall s, ``work``'s result): a ticker on the loop, every ``TICK_S``,
    records how late each tick wakes while ``work`` runs (after ``warmup_s`` of ticking)."""
    loop = asyncio.get_running_loop()
    stalls: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t0 = loop.time()
            await asyncio.sleep(TICK_S)
            stalls.append(max(0.0, loop.time() - t0 - TICK_S))

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(warmup_s)
    result = await work
    done.set()
    await tick
    p99 = statistics.quantiles(stalls, n=100)[98] if len(stalls) >= 100 else max(stalls)
    return max(stalls), p99, result


async def _measure(scorer: Scorer, record: AnswerRecord) -> tuple[float, float, float, int]:
    """(worst stall s, p99 stall s, scoring wall s, claims) while ``scorer`` scores ``record``."""

    async def timed() -> tuple[float, AnswerScore]:
        t0 = time.perf_counter()
        score = await scorer.score(record)
        return time.perf_counter() - t0, score

    worst, p99, (wall, score) = await _stalls_during(timed(), warmup_s=0.05)
    return worst, p99, wall, len(score.claims)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _measure_spin(
    pool: ThreadPoolExecutor, seconds: float
) -> tuple[float, float, float, int]:
    """The same ticker while a thread only spins for ``seconds``."""
    loop = asyncio.get_running_loop()
    worst, p99, _ = await _stalls_during(loop.run_in_executor(pool, _spin, seconds))
    return worst, p99, seconds, 0


async def _main() -> None:
    data = payload()
    t0 = time.perf_counter()
    (record,) = decode_otlp(data).records
    decode_s = time.perf_counter() - t0
    print(f"payload {len(data) / 1e6:.2f} MB; decode on the loop: {decode_s * 1000:.0f} ms")
    judge = LexicalJudge()
    gc.collect()
    gc.freeze()  # as citemon run does once it is up
    inline = await _measure(Scorer(judge), record)
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="citemon-cpu") as pool:
        offloaded = await _measure(Scorer(judge, executor=pool), record)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.001)
        try:
            fast_switch = await _measure(Scorer(judge, executor=pool), record)
        finally:
            sys.setswitchinterval(interval)
    # The floor of any thread design on this machine right now: a thread that only spins.
    with ThreadPoolExecutor(1) as pool:
        spin = await _measure_spin(pool, offloaded[2])
    rows = (
        ("inline", inline),
        ("off-loop", offloaded),
        ("off-loop, 1 ms GIL switch", fast_switch),
        ("a thread that only spins", spin),
    )
    print(f"{'path':<27} {'worst stall':>12} {'p99 stall':>10} {'scoring':>9} {'claims':>7}")
    for name, (worst, p99, wall, claims) in rows:
        print(
            f"{name:<27} {worst * 1000:>9.0f} ms {p99 * 1000:>7.1f} ms {wall:>7.1f} s {claims:>7}"
        )
    ratio = inline[0] / offloaded[0] if offloaded[0] else float("inf")
    verdict = "PASS" if offloaded[0] < 0.1 else "FAIL"
    print(
        f"worst stall off-loop {offloaded[0] * 1000:.0f} ms (target < 100 ms: {verdict}); "
        f"inline/off-loop = {ratio:.0f}x; scoring time off-loop/inline = "
        f"{offloaded[2] / inline[2]:.2f}"
    )


def run() -> None:
    asyncio.run(_main())


if __name__ == "__main__":
    run()
