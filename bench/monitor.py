"""``citemon run`` on the real broker: judge-bound throughput, CPU per answer, RSS under a backlog.

1. **Throughput.** An HTTP stub judge (``tests/judge_server.py``) answers every request after a
   fixed latency L; the monitor's judge cap is C, so no monitor can exceed C/L claim checks per
   second. The ratio sustained/(C/L) says how much of the judge the monitor keeps busy (target
   ≥ 0.95). Every answer carries a unique token so the judge's verdict cache cannot help.
2. **CPU per answer**: the monitor process's user+system CPU over the run / answers scored.
3. **Memory under a backlog**: the judge returns 503 for everything; 200,000 answers are queued
   behind it; the monitor's RSS growth from before the backlog to its peak (target < 100 MB).

The monitor runs as a separate ``citemon run`` process so its CPU and RSS are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import httpx

REPO: Final = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from aiokafka import AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from citemon._demo.data import QUESTIONS, answer  # noqa: E402
from citemon._demo.service import otlp_template  # noqa: E402
from tests.judge_server import Fault, JudgeServer  # noqa: E402

BOOTSTRAP: Final = os.environ.get("CITEMON_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
LATENCY_S: Final = float(os.environ.get("BENCH_JUDGE_LATENCY_S", "0.1"))
CAP: Final = int(os.environ.get("BENCH_JUDGE_CAP", "32"))
ANSWERS: Final = int(os.environ.get("BENCH_ANSWERS", "2000"))
BACKLOG: Final = int(os.environ.get("BENCH_BACKLOG", "200000"))
INFLIGHT: Final = ("--max-inflight-answers", os.environ.get("BENCH_INFLIGHT", "64"))
_TOKENS: Final = (b"ref-a00000000", b"ref-b00000000", b"ref-c00000000")
"""Patched per answer, one per claim: defeats the judge's verdict cache."""


def _always(claim: str, passages: Mapping[str, str]) -> tuple[bool, str]:
    return True, "stub"  # one request per claim: the citation check passes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _template() -> tuple[bytes, bytes]:
    record = answer(QUESTIONS[0], "correct", "bench")
    # Claims end "… [p-3310]." etc.: put a token in each claim, before its marker.
    for pid, token in zip(QUESTIONS[0].retrieved, _TOKENS, strict=True):
        record.answer = record.answer.replace(f" [{pid}].", f" {token.decode()} [{pid}].", 1)
    payload, trace_id = otlp_template(record)
    assert all(payload.count(t) == 1 for t in _TOKENS)
    return payload, trace_id


def _messages(template: tuple[bytes, bytes], n: int, start: int) -> list[tuple[bytes, bytes]]:
    payload, old_tid = template
    out = []
    for i in range(start, start + n):
        tid = uuid.uuid4().bytes
        value = payload.replace(old_tid, tid, 1)
        for token in _TOKENS:
            value = value.replace(token, token[:5] + f"{i:08d}".encode(), 1)
        out.append((tid.hex().encode(), value))
    return out


async def _produce(topic: str, n: int, template: tuple[bytes, bytes]) -> float:
    producer = AIOKafkaProducer(
        bootstrap_servers=BOOTSTRAP,
        compression_type="gzip",
        linger_ms=50,
        max_batch_size=1 << 20,
        acks=1,
    )
    await producer.start()
    t0 = time.perf_counter()
    try:
        chunk = 5000
        for start in range(0, n, chunk):
            futures = [
                await producer.send(topic, value=v, key=k)
                for k, v in _messages(template, min(chunk, n - start), start)
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return time.perf_counter() - t0


async def _topics(*names: str, partitions: int = 3) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


async def _delete(*names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


def _start(topic: str, judge_url: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "python"), "-m", "citemon.cli", "run",
            "--bootstrap-servers", BOOTSTRAP, "--topic", topic, "--group", f"bench.{topic}",
            "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
            "--metrics-host", "127.0.0.1", "--budget-per-minute", "0",
            "--judge", "http", "--judge-base-url", judge_url,
            "--judge-concurrency", str(CAP), "--judge-timeout", "10", *extra,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _metrics(port: int) -> dict[str, float]:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return {}
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            with contextlib.suppress(ValueError):
                sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[-1])
    return sums


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _wait(cond: object, timeout_s: float, step_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("bench condition not met")
        time.sleep(step_s)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def throughput() -> None:
    topic = f"bench.monitor.{uuid.uuid4().hex[:8]}"
    asyncio.run(_topics(topic, f"{topic}.dlq"))
    template = _template()
    port = _free_port()
    try:
        with JudgeServer(latency_s=LATENCY_S, rule=_always).in_thread() as judge:
            proc = _start(topic, judge.base_url, port, *INFLIGHT)
            try:
                _wait(lambda: bool(_metrics(port)), 30)
                produced_s = asyncio.run(_produce(topic, ANSWERS, template))
                cpu0 = _cpu_s(proc.pid)
                _wait(lambda: _metrics(port).get("citemon_answers_total", 0) >= ANSWERS, 600)
                cpu = _cpu_s(proc.pid) - cpu0
                m = _metrics(port)
                times = sorted(r.received_at for r in judge.requests)
            finally:
                _stop(proc)
    finally:
        asyncio.run(_delete(topic, f"{topic}.dlq"))
    # Sustained rate: the middle 80% of the requests, so start-up and the tail don't count.
    lo, hi = int(len(times) * 0.1), int(len(times) * 0.9)
    rate = (hi - lo) / (times[hi] - times[lo])
    bound = CAP / LATENCY_S
    print(
        f"throughput: {ANSWERS} answers ({len(times)} claim checks) through an HTTP judge at "
        f"L={LATENCY_S * 1000:.0f} ms, C={CAP}: {rate:.0f} checks/s sustained vs C/L="
        f"{bound:.0f}/s → ratio {rate / bound:.3f} (target ≥ 0.95)"
    )
    # Little's law: requests in flight = rate × latency the monitor saw. Against the cap, this
    # says whether the monitor kept the judge full; the gap to C/L is per-request HTTP cost.
    seen_s = m["citemon_judge_request_seconds_sum"] / m["citemon_judge_request_seconds_count"]
    print(
        f"judge latency seen by the monitor {seen_s * 1000:.1f} ms (L + HTTP); cap utilisation "
        f"rate × latency / C = {rate * seen_s / CAP:.3f}"
    )
    print(
        f"monitor CPU: {cpu:.2f} s for {ANSWERS} answers = {cpu / ANSWERS * 1000:.2f} ms per "
        f"answer ({cpu / len(times) * 1000:.2f} ms per claim check); produced in {produced_s:.1f} s"
    )


def backlog() -> None:
    topic = f"bench.backlog.{uuid.uuid4().hex[:8]}"
    asyncio.run(_topics(topic, f"{topic}.dlq"))
    template = _template()
    port = _free_port()
    try:
        with JudgeServer(rule=_always).in_thread() as judge:
            judge.script(Fault.status(503), forever=True)
            proc = _start(topic, judge.base_url, port, "--drain-timeout", "2")
            try:
                _wait(lambda: bool(_metrics(port)), 30)
                time.sleep(2)
                base = _rss_mb(proc.pid)
                produced_s = asyncio.run(_produce(topic, BACKLOG, template))
                peak = base
                lag = 0.0
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    peak = max(peak, _rss_mb(proc.pid))
                    m = _metrics(port)
                    lag = m.get("citemon_consumer_lag", lag)
                    time.sleep(0.5)
                m = _metrics(port)
            finally:
                _stop(proc)
    finally:
        asyncio.run(_delete(topic, f"{topic}.dlq"))
    print(
        f"backlog: {BACKLOG} answers queued in {produced_s:.1f} s behind a judge returning 503; "
        f"monitor RSS {base:.0f} MB → peak {peak:.0f} MB over 20 s: growth {peak - base:.1f} MB "
        f"(target < 100 MB); lag {lag:.0f}, "
        f"answers scored {m.get('citemon_answers_total', 0):.0f}, "
        f"judge requests made {m.get('citemon_judge_requests_total', 0):.0f}"
    )


def run() -> None:
    throughput()
    backlog()


if __name__ == "__main__":
    run()
