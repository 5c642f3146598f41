"""``citemon run`` on a busy spans topic: other telemetry beside the RAG traces, and RAG traces
whose two parts arrive far apart (docs/running.md, "A busy spans topic").

One ``citemon run`` process per row (lexical judge, everything sampled, no budget), 4 partitions,
1,000 RAG traces (the specimen, a retriever span and its root), each row on a topic of its own,
the backlog written before the monitor starts:

1. each trace in one message, no other traffic;
2. each trace in one message, among 19,000 other traces (an HTTP server span with a database and
   an HTTP client child, one message per trace);
3. the retriever span, then its root 2,000 messages later, among the 19,000;
4. the same, 12,000 messages later.

Per row: answers counted, the time from ready to caught up (every answer counted, every record
committed, nothing held), the process's CPU seconds and peak RSS. Then, side by side: the other
traces' read rate per CPU second (traces and spans), from rows 1 and 2's CPU difference, and the
catch-up time with and without them. ``BENCH_BUSY_RAG`` / ``BENCH_BUSY_OTHER`` scale the rows.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from bench.monitor import BOOTSTRAP, _cpu_s, _delete, _free_port, _metrics, _stop, _topics  # noqa: E402
from tests.integration.busy_topic import (  # noqa: E402
    Message,
    interleave,
    other_traces,
    produce,
    rag_traces,
    whole,
)

RAG: Final = int(os.environ.get("BENCH_BUSY_RAG", "1000"))
OTHER: Final = int(os.environ.get("BENCH_BUSY_OTHER", "19000"))
PARTITIONS: Final = 4
TIMEOUT_S: Final = 300.0


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _start(topic: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "python"), "-m", "citemon.cli", "run",
            "--bootstrap-servers", BOOTSTRAP, "--topic", topic, "--group", f"bench.{topic}",
            "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
            "--metrics-host", "127.0.0.1", "--budget-per-minute", "0", "--judge", "lexical",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _row(name: str, messages: list[Message]) -> dict[str, float]:
    """Run one monitor over ``messages``: counted, catch-up seconds, CPU seconds, peak RSS."""
    topic = f"bench-busy-{uuid.uuid4().hex[:8]}"
    asyncio.run(_topics(topic, partitions=PARTITIONS))
    asyncio.run(produce(BOOTSTRAP, topic, messages))
    port = _free_port()
    proc = _start(topic, port)
    try:
        deadline = time.monotonic() + 60
        while "citemon_answers_total" not in _metrics(port):
            if time.monotonic() > deadline:
                raise TimeoutError("the monitor did not start")
            time.sleep(0.05)
        t0 = time.monotonic()
        cpu0 = _cpu_s(proc.pid)
        counted, caught_up = 0.0, float("nan")
        while time.monotonic() - t0 < TIMEOUT_S:
            m = _metrics(port)
            counted = m.get("citemon_answers_total", 0.0)
            idle = m.get("citemon_held_traces", 1.0) == 0
            lag = m.get("citemon_consumer_lag", 1.0)
            if counted >= RAG and idle and lag == 0:
                caught_up = time.monotonic() - t0
                break
            time.sleep(0.1)
        cpu = _cpu_s(proc.pid) - cpu0
        rss = _peak_rss_mb(proc.pid)
    finally:
        _stop(proc)
        asyncio.run(_delete(topic, f"{topic}.dlq", f"bench.{topic}.held-spans"))
    print(
        f"{name:<52} {counted:>5.0f}/{RAG}  {caught_up:>7.1f} s  {cpu:>6.1f} s CPU  {rss:>5.0f} MB",
        flush=True,
    )
    return {"counted": counted, "caught_up_s": caught_up, "cpu_s": cpu, "rss_mb": rss}


def run() -> None:
    rag = rag_traces(RAG)
    other = other_traces(OTHER)
    print(f"{RAG} RAG traces, {OTHER} other traces, {PARTITIONS} partitions, lexical judge")
    print(f"{'row':<52} {'counted':>9}  {'catch-up':>9}  {'CPU':>10}  {'peak RSS':>8}")
    alone = _row("each trace in one message, no other traffic", whole(rag))
    busy = _row(f"each trace in one message, {OTHER} other traces", _mixed(whole(rag), other))
    _row(f"retriever, then root 2,000 messages later, {OTHER} others", interleave(rag, other, 2000))
    _row(
        f"retriever, then root 12,000 messages later, {OTHER} others", interleave(rag, other, 12000)
    )
    extra_cpu = busy["cpu_s"] - alone["cpu_s"]
    if extra_cpu > 0:
        print(
            f"other traces read per CPU second: {OTHER / extra_cpu:,.0f} traces, "
            f"{3 * OTHER / extra_cpu:,.0f} spans ({extra_cpu:.1f} s CPU for {OTHER} traces)"
        )
    print(
        f"catch-up with the other traffic / without: {busy['caught_up_s']:.1f} s / "
        f"{alone['caught_up_s']:.1f} s = {busy['caught_up_s'] / alone['caught_up_s']:.2f}"
    )


def _mixed(rag: list[Message], other: list[Message]) -> list[Message]:
    """The RAG messages spread evenly among the others."""
    out: list[Message] = []
    step = max(1, len(other) // max(1, len(rag)))
    it = iter(rag)
    for i, message in enumerate(other):
        if i % step == 0:
            out.extend(list(itertools.islice(it, 1)))
        out.append(message)
    out.extend(it)
    return out


if __name__ == "__main__":
    run()
