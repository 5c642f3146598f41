"""``citemon run`` as a real process: ``kill -9`` at random points, and SIGTERM draining.

The results topic must hold every answer exactly once however often the monitor is killed (a
Kafka transaction commits the consumed offsets together with the produced results), and the
Prometheus counters summed over the killed processes must never exceed the answers sent: the
monitor counts an answer only after its offset committed.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    committed_total,
    expected_verdicts,
    publish,
    read_topic,
    ready,
    scored_at_exit,
    scrape,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port

#: The group notices a killed member after this long (the broker's minimum).
ENV = {"CITEMON_SESSION_TIMEOUT_MS": "6000", "CITEMON_TEST_JUDGE_DELAY_S": "0.05"}


def _flags(bootstrap: str, topic: str, port: int, *extra: str) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1", "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--judge", "tests.integration.slow_judge:factory", "--max-inflight-answers", "8",
        *extra,
    ]  # fmt: skip


# Each kill costs a start-up and a session timeout (6 s) before the next member owns the
# partitions: one kill keeps ``make test`` under 20 s here; three are the slow soak.
@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.slow)])
async def test_kill_9_at_random_points_loses_nothing_and_results_are_exactly_once(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path, kills: int
) -> None:
    topic = await kafka_topic(partitions=3)
    results = await kafka_topic(partitions=1)
    sent = await asyncio.to_thread(
        publish,
        kafka_bootstrap,
        topic,
        [("v1", 100 * kills, False), ("v2", 50 * kills, True)],
        seed=9,
    )  # ~40 answers/s here: each process is killed (≤ 2 s after ready) well before the end
    n = len(sent)
    expected = await expected_verdicts(sent)
    rng = random.Random()
    port = free_port()
    flags = _flags(
        kafka_bootstrap,
        topic,
        port,
        "--results-topic",
        results,
    )
    last_counts: list[float] = []
    for _ in range(kills):
        proc = start_process(flags, env=ENV, log_path=tmp_path / "run.log")
        try:
            await wait_for(lambda: ready(port), 30, "the monitor to be ready")
            deadline = time.monotonic() + rng.uniform(0.5, 2.0)
            last = 0.0
            while time.monotonic() < deadline:
                sums = await asyncio.to_thread(scrape, port, 0.5)
                if sums is not None:
                    last = sums.get("citemon_answers_total", last)
                await asyncio.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        last_counts.append(last)
    done_before = await committed_total(kafka_bootstrap, f"g.{topic}", topic, 3)
    final_log = tmp_path / "final.log"
    final = start_process(flags, env=ENV, log_path=final_log)
    try:
        await wait_for(lambda: ready(port), 30, "the last monitor to be ready")
        deadline = time.monotonic() + 60
        while await committed_total(kafka_bootstrap, f"g.{topic}", topic, 3) < n:
            assert time.monotonic() < deadline, "not every answer was committed"
            await asyncio.sleep(0.3)
    finally:
        final.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(final.wait, 30) == 0
    final_count = scored_at_exit(final_log.read_text())  # final: nothing counted after it
    committed = await read_topic(kafka_bootstrap, results)
    everything = await read_topic(kafka_bootstrap, results, committed_only=False)
    bodies = [json.loads(r.value) for r in committed]
    keys = Counter((b["trace_id"], b["span_id"]) for b in bodies)
    assert len(bodies) == n, f"{len(bodies)} results for {n} answers"
    assert max(keys.values()) == 1
    per_version: dict[str, Counter[str]] = {}
    for b in bodies:
        per_version.setdefault(b["version"], Counter()).update(c["verdict"] for c in b["claims"])
    assert per_version == expected
    # The last process counts exactly what it committed; the killed ones can only have
    # counted committed answers, so the sum over processes never exceeds the answers.
    assert final_count == n - done_before
    counted = final_count + sum(last_counts)
    rescored = len(everything) - n  # results of transactions the kills aborted
    print(
        f"\nkill -9 x{kills}: last scrapes of the killed processes {last_counts}, "
        f"committed before the last start {done_before}, counted by the last {final_count:.0f}; "
        f"counted {counted:.0f} of {n} (overcount {max(0.0, counted - n):.0f}); results exactly "
        f"once: {len(bodies)}; results written in transactions the kills aborted: {rescored}"
    )
    assert counted <= n
    assert 0 < done_before < n, "the kills did not land mid-stream; the test proved nothing"


async def test_sigterm_mid_stream_drains_commits_and_exits_0(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_topic(partitions=2)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 60, False)])
    port = free_port()
    log = tmp_path / "run.log"
    env = {**ENV, "CITEMON_TEST_JUDGE_DELAY_S": "0.2"}
    flags = _flags(kafka_bootstrap, topic, port, "--drain-timeout", "25")
    proc = start_process(flags, env=env, log_path=log)
    try:
        await wait_for(
            lambda: (scrape(port, 0.5) or {}).get("citemon_answers_total", 0) >= 3,
            40,
            "some answers scored",
        )
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 40) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    found = re.search(r"citemon run: (\d+) records, (\d+) answers scored", text)
    assert found, text[-2000:]
    records, scored = int(found.group(1)), int(found.group(2))
    assert "0 cancelled at drain" in text
    assert scored == records, "every fetched answer was finished before exit"
    assert 0 < scored < len(sent), f"SIGTERM landed mid-stream ({scored} of {len(sent)})"
    assert await committed_total(kafka_bootstrap, f"g.{topic}", topic, 2) == scored  # and committed
    # A restart scores exactly the rest.
    log = tmp_path / "restart.log"
    proc = start_process(flags, env=env, log_path=log)
    try:
        deadline = time.monotonic() + 60
        while await committed_total(kafka_bootstrap, f"g.{topic}", topic, 2) < len(
            sent
        ):  # the rest, committed
            assert time.monotonic() < deadline, "the rest was not committed"
            await asyncio.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 40) == 0
    assert scored_at_exit(log.read_text()) == len(sent) - scored  # exactly the rest
