"""``citemon run`` against a broker that demands SASL/SCRAM, in the clear and over TLS.

The secured broker comes from ``CITEMON_KAFKA_SECURITY=sasl deploy/kafka.sh up`` (fixture
``kafka_sasl``): SCRAM users made at format time, a self-signed CA. These tests prove what the
settings' unit tests cannot: that the flags reach every Kafka client the monitor opens (group
consumer, DLQ/results producer, transactions whose markers travel the broker's own SASL
listener), that a wrong password stops the monitor at start-up with exit 2 and a message
naming the broker, that TLS really verifies the broker against ``--ssl-cafile``, and that the
password shows up in no log line, no stderr and no metric.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from citemon.core.errors import KafkaUnavailable
from citemon.core.records import AnswerRecord
from citemon.demo.data import QUESTIONS, answer
from citemon.demo.service import otlp_template
from tests.conftest import REPO
from tests.integration.conftest import SecuredKafka, TopicFactory
from tests.integration.monitor_support import (
    PYTHON,
    expected_verdicts,
    run_monitor,
    settings_for,
    verdicts_by_version,
    wait_for,
)
from tests.integration.prometheus_support import free_port

#: A wrong password's start-up failure must come quickly, not after retrying for minutes.
FAIL_FAST_S = 20.0
SCORE_TIMEOUT_S = 30.0
FAULTS = ("correct", "misattributed", "uncited", "over_broad", "unsupported", "correct")


def _answers(v1: int, v2: int) -> list[AnswerRecord]:
    """``v1`` answers with a mix of faults and ``v2`` with the first-passage bug."""
    out = [
        answer(QUESTIONS[i % len(QUESTIONS)], FAULTS[i % len(FAULTS)], f"v1-{i}", version="v1")
        for i in range(v1)
    ]
    out += [
        answer(
            QUESTIONS[i % len(QUESTIONS)],
            "correct",
            f"v2-{i}",
            first_passage_bug=True,
            version="v2",
        )
        for i in range(v2)
    ]
    return out


async def _produce(
    kafka: SecuredKafka, topic: str, records: list[AnswerRecord], protocol: str, mechanism: str
) -> list[str]:
    """Each answer as one raw OTLP message, produced by a client authenticated like the app's;
    returns the trace IDs (hex)."""
    trace_ids: list[str] = []
    producer = AIOKafkaProducer(acks="all", **kafka.client_options(protocol, mechanism))
    await producer.start()
    try:
        for record in records:
            payload, trace_id = otlp_template(record, version=record.version or "v1")
            trace_ids.append(trace_id.hex())
            await producer.send(topic, key=trace_id.hex().encode(), value=payload)
        await producer.flush()
    finally:
        await producer.stop()
    return trace_ids


def _claims(metrics_text: str) -> dict[str, Counter[str]]:
    """``citemon_claims_total`` per version and verdict, from a /metrics page."""
    out: dict[str, Counter[str]] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "citemon_claims_total" and sample.value:
                counter = out.setdefault(sample.labels["version"], Counter())
                counter[sample.labels["verdict"]] += int(sample.value)
    return out


def _metrics_text(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1.0).text
    except httpx.HTTPError:
        return ""


def _citemon(flags: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``citemon --log-level DEBUG run …``: DEBUG so that any leak of the password would show."""
    return subprocess.Popen(
        [PYTHON, "-m", "citemon.cli", "--log-level", "DEBUG", "run", *flags],
        cwd=REPO,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _sasl_flags(kafka: SecuredKafka, topic: str, port: int, password_file: Path) -> list[str]:
    return [
        "--bootstrap-servers", kafka.bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--commit-interval", "0.2", "--budget-per-minute", "0", "--judge", "lexical",
        "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-256",
        "--kafka-username", kafka.username, "--kafka-password-file", str(password_file),
    ]  # fmt: skip


async def _read_committed(kafka: SecuredKafka, topic: str, idle_s: float = 1.5) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **kafka.client_options(),
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                if batch:
                    last = time.monotonic()
                values += [r.value for r in batch if r.value is not None]
    finally:
        await consumer.stop()
    return values


async def test_cli_over_sasl_scram_with_password_file_scores_every_answer_exactly_once(
    kafka_sasl: SecuredKafka, kafka_sasl_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_sasl_topic(partitions=3)
    results = await kafka_sasl_topic(partitions=1)
    sent = _answers(v1=18, v2=6)
    expected = await expected_verdicts(sent)
    trace_ids = await _produce(kafka_sasl, topic, sent, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    password = kafka_sasl.password_file.read_text().strip()
    # The operator's file, with the trailing newline `echo` leaves: it must be stripped.
    password_file = tmp_path / "kafka.password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)

    port = free_port()
    log_path = tmp_path / "run.log"
    flags = _sasl_flags(kafka_sasl, topic, port, password_file)
    flags += ["--results-topic", results]
    proc = _citemon(flags, log_path)
    metrics = ""
    try:

        def scored() -> bool:
            nonlocal metrics
            assert proc.poll() is None, log_path.read_text()[-3000:]
            metrics = _metrics_text(port)
            return _claims(metrics) == expected

        await wait_for(scored, SCORE_TIMEOUT_S, f"claims {expected}", step_s=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
    log = log_path.read_text()
    assert code == 0, log[-3000:]
    assert f"{len(sent)} answers scored" in log
    # Results went out in Kafka transactions: the broker's markers use its own SASL login.
    rows = [json.loads(v) for v in await _read_committed(kafka_sasl, results)]
    assert sorted(r["trace_id"] for r in rows) == sorted(trace_ids)
    per_version: dict[str, Counter[str]] = {}
    for row in rows:
        per_version.setdefault(row["version"], Counter()).update(
            c["verdict"] for c in row["claims"]
        )
    assert per_version == expected
    assert "SASL_PLAINTEXT" in log  # the settings line was logged …
    assert password not in log  # … without the password, even at DEBUG
    assert password not in metrics


async def test_cli_with_a_wrong_password_exits_2_naming_the_broker(
    kafka_sasl: SecuredKafka, kafka_sasl_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_sasl_topic(partitions=1)
    real = kafka_sasl.password_file.read_text().strip()
    wrong = real[::-1]  # same length and alphabet: only the value is wrong
    password_file = tmp_path / "kafka.password"
    password_file.write_text(wrong)

    log_path = tmp_path / "run.log"
    started = time.monotonic()
    proc = _citemon(_sasl_flags(kafka_sasl, topic, free_port(), password_file), log_path)
    try:
        code = await asyncio.to_thread(proc.wait, FAIL_FAST_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    took_s = time.monotonic() - started
    out = log_path.read_text()
    assert code == 2, out[-3000:]
    assert took_s < FAIL_FAST_S
    last = out.strip().splitlines()[-1]
    assert last.startswith("citemon: error: cannot connect to Kafka at 127.0.0.1:"), last
    assert kafka_sasl.bootstrap in last
    # Why it could not: the broker's verdict, as the Kafka client logged it.
    assert "SaslAuthenticationFailed" in out
    assert "invalid credentials" in out
    assert wrong not in out
    assert real not in out


async def test_sasl_ssl_verified_by_cafile_with_password_from_env(
    kafka_sasl: SecuredKafka,
    kafka_sasl_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await kafka_sasl_topic(partitions=2)
    sent = _answers(v1=12, v2=4)
    expected = await expected_verdicts(sent)
    await _produce(kafka_sasl, topic, sent, "SASL_SSL", "SCRAM-SHA-512")
    password = kafka_sasl.password_file.read_text().strip()
    monkeypatch.setenv("CITEMON_KAFKA_PASSWORD", password)
    caplog.set_level(logging.DEBUG)
    settings = settings_for(
        kafka_sasl.ssl_bootstrap,
        topic,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        kafka_username=kafka_sasl.username,
        ssl_cafile=kafka_sasl.ssl_cafile,
    )
    assert settings.kafka_password is not None  # from the environment
    async with run_monitor(settings) as monitor:
        await wait_for(
            lambda: verdicts_by_version(monitor.registry) == expected,
            SCORE_TIMEOUT_S,
            f"claims {expected}",
        )
        metrics = generate_latest(monitor.registry).decode()
    assert monitor.task.result().answers_committed == len(sent)
    assert "SASL_SSL" in caplog.text
    assert password not in caplog.text
    assert password not in metrics


async def test_sasl_ssl_refuses_a_broker_the_cafile_does_not_vouch_for(
    kafka_sasl: SecuredKafka, kafka_sasl_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Without ``--ssl-cafile`` the system CAs are used, which never signed the test broker:
    the connection must fail, so TLS really authenticates the broker."""
    topic = await kafka_sasl_topic(partitions=1)
    settings = settings_for(
        kafka_sasl.ssl_bootstrap,
        topic,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        kafka_username=kafka_sasl.username,
        kafka_password_file=kafka_sasl.password_file,
    )
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable, match=kafka_sasl.ssl_bootstrap):
        async with run_monitor(settings):
            pass
    assert time.monotonic() - started < FAIL_FAST_S
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
