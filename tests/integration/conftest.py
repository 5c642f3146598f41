"""Fixtures for tests against a real Apache Kafka broker (started by ``deploy/kafka.sh``).

Everything collected under ``tests/integration`` gets the ``integration`` marker, so
``-m "not integration"`` is an offline run. A missing broker fails under CI=true and skips
elsewhere (``need_server``): a green CI must mean the broker was really there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

from tests.conftest import REPO, need_server

__all__ = ["SecuredKafka", "TopicFactory"]

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


async def _probe(bootstrap: str, **client_options: Any) -> str | None:
    """``None`` when the broker serves metadata listing at least one broker, else why not.

    ``client_options`` are extra aiokafka arguments (security protocol, SASL, TLS)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **client_options
    )
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await admin.start()
            cluster = await admin.describe_cluster()
    except Exception as exc:  # any failure means "not usable", and says which
        return str(exc) or type(exc).__name__
    finally:
        await admin.close()
    return None if cluster.get("brokers") else "metadata lists no brokers"


def kafka_script(
    command: str, env: Mapping[str, str] | None = None, *, timeout_s: float = START_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``deploy/kafka.sh COMMAND`` with ``env`` over ours (raises OSError or TimeoutExpired)."""
    return subprocess.run(
        ["bash", str(KAFKA_SCRIPT), command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **(env or {})},
    )


@dataclass(frozen=True)
class OwnBroker:
    """A plaintext broker of one test module's own on ``port`` (controller ``port + 1``), for
    tests that stop, kill or freeze a broker: the shared one on 9092 is never touched."""

    port: int
    pidfile: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return int(self.pidfile.read_text())

    def script(self, command: str) -> subprocess.CompletedProcess[str]:
        env = {
            "CITEMON_KAFKA_PORT": str(self.port),
            "CITEMON_KAFKA_CONTROLLER_PORT": str(self.port + 1),
            "CITEMON_KAFKA_SECURITY": "plaintext",
        }
        return kafka_script(command, env)

    def up(self) -> float:
        """``kafka.sh up`` (returns once it serves metadata); the seconds it took."""
        return self._timed("up")

    def down(self) -> float:
        return self._timed("down")

    def _timed(self, command: str) -> float:
        started = time.monotonic()
        done = self.script(command)
        assert done.returncode == 0, done.stdout + done.stderr
        return time.monotonic() - started


@contextlib.contextmanager
def start_own_broker(port: int) -> Iterator[OwnBroker]:
    """An :class:`OwnBroker` started on ``port`` and always stopped at the end; one that does
    not start fails the test under ``CI=true`` and skips it elsewhere."""
    broker = OwnBroker(port, Path())
    try:
        info = broker.script("info")
        run_dir = dict(line.split("=", 1) for line in info.stdout.splitlines() if "=" in line)
        broker = OwnBroker(port, Path(run_dir["run_dir"]) / "kafka.pid")
        done = broker.script("up")
    except (OSError, subprocess.TimeoutExpired, KeyError) as exc:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            broker.script("down")
        need_server("a second Apache Kafka broker", f"deploy/kafka.sh: {exc}")
        raise AssertionError("unreachable") from None
    try:
        if (
            done.returncode != 0
            or not broker.pidfile.is_file()
            or asyncio.run(_probe(broker.bootstrap)) is not None
        ):
            need_server(
                "a second Apache Kafka broker",
                f"deploy/kafka.sh up on {port} exited {done.returncode}: "
                f"{(done.stdout + done.stderr).strip()[-1500:]}",
            )
        yield broker
    finally:
        broker.script("down")


def _start_broker(env: dict[str, str] | None = None) -> str:
    """Run ``deploy/kafka.sh up`` once; returns its output for the skip/fail message."""
    try:
        done = kafka_script("up", env)
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


@contextlib.asynccontextmanager
async def _topic_factory(
    admin: AIOKafkaAdminClient, request: pytest.FixtureRequest
) -> AsyncIterator[TopicFactory]:
    """Create topics with ``admin`` (started; closed here) and delete them on exit."""
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


@pytest.fixture
async def kafka_topic(
    kafka_bootstrap: str, request: pytest.FixtureRequest
) -> AsyncIterator[TopicFactory]:
    """Factory for uniquely named topics on the real broker; deletes them after the test."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10000)
    await admin.start()
    async with _topic_factory(admin, request) as create:
        yield create


# -- the secured broker (CITEMON_KAFKA_SECURITY=sasl deploy/kafka.sh up) ----------------------

#: What selects ``deploy/kafka.sh``'s second, SASL/SCRAM + TLS broker (ports 9096/9098).
SASL_ENV = {"CITEMON_KAFKA_SECURITY": "sasl"}


@dataclass(frozen=True)
class SecuredKafka:
    """The secured test broker: where it listens and where its credentials are.

    The password is only ever in ``password_file`` (written by ``kafka.sh`` at first start,
    mode 600), so tests pass it the way an operator would: by file, or by reading it into env.
    """

    bootstrap: str
    """``SASL_PLAINTEXT`` listener (SCRAM-SHA-256 and -512)."""
    ssl_bootstrap: str
    """``SASL_SSL`` listener: the same users over TLS, verified with ``ssl_cafile``."""
    username: str
    password_file: Path
    ssl_cafile: Path

    def client_options(
        self, protocol: str = "SASL_PLAINTEXT", mechanism: str = "SCRAM-SHA-256"
    ) -> dict[str, Any]:
        """aiokafka arguments for a test's own clients (producers, admin) on this broker."""
        from aiokafka.helpers import create_ssl_context

        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap
            if protocol == "SASL_PLAINTEXT"
            else self.ssl_bootstrap,
            "security_protocol": protocol,
            "sasl_mechanism": mechanism,
            "sasl_plain_username": self.username,
            "sasl_plain_password": self.password_file.read_text().strip(),
        }
        if protocol == "SASL_SSL":
            options["ssl_context"] = create_ssl_context(cafile=str(self.ssl_cafile))
        return options


def _secured_info() -> SecuredKafka | str:
    """``kafka.sh info`` for the secured broker (starts nothing), or why it failed."""
    try:
        done = kafka_script("info", SASL_ENV, timeout_s=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"deploy/kafka.sh info did not finish: {exc}"
    if done.returncode != 0:
        return f"deploy/kafka.sh info exited {done.returncode}: {done.stderr.strip()}"
    info = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return SecuredKafka(
        bootstrap=info["bootstrap"],
        ssl_bootstrap=info["ssl_bootstrap"],
        username=info["username"],
        password_file=Path(info["password_file"]),
        ssl_cafile=Path(info["ssl_cafile"]),
    )


async def _probe_secured(kafka: SecuredKafka) -> str | None:
    """``None`` when both listeners authenticate the test user and serve metadata."""
    if not kafka.password_file.is_file():
        return f"{kafka.password_file} does not exist (the broker was never started)"
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        options = kafka.client_options(protocol)
        why = await _probe(options.pop("bootstrap_servers"), **options)
        if why is not None:
            return f"{protocol}: {why}"
    return None


@pytest.fixture(scope="session")
def kafka_sasl() -> SecuredKafka:
    """The SASL/SCRAM + TLS broker, started with ``CITEMON_KAFKA_SECURITY=sasl deploy/kafka.sh
    up`` when it does not answer (a clean clone starts it here: jars, CA, SCRAM users)."""
    kafka = _secured_info()
    if isinstance(kafka, str):
        need_server("secured Apache Kafka", kafka)
        raise AssertionError("unreachable")  # need_server skips or fails
    why = asyncio.run(_probe_secured(kafka))
    if why is None:
        return kafka
    started = _start_broker(SASL_ENV)
    why_after = asyncio.run(_probe_secured(kafka))
    if why_after is not None:
        need_server(
            "secured Apache Kafka",
            f"{kafka.bootstrap}: {why}; tried to start it: {started}; then: {why_after}",
        )
    return kafka


@pytest.fixture
async def kafka_sasl_topic(
    kafka_sasl: SecuredKafka, request: pytest.FixtureRequest
) -> AsyncIterator[TopicFactory]:
    """Like ``kafka_topic``, on the secured broker (created and deleted over SASL)."""
    admin = AIOKafkaAdminClient(request_timeout_ms=10000, **kafka_sasl.client_options())
    await admin.start()
    async with _topic_factory(admin, request) as create:
        yield create


# -- a broker that does not create topics on first use (most production clusters) ------------


@dataclass(frozen=True)
class StrictBroker:
    """A plaintext broker of this session's own with ``auto.create.topics.enable=false``."""

    bootstrap: str
    log_dir: Path


def _strict_broker_config(port: int, controller_port: int, data: Path) -> str:
    template = (REPO / "deploy" / "kafka" / "server.properties.in").read_text()
    text = (
        template.replace("@PORT@", str(port))
        .replace("@CONTROLLER_PORT@", str(controller_port))
        .replace("@DATA_DIR@", str(data))
    )
    assert "auto.create.topics.enable=true" in text, "the template changed: update this fixture"
    return text.replace("auto.create.topics.enable=true", "auto.create.topics.enable=false")


@pytest.fixture(scope="session")
def kafka_strict(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StrictBroker]:
    """A second broker, started once per session from the jars ``deploy/kafka.sh`` fetched
    (the shared broker fixture fetches them), that refuses to create topics on first use."""
    from tests.integration.prometheus_support import free_port

    info = kafka_script("info", timeout_s=PROBE_TIMEOUT_S)
    run_dir = dict(line.split("=", 1) for line in info.stdout.splitlines() if "=" in line)
    libs = Path(run_dir.get("run_dir", "/nonexistent")).parent / "libs"
    if not (libs / ".complete").is_file():
        need_server("a second Apache Kafka broker", f"no Kafka jars in {libs}")
    root = tmp_path_factory.mktemp("strict-kafka")
    port, controller = free_port(), free_port()
    config = root / "server.properties"
    config.write_text(_strict_broker_config(port, controller, root / "data"))
    logs = root / "logs"
    logs.mkdir()
    java = ["java", "-cp", f"{libs}/*", f"-Dkafka.logs.dir={logs}"]
    java.append(f"-Dlog4j2.configurationFile={REPO / 'deploy' / 'kafka' / 'log4j2.xml'}")
    cluster = subprocess.run(
        [*java, "kafka.tools.StorageTool", "random-uuid"], capture_output=True, text=True
    ).stdout.split()
    if not cluster:
        need_server("a second Apache Kafka broker", "StorageTool random-uuid printed nothing")
    formatted = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", cluster[-1], "-c", str(config)],
        capture_output=True,
        text=True,
    )
    if formatted.returncode != 0:
        need_server("a second Apache Kafka broker", formatted.stdout + formatted.stderr)
    out = (logs / "stdout.log").open("wb")
    proc = subprocess.Popen(
        [*java, "-Xmx384m", "kafka.Kafka", str(config)],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (why := asyncio.run(_probe(bootstrap))) is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                need_server("a second Apache Kafka broker", f"{bootstrap}: {why}")
            time.sleep(0.5)
        yield StrictBroker(bootstrap, logs)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        out.close()


# -- passage stores (tests/integration/store_servers.py) ----------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A private PostgreSQL server on a loopback port for the whole session (make postgres)."""
    from tests.integration.store_servers import postgres_bin, running_postgres

    bin_dir = postgres_bin()
    if bin_dir is None:
        need_server("PostgreSQL", "no server binaries in /usr/lib/postgresql (make postgres)")
        return
    with running_postgres(bin_dir) as server:
        yield server


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[Any]:
    """``chroma run`` on a loopback port for the whole session (make chroma)."""
    from tests.integration.store_servers import chroma_binary, running_chroma

    binary = chroma_binary()
    if binary is None:
        need_server("Chroma", "no chroma venv under ~/.cache/citemon (make chroma)")
        return
    with running_chroma(binary) as server:
        yield server
