"""``citemon run`` on the secured broker with ACLs enforced (StandardAuthorizer): a permission
it lacks is named at start-up, with the ACL that grants it, before anything is consumed.

The broker is ``deploy/kafka.sh``'s secured one (``CITEMON_KAFKA_SECURITY=sasl``, the same
template) on ports of this module's own, so a shared secured broker started from an older
template (without the authorizer) is neither needed nor touched. Its test user ``citemon`` is a
super user (so the other security tests run as before); these tests make a user of their own
(SCRAM, through the broker's own ConfigCommand) and grant it exactly the ACLs each case needs,
through the Kafka protocol's CreateAcls.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import CreateAclsRequest

from tests.conftest import need_server
from tests.integration.conftest import SecuredKafka, TopicFactory, _topic_factory, kafka_script
from tests.integration.monitor_support import PYTHON
from tests.integration.prometheus_support import free_port

# Kafka's ACL codes (org.apache.kafka.common.acl / resource).
TOPIC, GROUP, TRANSACTIONAL_ID = 2, 3, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, DESCRIBE = 3, 4, 8
ALLOW = 3


def _libs() -> Path:
    info = kafka_script("info")
    run_dir = dict(line.split("=", 1) for line in info.stdout.splitlines() if "=" in line)
    return Path(run_dir["run_dir"]).parent / "libs"


#: Ports of this module's secured broker (SASL_PLAINTEXT, controller, SASL_SSL).
ACL_PORTS = {
    "CITEMON_KAFKA_SECURITY": "sasl",
    "CITEMON_KAFKA_SASL_PORT": "19196",
    "CITEMON_KAFKA_SASL_CONTROLLER_PORT": "19197",
    "CITEMON_KAFKA_SSL_PORT": "19198",
}


@pytest.fixture(scope="module")
def kafka_acl() -> Iterator[SecuredKafka]:
    """A secured broker with ACLs enforced, started for this module and stopped after it."""
    done = kafka_script("up", ACL_PORTS)
    if done.returncode != 0:
        kafka_script("down", ACL_PORTS)
        need_server("a secured Apache Kafka with ACLs", (done.stdout + done.stderr)[-1500:])
    info = kafka_script("info", ACL_PORTS)
    fields = dict(line.split("=", 1) for line in info.stdout.splitlines() if "=" in line)
    try:
        yield SecuredKafka(
            bootstrap=fields["bootstrap"],
            ssl_bootstrap=fields["ssl_bootstrap"],
            username=fields["username"],
            password_file=Path(fields["password_file"]),
            ssl_cafile=Path(fields["ssl_cafile"]),
        )
    finally:
        kafka_script("down", ACL_PORTS)


@pytest.fixture
async def acl_topic(
    kafka_acl: SecuredKafka, request: pytest.FixtureRequest
) -> AsyncIterator[TopicFactory]:
    admin = AIOKafkaAdminClient(request_timeout_ms=10000, **kafka_acl.client_options())
    await admin.start()
    async with _topic_factory(admin, request) as create:
        yield create


@pytest.fixture(scope="module")
def limited_user(
    kafka_acl: SecuredKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A SCRAM user with no ACLs yet: (name, password)."""
    name, password = f"limited-{uuid.uuid4().hex[:8]}", secrets.token_hex(16)
    admin_password = kafka_acl.password_file.read_text().strip()
    config = tmp_path_factory.mktemp("acl") / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{kafka_acl.username}" password="{admin_password}";\n'
    )
    config.chmod(0o600)
    command = [
        "java", "-cp", f"{_libs()}/*", "kafka.admin.ConfigCommand",
        "--bootstrap-server", kafka_acl.bootstrap, "--command-config", str(config),
        "--alter", "--add-config", f"SCRAM-SHA-256=[password={password}]",
        "--entity-type", "users", "--entity-name", name,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        need_server("a SCRAM user on the secured broker", done.stdout + done.stderr)
    yield name, password


async def _grant(kafka: SecuredKafka, user: str, *acls: tuple[int, str, int, int]) -> None:
    """ACLs (resource type, name, pattern type, operation), ALLOW for ``User:user``."""
    admin = AIOKafkaAdminClient(request_timeout_ms=10000, **kafka.client_options())
    await admin.start()
    try:
        for resource, name, pattern, operation in acls:
            request = CreateAclsRequest(
                resource, name, pattern, f"User:{user}", "*", operation, ALLOW
            )
            response = await admin._client.send(admin._client.get_random_node(), request)
            for error_code, message in response.creation_responses:
                if error_code == 56:  # SECURITY_DISABLED: the broker runs without an authorizer
                    pytest.fail(
                        "the secured broker has no authorizer: it was started from an older "
                        "deploy/kafka/server-sasl.properties.in; restart it "
                        "(CITEMON_KAFKA_SECURITY=sasl deploy/kafka.sh down; ... up)"
                    )
                assert error_code == 0, message
    finally:
        await admin.close()


def _run(
    kafka: SecuredKafka, user: tuple[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CITEMON_KAFKA_PASSWORD": user[1]}
    args = [
        PYTHON, "-m", "citemon.cli", "run", "--bootstrap-servers", kafka.bootstrap,
        "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-256",
        "--kafka-username", user[0], "--metrics-host", "127.0.0.1",
        "--metrics-port", str(free_port()), *flags,
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=90, env=env, check=False)


async def _topics(create: TopicFactory) -> tuple[str, str, str, str]:
    """Input, dead letters, results, and the held-parts topic (compacted, as `run` needs it)."""
    return (
        await create(partitions=1),
        await create(partitions=1),
        await create(partitions=1),
        await create(partitions=1, configs={"cleanup.policy": "compact"}),
    )


async def test_a_results_topic_it_may_not_write_is_named_with_the_acl_at_start_up(
    kafka_acl: SecuredKafka, acl_topic: TopicFactory, limited_user: tuple[str, str]
) -> None:
    topic, dlq, results, held = await _topics(acl_topic)
    user, group = limited_user[0], f"g.{topic}"
    await _grant(
        kafka_acl,
        user,
        (TOPIC, topic, LITERAL, READ),
        (TOPIC, topic, LITERAL, DESCRIBE),
        (TOPIC, dlq, LITERAL, WRITE),
        (TOPIC, dlq, LITERAL, DESCRIBE),
        *((TOPIC, held, LITERAL, op) for op in (READ, WRITE, DESCRIBE)),
        (TOPIC, results, LITERAL, DESCRIBE),  # but not WRITE
        (GROUP, group, LITERAL, READ),
        (TRANSACTIONAL_ID, f"citemon-{group}", PREFIXED, WRITE),
        (TRANSACTIONAL_ID, f"citemon-{group}", PREFIXED, DESCRIBE),
    )
    flags = ("--topic", topic, "--group", group, "--dlq-topic", dlq, "--results-topic", results)
    flags += ("--held-topic", held)
    done = await asyncio.to_thread(_run, kafka_acl, limited_user, *flags)
    assert done.returncode == 1, done.stderr[-3000:]
    assert (
        f"topic {results!r} (results, --results-topic): not authorized to write it" in done.stderr
    )
    assert f"the ACL WRITE on Topic:{results}" in done.stderr
    problems = done.stderr.split("cannot use the topics", 1)[1].splitlines()[1:]
    assert [p for p in problems if p.startswith("  - ")] == [p for p in problems if results in p]
    assert "Traceback" not in done.stderr


async def test_a_missing_transactional_id_acl_and_describe_are_named(
    kafka_acl: SecuredKafka, acl_topic: TopicFactory, limited_user: tuple[str, str]
) -> None:
    topic, dlq, results, held = await _topics(acl_topic)
    user, group = limited_user[0], f"g.{topic}"
    await _grant(
        kafka_acl,
        user,
        (TOPIC, topic, LITERAL, READ),
        (TOPIC, topic, LITERAL, DESCRIBE),
        (TOPIC, dlq, LITERAL, WRITE),
        (TOPIC, dlq, LITERAL, DESCRIBE),
        *((TOPIC, held, LITERAL, op) for op in (READ, WRITE, DESCRIBE)),
        (TOPIC, results, LITERAL, WRITE),
        (TOPIC, results, LITERAL, DESCRIBE),
        (GROUP, group, LITERAL, READ),
    )
    flags = ("--topic", topic, "--group", group, "--dlq-topic", dlq, "--results-topic", results)
    flags += ("--held-topic", held)
    done = await asyncio.to_thread(_run, kafka_acl, limited_user, *flags)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"TransactionalId:citemon-{group} with --resource-pattern-type prefixed" in done.stderr
    # A topic it may not even describe is named too (the review topic, never granted).
    review = f"{topic}.review"
    done = await asyncio.to_thread(
        _run, kafka_acl, limited_user, *flags, "--review-rate", "0.5", "--review-topic", review
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert (
        f"topic {review!r} (review sample, --review-topic): not authorized to describe"
        in done.stderr
    )
