"""The transactional-ID footgun, closed: a replica whose results producers would not share the
group's transactional IDs is refused at start-up, next to a real replica on the real broker.

Each input partition's results producer has the ID ``<prefix>-<topic>-<partition>``; the
partition's next owner initialises the same ID and the broker fences a frozen previous owner.
A per-pod prefix breaks that (its answers then commit twice), so the prefix is derived from the
consumer group alone and any other value is refused with a clear error, before the replica
joins the group.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import ready, start_process, wait_for
from tests.integration.prometheus_support import free_port


def _flags(bootstrap: str, topic: str, results: str, port: int, *extra: str) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--results-topic", results,
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--budget-per-minute", "0",
        *extra,
    ]  # fmt: skip


def _refused(proc: subprocess.Popen[bytes], log: Path) -> str:
    assert proc.wait(timeout=60) == 2, log.read_text()[-2000:]
    return log.read_text()


async def test_a_replica_with_another_transactional_id_is_refused(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=1)
    group = f"g.{topic}"
    port_a, port_b = free_port(), free_port()
    first = start_process(
        _flags(kafka_bootstrap, topic, results, port_a), log_path=tmp_path / "a.log"
    )
    others: list[subprocess.Popen[bytes]] = []
    try:
        await wait_for(lambda: ready(port_a), 60, "the first replica to be ready")
        # A second replica given a per-pod prefix, by flag and by environment: refused.
        per_pod = start_process(
            _flags(kafka_bootstrap, topic, results, port_b, "--transactional-id", "citemon-pod-1"),
            log_path=tmp_path / "flag.log",
        )
        others.append(per_pod)
        text = _refused(per_pod, tmp_path / "flag.log")
        assert "'citemon-pod-1' is refused" in text
        assert f"consumer group '{group}'" in text and "counted twice" in text
        assert f"('citemon-{group}')" in text
        by_env = start_process(
            _flags(kafka_bootstrap, topic, results, port_b),
            env={"CITEMON_TRANSACTIONAL_ID": "pod-2"},
            log_path=tmp_path / "env.log",
        )
        others.append(by_env)
        assert "'pod-2' is refused" in _refused(by_env, tmp_path / "env.log")
        # The derived prefix spelled out is the same ID: that replica joins and serves.
        spelled = start_process(
            _flags(
                kafka_bootstrap, topic, results, port_b, "--transactional-id", f"citemon-{group}"
            ),
            log_path=tmp_path / "spelled.log",
        )
        others.append(spelled)
        await wait_for(lambda: ready(port_b), 60, "the replica with the derived prefix")
        # The first replica serves on too: once the rebalance that let B in has opened its
        # partitions again (reading their held parts back), it is ready, not exited.
        await wait_for(lambda: ready(port_a), 60, "the first replica, after the rebalance")
        assert first.poll() is None, (tmp_path / "a.log").read_text()[-2000:]
    finally:
        for proc in [first, *others]:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(40)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
