"""``citemon inspect`` (the real CLI, in a subprocess) against the real results topic on Kafka.

The topic is written by a real ``citemon run`` (transactions with the input offsets) scoring
answers the real shim exported; ground truth is what that topic holds, read independently with a
``read_committed`` consumer, and the verdicts the same judge gives offline. Also: an aborted
transaction's records are never shown, a bad record is reported by partition/offset and skipped,
and ``--follow`` prints a record committed after it started and stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from citemon._commands._inspection import SEVERITY
from citemon._demo.data import specimen
from citemon._demo.service import _resource
from citemon._engine.excerpts import excerpt_of
from citemon._engine.scoring import Scorer
from citemon.judges.lexical import LexicalJudge
from citemon_instrumentation import KafkaSpanExporter, record_answer
from tests.conftest import REPO
from tests.integration.conftest import SecuredKafka, TopicFactory
from tests.integration.monitor_support import (
    PYTHON,
    expected_verdicts,
    metric_sum,
    publish,
    read_topic,
    run_monitor,
    settings_for,
    wait_for,
)

PLAN = [("v1", 30, False), ("v2", 20, True)]
N = sum(n for _, n, _ in PLAN)
EMAIL = "audit-team@example.com"
REDACTED_SERVICE = "redact-bot"
Row = tuple[str, str, int]  # (trace_id, verdict, sentence)


def inspect(bootstrap: str, results: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            PYTHON,
            "-m",
            "citemon.cli",
            "inspect",
            "--bootstrap-servers",
            bootstrap,
            "--results-topic",
            results,
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def rows(found: Sequence[dict[str, Any]]) -> Counter[Row]:
    return Counter((f["trace_id"], f["verdict"], f["sentence"]) for f in found)


def claims_of(records: Sequence[Any], keep: Any = lambda r, b: True) -> Counter[Row]:
    out: Counter[Row] = Counter()
    for r in records:
        body = json.loads(r.value)
        if keep(r, body):
            out.update((body["trace_id"], c["verdict"], c["sentence"]) for c in body["claims"])
    return out


def iso_ms(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def assert_worst_first(found: Sequence[dict[str, Any]]) -> None:
    keys = [(SEVERITY.index(f["verdict"]), f["timestamp"]) for f in found]
    for (rank_a, time_a), (rank_b, time_b) in itertools.pairwise(keys):
        assert rank_a < rank_b or (rank_a == rank_b and time_a >= time_b), (keys, found)


def publish_redacted(bootstrap: str, topic: str) -> None:
    """One specimen answer through the shim with a redact hook that removes an email address."""
    exporter = KafkaSpanExporter(bootstrap, topic)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=_resource("v1", "prod", REDACTED_SERVICE))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    record = specimen()
    passages = [
        {"id": p.id, "text": p.text + (f" Questions: {EMAIL}." if p.id == "p-3310" else "")}
        for p in record.passages
    ]
    record_answer(
        question=record.question,
        answer=record.answer,
        passages=passages,
        tracer_provider=provider,
        redact=lambda text: text.replace(EMAIL, "[email]"),
    )
    provider.shutdown()


async def test_inspect_reads_what_a_real_monitor_wrote(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=2)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, PLAN, seed=5)
    expected = await expected_verdicts(sent)
    specimen_claims = (await Scorer(LexicalJudge()).score(specimen())).claims
    settings = settings_for(kafka_bootstrap, topic, results_topic=results)
    async with run_monitor(settings) as mon:
        answers = lambda: metric_sum(mon.registry, "citemon_answers_total")  # noqa: E731
        await wait_for(lambda: answers() >= N, 60, "the plan's answers")
        # One more, committed later (the results then span at least two commit times), while
        # `inspect --follow` watches for its service: the monitor's commit reaches the tail.
        follower = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "citemon.cli", "inspect", "--bootstrap-servers", kafka_bootstrap,
            "--results-topic", results, "--follow", "--service", REDACTED_SERVICE,
            "--verdict", "all", "--format", "json",
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert follower.stdout is not None and follower.stderr is not None
            while "following" not in await _line(follower.stderr, 60, "the follow notice"):
                pass
            await asyncio.to_thread(publish_redacted, kafka_bootstrap, topic)
            await wait_for(lambda: answers() >= N + 1, 60, "the redacted answer")
            tailed = [
                json.loads(await _line(follower.stdout, 30, "the followed claims"))
                for _ in specimen_claims
            ]
            follower.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(follower.wait(), 15) == 0
        finally:
            if follower.returncode is None:
                follower.kill()
                await follower.wait()
    records = await read_topic(kafka_bootstrap, results)
    assert len(records) == N + 1
    (redacted_record,) = [r for r in records if json.loads(r.value)["service"] == REDACTED_SERVICE]
    assert rows(tailed) == claims_of([redacted_record])
    assert {f["source"] for f in tailed} == {
        f"{results}/{redacted_record.partition}/{redacted_record.offset}"
    }
    bodies = {json.loads(r.value)["trace_id"]: json.loads(r.value) for r in records}
    texts = {p.id: p.text for s in sent for p in s.passages}

    # Everything, worst first: exactly the topic's claims, and the verdicts scored offline.
    everything = lines(inspect(kafka_bootstrap, results, "--since", "10m", "--verdict", "all",
                               "--limit", "0", "--format", "json"))  # fmt: skip
    assert rows(everything) == claims_of(records)
    assert_worst_first(everything)
    per_version: dict[str, Counter[str]] = {}
    for f in everything:
        if f["service"] != REDACTED_SERVICE:
            per_version.setdefault(f["version"], Counter())[f["verdict"]] += 1
    assert per_version == expected
    assert {f["source"].rsplit("/", 2)[0] for f in everything} == {results}

    # The default (failed citations, 20 worst) is the head of that order among failures.
    failed = [f for f in everything if f["verdict"] in SEVERITY[:4]]
    default = inspect(kafka_bootstrap, results, "--format", "json")
    assert [(f["trace_id"], f["sentence"]) for f in lines(default)] == [
        (f["trace_id"], f["sentence"]) for f in failed[:20]
    ]
    assert f"{len(failed)} claim(s) matched" in default.stderr

    # The alert's filters: v2's misattributions, with the passage that should have been cited.
    v2 = lines(inspect(kafka_bootstrap, results, "--service", "support-bot", "--version", "v2",
                       "--environment", "demo", "--verdict", "misattributed", "--since", "30m",
                       "--limit", "0", "--format", "json"))  # fmt: skip
    assert len(v2) == expected["v2"]["misattributed"] > 0
    v2_expected = claims_of(records, lambda r, b: b["version"] == "v2")
    assert rows(v2) == Counter({k: n for k, n in v2_expected.items() if k[1] == "misattributed"})
    for f in v2:
        assert f["supported_by"] and not set(f["supported_by"]) & set(f["cited_ids"])
        assert set(f["excerpts"]) == set(f["cited_ids"]) | set(f["supported_by"])
        for pid, text in f["excerpts"].items():
            assert text == excerpt_of(texts[pid], 240)

    # The demo's v2 cites the first retrieved passage for every claim: each of its
    # misattributions is first_retrieved, in the results records and in inspect's first block.
    assert {f["pattern"] for f in v2} == {"first_retrieved"}
    assert all(
        c["pattern"] == "first_retrieved"
        for b in bodies.values() if b["version"] == "v2"
        for c in b["claims"] if c["verdict"] == "misattributed"
    )  # fmt: skip
    table = inspect(kafka_bootstrap, results, "--service", "support-bot", "--version", "v2",
                    "--environment", "demo", "--since", "30m", "--limit", "1")  # fmt: skip
    assert table.returncode == 0, table.stderr
    head = table.stdout.splitlines()
    assert head[0] == (
        f"why citations fail: support-bot v2 demo: {len(v2)} misattributed claim(s) by pattern"
    )
    assert head[1].split()[:3] == ["first_retrieved", str(len(v2)), "100%"]
    assert "owner: the prompt / the generator" in head[1]

    # The excerpts are the text after the shim's redaction hook: the address never got here.
    (redacted,) = [b for b in bodies.values() if b["service"] == REDACTED_SERVICE]
    assert "[email]" in redacted["excerpts"]["p-3310"]
    assert all(EMAIL.encode() not in r.value for r in records)

    # From an offset, the last N of each partition, a time window, one trace.
    from_3 = lines(inspect(kafka_bootstrap, results, "--offset", "3", "--verdict", "all",
                           "--limit", "0", "--format", "json"))  # fmt: skip
    assert rows(from_3) == claims_of(records, lambda r, b: r.offset >= 3)
    assert 0 < sum(rows(from_3).values()) < sum(claims_of(records).values())
    last_4 = lines(
        inspect(kafka_bootstrap, results, "--last", "4", "--verdict", "all", "--limit", "0",
                "--format", "json")
    )  # fmt: skip
    newest = {
        (r.partition, r.offset)
        for p in (0, 1)
        for r in sorted((x for x in records if x.partition == p), key=lambda x: x.offset)[-4:]
    }
    assert len(newest) == 8  # counted records, although each transaction's marker takes an offset
    assert rows(last_4) == claims_of(records, lambda r, b: (r.partition, r.offset) in newest)
    stamps = sorted({r.timestamp for r in records})  # one commit's records may share one
    assert len(stamps) >= 2
    lo = stamps[len(stamps) // 3]
    hi = stamps[min(len(stamps) - 1, max(2 * len(stamps) // 3, len(stamps) // 3 + 1))]
    window = lines(inspect(kafka_bootstrap, results, "--since", iso_ms(lo), "--until", iso_ms(hi),
                           "--verdict", "all", "--limit", "0", "--format", "json"))  # fmt: skip
    assert rows(window) == claims_of(records, lambda r, b: lo <= r.timestamp < hi)
    assert 0 < sum(rows(window).values()) < sum(claims_of(records).values())
    trace = next(iter(bodies))
    one = lines(inspect(kafka_bootstrap, results, "--trace-id", trace, "--verdict", "all",
                        "--format", "json"))  # fmt: skip
    assert rows(one) == claims_of(records, lambda r, b: b["trace_id"] == trace)

    # The table an on-call reads, with links to the tracing UI.
    table = inspect(kafka_bootstrap, results, "--version", "v2", "--limit", "2",
                    "--trace-url", "https://tempo.example/trace/{trace_id}")  # fmt: skip
    assert table.returncode == 0, table.stderr
    block, claims_shown = table.stdout.split("\n\n", 1)  # the patterns first, then the claims
    assert block.startswith("why citations fail: support-bot v2 demo:")
    assert claims_shown.startswith("MISATTRIBUTED ")
    assert table.stdout.count("    should cite p-") >= 2
    assert f"https://tempo.example/trace/{v2[0]['trace_id']}" in table.stdout
    assert "showing the 2 worst (--limit)" in table.stderr


async def test_aborted_transactions_are_never_shown_and_bad_records_are_named(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    results = await kafka_topic(partitions=1)
    body = json.dumps(
        {"service": "s", "version": "v", "environment": "e", "span_id": "1" * 16,
         "claims": [{"sentence": 0, "text": "t", "cited_ids": ["p"], "verdict": "unsupported"}]}
    )  # fmt: skip

    def value(trace: str) -> bytes:
        return body.replace('"service"', f'"trace_id":"{trace}","service"', 1).encode()

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"tx.{results}")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(results, value("a" * 32))
        with pytest.raises(RuntimeError, match="abort me"):
            async with producer.transaction():
                await producer.send(results, value("b" * 32))
                await producer.flush()  # on the log, uncommitted
                raise RuntimeError("abort me")
        async with producer.transaction():
            bad = await (await producer.send(results, b"not json"))
            await producer.send(results, value("d" * 32))
    finally:
        await producer.stop()
    everything = await read_topic(kafka_bootstrap, results, committed_only=False)
    assert b"b" * 32 in b"".join(r.value for r in everything)  # the aborted record is there
    done = inspect(kafka_bootstrap, results, "--offset", "0", "--format", "json", "--limit", "0")
    assert done.returncode == 1
    assert [json.loads(line)["trace_id"] for line in done.stdout.splitlines()] == [
        "d" * 32,
        "a" * 32,
    ]
    assert f"skipped {results}/0/{bad.offset}: not valid JSON" in done.stderr
    assert "1 bad record(s) skipped" in done.stderr


async def _line(stream: asyncio.StreamReader, timeout_s: float, what: str) -> str:
    try:
        line = await asyncio.wait_for(stream.readline(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from None
    assert line, f"the stream ended before {what}"
    return line.decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_follow_prints_a_new_committed_record_and_stops_on_a_signal(
    kafka_bootstrap: str, kafka_topic: TopicFactory, sig: signal.Signals
) -> None:
    results = await kafka_topic(partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"tx.{results}")
    await producer.start()

    async def commit(trace: str) -> None:
        record = {"trace_id": trace, "service": "s", "version": "v", "claims": [
            {"sentence": 0, "text": "t", "cited_ids": ["p"], "verdict": "misattributed",
             "supported_by": ["q"]}]}  # fmt: skip
        async with producer.transaction():
            await producer.send(results, json.dumps(record).encode(), key=trace.encode())

    proc: asyncio.subprocess.Process | None = None
    try:
        await commit("1" * 32)
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "citemon.cli", "inspect", "--bootstrap-servers", kafka_bootstrap,
            "--results-topic", results, "--follow", "--format", "json",
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(await _line(proc.stdout, 60, "the committed record"))
        assert first["trace_id"] == "1" * 32
        while "following" not in await _line(proc.stderr, 60, "the follow notice"):
            pass
        started = time.monotonic()
        await commit("2" * 32)
        second = json.loads(await _line(proc.stdout, 30, "the record committed while following"))
        assert second["trace_id"] == "2" * 32 and second["verdict"] == "misattributed"
        assert time.monotonic() - started < 30
        proc.send_signal(sig)
        code = await asyncio.wait_for(proc.wait(), 15)
        rest = (await proc.stderr.read()).decode()
        assert code == 0, rest
        assert "stopped; 2 claim(s) printed" in rest
        assert (await proc.stdout.read()) == b""
    finally:
        await producer.stop()
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_a_results_topic_that_does_not_exist_is_named(kafka_bootstrap: str) -> None:
    missing = f"citemon-test.no-such-results.{time.time_ns()}"
    done = inspect(kafka_bootstrap, missing)
    assert done.returncode == 2 and done.stdout == ""
    assert f"results topic {missing!r} does not exist at {kafka_bootstrap}" in done.stderr
    assert "Traceback" not in done.stderr


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


async def test_inspect_connects_over_sasl_ssl_as_run_does(
    kafka_sasl: SecuredKafka, kafka_sasl_topic: TopicFactory
) -> None:
    results = await kafka_sasl_topic(partitions=1)
    producer = AIOKafkaProducer(transactional_id=f"tx.{results}", **kafka_sasl.client_options())
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(
                results,
                json.dumps(
                    {
                        "trace_id": "5" * 32,
                        "claims": [
                            {"sentence": 0, "text": "t", "cited_ids": ["p"], "verdict": "dangling"}
                        ],
                    }
                ).encode(),
            )
    finally:
        await producer.stop()  # fmt: skip
    password = kafka_sasl.password_file.read_text().strip()
    env = {
        **os.environ,
        "CITEMON_SECURITY_PROTOCOL": "SASL_SSL",
        "CITEMON_SASL_MECHANISM": "SCRAM-SHA-512",
        "CITEMON_KAFKA_USERNAME": kafka_sasl.username,
        "CITEMON_KAFKA_PASSWORD": password,
        "CITEMON_SSL_CAFILE": str(kafka_sasl.ssl_cafile),
    }
    argv = [PYTHON, "-m", "citemon.cli", "--log-level", "DEBUG", "inspect", "--bootstrap-servers",
            kafka_sasl.ssl_bootstrap, "--results-topic", results, "--format", "json"]  # fmt: skip
    done = await asyncio.to_thread(_run, argv, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(line)["trace_id"] for line in done.stdout.splitlines()] == ["5" * 32]
    assert password not in done.stdout + done.stderr  # not even at DEBUG
    wrong = await asyncio.to_thread(_run, argv, {**env, "CITEMON_KAFKA_PASSWORD": "x" + password})
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert f"cannot connect to Kafka at {kafka_sasl.ssl_bootstrap}" in wrong.stderr
    assert password not in wrong.stderr


async def test_the_results_reader_connects_through_the_injected_clients(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """``ResultsReader`` makes its consumer with the same ``KafkaClients`` the monitor takes
    (one place that knows how citemon reads: ``read_committed``, no group), so a test or an
    embedding application hands in its own."""
    from citemon._commands._results import ResultsReader, Start
    from citemon._service.kafka import KafkaClients
    from citemon._service.settings import Settings

    class Recording(KafkaClients):
        def __init__(self) -> None:
            self.made: list[dict[str, Any]] = []

        def consumer(self, **options: Any) -> Any:
            self.made.append(options)
            return super().consumer(**options)

    results = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(results, b"{}")
    finally:
        await producer.stop()
    clients = Recording()
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    async with ResultsReader(settings, results, clients=clients) as reader:
        await reader.seek(Start("offset", 0))
        values = [r.value async for batch in reader.batches(asyncio.Event()) for r in batch]
    assert values == [b"{}"]
    (made,) = clients.made
    assert (made["group_id"], made["isolation_level"]) == (None, "read_committed")
    assert made["client_id"] == f"{settings.client_id}-inspect"
