"""Fixtures for tests against a real Apache Kafka broker (started by ``deploy/kafka.sh``).

Everything collected under ``tests/integration`` gets the ``integration`` marker, so
``-m "not integration"`` is an offline run. A missing broker fails under CI=true and skips
elsewhere (``need_server``): a green CI must mean the broker was really there.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

from tests.conftest import REPO, need_server

__all__ = ["TopicFactory"]

INTEGRATION_DIR = Path(__file__).resolve().parent
KAFKA_SCRIPT = REPO / "deploy" / "kafka.sh"

#: ``host:port`` of the broker; set it to test against a broker this repo did not start.
ENV_BOOTSTRAP = "CITEMON_KAFKA_BOOTSTRAP"
#: The listener port ``deploy/kafka.sh`` uses (default 9092); read here to match it.
ENV_PORT = "CITEMON_KAFKA_PORT"

PROBE_TIMEOUT_S = 10.0
START_TIMEOUT_S = 100.0
#: How long a new topic may take to have a leader for every partition.
TOPIC_READY_TIMEOUT_S = 15.0

TopicFactory = Callable[..., Awaitable[str]]
"""``await kafka_topic(partitions=3)`` → the name of a new, empty, ready topic."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, not only this directory's: filter by path.
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


def bootstrap_address() -> str:
    """The broker address from the environment, defaulting to what ``kafka.sh`` starts."""
    return os.environ.get(ENV_BOOTSTRAP) or f"127.0.0.1:{os.environ.get(ENV_PORT, '9092')}"


async def _probe(bootstrap: str) -> str | None:
    """``None`` when the broker serves metadata listing at least one broker, else why not."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await admin.start()
            cluster = await admin.describe_cluster()
    except Exception as exc:  # any failure means "not usable", and says which
        return str(exc) or type(exc).__name__
    finally:
        await admin.close()
    return None if cluster.get("brokers") else "metadata lists no brokers"


def _start_broker() -> str:
    """Run ``deploy/kafka.sh up`` once; returns its output for the skip/fail message."""
    try:
        done = subprocess.run(
            ["bash", str(KAFKA_SCRIPT), "up"],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"deploy/kafka.sh up did not finish: {exc}"
    return f"deploy/kafka.sh up exited {done.returncode}: {(done.stdout + done.stderr).strip()}"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """A broker that answers metadata; started with ``deploy/kafka.sh up`` if it is not yet.

    An explicit ``CITEMON_KAFKA_BOOTSTRAP`` is never started by us: that broker is someone
    else's, and starting a local one would test the wrong thing.
    """
    bootstrap = bootstrap_address()
    why = asyncio.run(_probe(bootstrap))
    if why is None:
        return bootstrap
    if os.environ.get(ENV_BOOTSTRAP):
        need_server("Apache Kafka", f"{bootstrap} from {ENV_BOOTSTRAP}: {why}")
    started = _start_broker()
    why_after = asyncio.run(_probe(bootstrap))
    if why_after is not None:
        need_server("Apache Kafka", f"{bootstrap}: {why}; tried to start it: {started}")
    return bootstrap


def _topic_name(test_name: str) -> str:
    # Kafka topic names allow [A-Za-z0-9._-] and at most 249 characters.
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", test_name).strip("-")[:80]
    return f"citemon-test.{safe}.{uuid.uuid4().hex[:10]}"


async def _wait_for_leaders(admin: AIOKafkaAdminClient, topic: str, partitions: int) -> None:
    """Block until metadata shows a leader for each partition (producers need one)."""
    async with asyncio.timeout(TOPIC_READY_TIMEOUT_S):
        while True:
            (meta,) = await admin.describe_topics([topic])
            ready = [p for p in meta["partitions"] if p["leader"] >= 0]
            if meta["error_code"] == 0 and len(ready) == partitions:
                return
            await asyncio.sleep(0.1)


@pytest.fixture
async def kafka_topic(
    kafka_bootstrap: str, request: pytest.FixtureRequest
) -> AsyncIterator[TopicFactory]:
    """Factory for uniquely named topics on the real broker; deletes them after the test."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10000)
    await admin.start()
    created: list[str] = []

    async def create(partitions: int = 3, *, configs: dict[str, str] | None = None) -> str:
        name = _topic_name(request.node.name)
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=1, topic_configs=configs or {}
        )
        response = await admin.create_topics([topic], timeout_ms=10000)
        for _topic, code, *message in response.topic_errors:
            if code != 0:
                raise for_code(code)(f"creating {name}: {message}")
        created.append(name)
        await _wait_for_leaders(admin, name, partitions)
        return name

    try:
        yield create
    finally:
        try:
            if created:
                # Cheap on a single node, and keeps the broker's metadata small across runs.
                await admin.delete_topics(created, timeout_ms=10000)
        finally:
            await admin.close()
