"""``citemon run`` across a Kafka broker restart (a rolling upgrade's one-node case).

The monitor runs as a real process against a broker of its own (``deploy/kafka.sh`` on other
ports, so the shared broker on 9092 is never touched). Mid-stream the broker is stopped —
gracefully (SIGTERM, a controlled shutdown) or with ``kill -9`` — and started again; more
answers follow. The monitor must ride it out: same process, every answer in the results topic
exactly once (``read_committed``), ``citemon_answers_total`` equal to the answers sent, no dead
letters. While the broker is away, commits fail and are retried; answers scored meanwhile wait
in the tracker and go out with the first commit that succeeds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.conftest import OwnBroker, start_own_broker
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

#: This test's own broker (the shared one is 9092/9093; the SASL one 9096-9098).
PORT = int(os.environ.get("CITEMON_TEST_RESTART_KAFKA_PORT", "19292"))
#: How long the broker stays away (seconds; the env var is for longer soaks by hand).
DOWN_S = float(os.environ.get("CITEMON_TEST_BROKER_DOWN_S", "3"))
BEFORE, AFTER = 80, 40
#: The monitor's group session: the broker restart must not cost the member its partitions
#: for longer than this, and a lost member is noticed this fast.
ENV = {"CITEMON_SESSION_TIMEOUT_MS": "10000", "CITEMON_TEST_JUDGE_DELAY_S": "0.05"}


def _kill_9(broker: OwnBroker) -> None:
    pid = broker.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running, and not yet a zombie (the broker's parent shell is gone: init reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def _module_broker() -> Iterator[OwnBroker]:
    """A broker on ``PORT`` for this module alone; always stopped at the end."""
    with start_own_broker(PORT) as broker:
        yield broker


@pytest.fixture
def own_broker(_module_broker: OwnBroker) -> OwnBroker:
    """The module's broker, up (a test that failed while it was down leaves it down)."""
    _module_broker.up()
    return _module_broker


def _status(port: int, path: str) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=0.5).status_code
    except httpx.HTTPError:
        return -1


def _answers(port: int) -> float:
    return (scrape(port, 0.5) or {}).get("citemon_answers_total", -1.0)


async def _create_topics(bootstrap: str, names: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in names.items()],
            timeout_ms=10000,
        )
        async with asyncio.timeout(15):
            while True:
                metas = await admin.describe_topics(list(names))
                if all(
                    m["error_code"] == 0
                    and len([p for p in m["partitions"] if p["leader"] >= 0]) == names[m["topic"]]
                    for m in metas
                ):
                    return
                await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        await admin.start()
        await admin.delete_topics(names, timeout_ms=10000)
    except Exception:  # cleanup on a broker that may be down after a failure: best effort
        pass
    finally:
        await admin.close()


# kill -9 costs ~10 s more: the restarted broker waits out its dead incarnation's session
# (broker.session.timeout.ms, 9 s) before the controller unfences it. The slow soak runs it,
# with more than the default 120 s: its own broker's start (setup) counts, 45 s on a busy machine.
@pytest.mark.parametrize(
    "how",
    ["graceful", pytest.param("kill_9", marks=[pytest.mark.slow, pytest.mark.timeout(300)])],
)
async def test_broker_restart_mid_stream_loses_nothing_and_results_are_exactly_once(
    own_broker: OwnBroker, tmp_path: Path, how: str
) -> None:
    stamp = f"{how}.{os.getpid()}.{time.monotonic_ns()}"
    topic = f"restart.{stamp}"
    results, dlq = f"{topic}.scores", f"{topic}.dlq"
    await _create_topics(own_broker.bootstrap, {topic: 3, results: 1, dlq: 1})
    try:
        await _restart_scenario(own_broker, tmp_path, how, topic, results, dlq)
    finally:
        await _delete_topics(own_broker.bootstrap, [topic, results, dlq])


async def _restart_scenario(
    own_broker: OwnBroker, tmp_path: Path, how: str, topic: str, results: str, dlq: str
) -> None:
    """One monitor process rides out the restart (see the module docstring)."""
    bootstrap = own_broker.bootstrap
    port = free_port()
    log = tmp_path / "run.log"
    flags = _flags(bootstrap, topic, port)
    n = BEFORE + AFTER
    t0 = time.monotonic()
    proc = start_process(flags, env=ENV, log_path=log)
    timings: dict[str, float] = {}
    try:
        await wait_for(lambda: ready(port), 30, "the monitor to be ready")
        timings["monitor ready"] = time.monotonic() - t0
        first = await asyncio.to_thread(publish, bootstrap, topic, [("v1", BEFORE, False)], seed=3)
        await wait_for(lambda: _answers(port) >= 10, 30, "some answers scored")
        t_stop = time.monotonic()
        scored_before_stop = _answers(port)
        if how == "graceful":
            timings["broker down (graceful)"] = await asyncio.to_thread(own_broker.down)
        else:
            await asyncio.to_thread(_kill_9, own_broker)
            timings["broker kill -9"] = time.monotonic() - t_stop
        scored_at_stop = _answers(port)
        assert scored_at_stop < BEFORE, "the broker stopped after the first batch was done"
        await asyncio.sleep(DOWN_S)
        assert proc.poll() is None, "the monitor exited while the broker was down"
        # A liveness probe that failed now would have Kubernetes restart every replica.
        assert _status(port, "/healthz") == 200
        timings["broker up again"] = await asyncio.to_thread(own_broker.up)
        t_back = time.monotonic()
        second = await asyncio.to_thread(publish, bootstrap, topic, [("v2", AFTER, True)], seed=4)
        timings["second batch published"] = time.monotonic() - t_back
        await wait_for(lambda: _answers(port) >= n, 60, f"all {n} answers counted")
        timings["all counted after broker back"] = time.monotonic() - t_back
        deadline = time.monotonic() + 30
        while await committed_total(bootstrap, f"g.{topic}", topic, 3) < n:  # every offset
            assert time.monotonic() < deadline, "not every offset was committed"
            await asyncio.sleep(0.3)
        sums = scrape(port) or {}
        assert proc.poll() is None, "the monitor exited"
        assert ready(port), "not ready again after the broker came back"
    finally:
        code = await asyncio.to_thread(_stop, proc)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert await committed_total(bootstrap, f"g.{topic}", topic, 3) == n
    # Counted once each, by the count at exit: a late second count cannot come after it.
    assert scored_at_exit(text) == n
    assert sums.get("citemon_answers_total") == n, sums
    assert sums.get("citemon_dead_letters_total", 0.0) == 0.0
    committed = await read_topic(bootstrap, results)
    bodies = [json.loads(r.value) for r in committed]
    keys = Counter((b["trace_id"], b["span_id"]) for b in bodies)
    assert len(bodies) == n, f"{len(bodies)} results for {n} answers"
    assert len(keys) == n and max(keys.values()) == 1
    per_version: dict[str, Counter[str]] = {}
    for b in bodies:
        per_version.setdefault(b["version"], Counter()).update(c["verdict"] for c in b["claims"])
    assert per_version == await expected_verdicts(first + second)
    assert await read_topic(bootstrap, dlq) == []
    everything = await read_topic(bootstrap, results, committed_only=False)
    failures = text.count("commit failed, will retry")
    print(
        f"\nbroker restart ({how}, away {DOWN_S:.0f} s): {scored_before_stop:.0f} of {BEFORE} "
        f"counted when it was told to stop, {scored_at_stop:.0f} once it had stopped; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + f"; commit failures logged {failures}; results {len(bodies)} exactly once "
        f"({len(everything) - n} more in aborted transactions); total {time.monotonic() - t0:.1f} s"
    )


def _flags(bootstrap: str, topic: str, port: int, *extra: str) -> list[str]:
    """``citemon run`` on ``topic`` with results (exactly-once) and DLQ topics named after it."""
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--results-topic", f"{topic}.scores",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--judge", "tests.integration.slow_judge:factory", "--max-inflight-answers", "8",
        *extra,
    ]  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM and wait; a monitor that does not exit in time is killed (and None returned)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None


async def test_sigterm_while_the_broker_is_down_exits_by_the_close_deadline(
    own_broker: OwnBroker, tmp_path: Path
) -> None:
    """A rollout of the monitor during a broker outage: the drain cannot commit, so the process
    gives up after its close deadline (10 s) instead of waiting for the broker (it used to wait
    until the broker came back, past Kubernetes' grace period). The uncommitted answers are
    scored exactly once by the next process, whose transactional ID aborts the open
    transaction."""
    bootstrap = own_broker.bootstrap
    topic = f"restart.sigterm.{os.getpid()}.{time.monotonic_ns()}"
    results, dlq = f"{topic}.scores", f"{topic}.dlq"
    await _create_topics(bootstrap, {topic: 3, results: 1, dlq: 1})
    port = free_port()
    log = tmp_path / "run.log"
    flags = _flags(bootstrap, topic, port, "--drain-timeout", "5")
    # The dead process could not leave the group: the next one waits out its session, so
    # make it the broker's minimum.
    env = {**ENV, "CITEMON_SESSION_TIMEOUT_MS": "6000"}
    try:
        proc = start_process(flags, env=env, log_path=log)
        try:
            await wait_for(lambda: ready(port), 30, "the monitor to be ready")
            await asyncio.to_thread(publish, bootstrap, topic, [("v1", BEFORE, False)], seed=5)
            await wait_for(lambda: _answers(port) >= 10, 30, "some answers scored")
            await asyncio.to_thread(own_broker.down)
            counted = _answers(port)
            await asyncio.sleep(1.0)
            t_term = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code: int | None = await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                code = None  # still waiting for the broker: the bug this test is for
            exit_s = time.monotonic() - t_term
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        text = log.read_text()
        assert code == 0, f"exit status {code} after {exit_s:.0f} s\n{text[-3000:]}"
        assert exit_s < 10.0 + 5.0, f"exit took {exit_s:.1f} s"  # close deadline + grace + slack
        assert "stopping without the final commit" in text
        found = re.search(r"citemon run: (\d+) records, (\d+) answers scored", text)
        assert found, text[-2000:]
        assert int(found.group(2)) == counted < BEFORE  # nothing counted that did not commit
        await asyncio.to_thread(own_broker.up)
        rest = BEFORE - int(counted)
        t_up = time.monotonic()
        proc = start_process(flags, env=env, log_path=log)
        try:
            await wait_for(lambda: _answers(port) >= rest, 30, f"the other {rest} answers")
            rest_s = time.monotonic() - t_up
            deadline = time.monotonic() + 30
            while await committed_total(bootstrap, f"g.{topic}", topic, 3) < BEFORE:  # every offset
                assert time.monotonic() < deadline, "not every offset was committed"
                await asyncio.sleep(0.3)
        finally:
            assert await asyncio.to_thread(_stop, proc) == 0
        # Exactly the rest, by the count it printed at exit (nothing can be counted after it).
        assert scored_at_exit(log.read_text()) == rest
        bodies = [json.loads(r.value) for r in await read_topic(bootstrap, results)]
        keys = Counter((b["trace_id"], b["span_id"]) for b in bodies)
        assert len(bodies) == len(keys) == BEFORE
        assert await read_topic(bootstrap, dlq) == []
        print(
            f"\nSIGTERM with the broker down: exit 0 after {exit_s:.1f} s with {counted:.0f} of "
            f"{BEFORE} committed; the next process scored the other {rest} in {rest_s:.1f} s; "
            f"results {len(bodies)} exactly once"
        )
    finally:
        if own_broker.script("status").stdout.startswith("running"):
            await _delete_topics(bootstrap, [topic, results, dlq])
