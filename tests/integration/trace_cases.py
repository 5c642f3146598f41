"""The harness the trace-test modules share (test_dialects, test_native_citations, test_agents,
test_agents_js): their traces are made once by a generator in a child process, then scored
offline (``citemon score --input-format otlp-json``) and through Kafka (``citemon run``), each
specimen case to the specimen's exact scores (docs/design.md): accuracy 0.33, coverage 1.00,
faithfulness 1.00, 2 misattributed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry

from citemon.cli import main
from tests.conftest import REPO
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    metric_sum,
    read_topic,
    run_monitor,
    settings_for,
    wait_for,
)
from tests.otlp_json import otlp_json

#: The judge that knows which specimen passage says what.
JUDGE = "tests.oracles:specimen_text_judge"
#: Seconds a generator may take to import every framework and make every trace.
GENERATE_TIMEOUT_S = 300
#: The specimen's verdicts: the first claim correct, the other two misattributed.
SPECIMEN_VERDICTS = {
    "correct": 1, "misattributed": 2, "multi_hop": 0, "unsupported": 0,
    "dangling": 0, "unjudged": 0, "uncited": 0,
}  # fmt: skip
#: Every misattribution pattern the summary counts.
PATTERN_NAMES = ("off_by_one", "first_retrieved", "previous_citation", "same_document", "other")


def generate(
    tmp_path_factory: pytest.TempPathFactory,
    label: str,
    command: Sequence[str],
    *cases: str,
    cwd: Path = REPO,
    timeout_s: float = GENERATE_TIMEOUT_S,
) -> Path:
    """Run ``command OUT [CASE…]`` (a trace generator) into a fresh directory and return it.

    Every instrumentation patches its framework process-wide, so the traces are made in a
    child process of their own, never in pytest's."""
    out = tmp_path_factory.mktemp(label)
    started = time.monotonic()
    done = subprocess.run(
        [*command, str(out), *cases],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"{label} made in {time.monotonic() - started:.1f} s")  # shown with -s
    return out


def read_traces(out: Path, suffix: str = "pb") -> dict[str, bytes]:
    """Every ``<case>.<suffix>`` a generator wrote, by case."""
    return {p.stem: p.read_bytes() for p in out.glob(f"*.{suffix}")}


def traces_fixture(generator: str, name: str) -> Any:
    """A module fixture ``name``: every case's trace (OTLP protobuf) that ``python -m
    tests.integration.<generator> OUT`` writes, made once per module."""

    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
        command = [sys.executable, "-m", f"tests.integration.{generator}"]
        return read_traces(generate(tmp_path_factory, generator, command))

    return fixture


def score_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payloads: list[bytes], *flags: str
) -> tuple[int, Any, str]:
    """``citemon score`` of ``payloads`` as one OTLP JSON-lines file, with the specimen's
    judge: the exit code, stdout (parsed when ``--format`` is among ``flags``) and stderr.

    A protobuf request is converted as the Collector's file exporter writes it; an OTLP/JSON
    one (the JavaScript SDK's serialiser writes one line per request) is taken as is."""
    src = tmp_path / "traces.jsonl"
    lines = (
        p.rstrip(b"\n") if p.startswith(b"{") else otlp_json(p).encode("utf-8") for p in payloads
    )
    src.write_bytes(b"".join(line + b"\n" for line in lines))
    code = main(["score", str(src), "--input-format", "otlp-json", "--judge", JUDGE, *flags])
    captured = capsys.readouterr()
    out = json.loads(captured.out) if "--format" in flags else captured.out
    return code, out, captured.err


def explain_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: bytes, *flags: str
) -> list[str]:
    """``citemon score --explain-input`` of one trace: its lines."""
    _, out, _ = score_offline(tmp_path, capsys, [payload], "--explain-input", *flags)
    lines: list[str] = out.splitlines()
    return lines


def score_specimen(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    payload: bytes,
    patterns: Sequence[str],
    *flags: str,
) -> dict[str, Any]:
    """Score one trace (``--format json``, and ``flags``): exit 0, nothing on stderr, and the
    specimen exactly (:func:`assert_specimen`). Returns its one answer for the caller's own
    checks."""
    code, out, err = score_offline(tmp_path, capsys, [payload], "--format", "json", *flags)
    assert (code, err) == (0, "")
    assert_specimen(out, patterns)
    return dict(out["answers"][0])


def assert_specimen(out: dict[str, Any], patterns: Sequence[str]) -> None:
    """``score --format json`` scored one answer, the specimen, exactly; the wrong citations'
    ``patterns`` in claim order."""
    summary = out["summary"]
    assert summary["answers"] == 1
    assert summary["citation_accuracy"] == 0.3333
    assert summary["faithfulness"] == 1.0
    assert summary["citation_coverage"] == 1.0
    assert summary["verdicts"] == SPECIMEN_VERDICTS
    claims = out["answers"][0]["claims"]
    assert [c.get("pattern") for c in claims] == [None, *patterns]
    assert summary["misattribution_patterns"] == {p: list(patterns).count(p) for p in PATTERN_NAMES}
    return claims


def trace_id(payload: bytes) -> str:
    """The trace ID of a request of one trace, OTLP/JSON or protobuf."""
    if payload.startswith(b"{"):
        spans = json.loads(payload)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        return str(spans[0]["traceId"])
    req = ExportTraceServiceRequest.FromString(payload)
    return req.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()


async def publish_traces(bootstrap: str, topic: str, traces: Mapping[str, bytes]) -> dict[str, str]:
    """Each trace one message keyed by its trace ID, as the Collector's kafka exporter writes
    them, in order; each case's trace ID."""
    ids = {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for case, payload in traces.items():
            ids[case] = trace_id(payload)
            await producer.send_and_wait(topic, payload, key=ids[case].encode())
    finally:
        await producer.stop()
    return ids


@dataclass
class KafkaLeg:
    """A monitor caught up with the traces published for it (:func:`kafka_leg`)."""

    bootstrap: str
    registry: CollectorRegistry
    #: Each case's trace ID.
    trace_ids: dict[str, str]
    results_topic: str | None

    async def results(self) -> dict[str, Any]:
        """The results records, by trace ID."""
        assert self.results_topic is not None, "kafka_leg(..., results=True) writes results"
        records = await read_topic(self.bootstrap, self.results_topic)
        return {b["trace_id"]: b for b in (json.loads(m.value) for m in records)}


@asynccontextmanager
async def kafka_leg(
    bootstrap: str,
    kafka_topic: TopicFactory,
    traces: Mapping[str, bytes],
    *,
    answers: int,
    outcomes: Mapping[str, int],
    flags: Sequence[str] = ("--judge", JUDGE),
    partitions: int = 2,
    results: bool = False,
) -> AsyncIterator[KafkaLeg]:
    """``traces`` published on a new topic of ``partitions`` (:func:`publish_traces`), and one
    ``citemon run`` monitor (1 s trace window; a results topic of its own with ``results``)
    entered once it has scored ``answers`` answers and counted the traces of each of
    ``outcomes``, for the caller's assertions while it still runs."""
    topic = await kafka_topic(partitions=partitions)
    fields: dict[str, Any] = {"trace_window_s": 1.0}
    if results:
        fields["results_topic"] = await kafka_topic(partitions=1)
    trace_ids = await publish_traces(bootstrap, topic, traces)

    def caught_up(r: CollectorRegistry) -> bool:
        return metric_sum(r, "citemon_answers_total") == answers and all(
            metric_sum(r, "citemon_traces_total", outcome=o) == n for o, n in outcomes.items()
        )

    async with run_monitor(settings_for(bootstrap, topic, flags, **fields)) as mon:
        what = f"{answers} answer(s) scored and the traces counted by outcome, {dict(outcomes)}"
        await wait_for(lambda: caught_up(mon.registry), 60, what)
        yield KafkaLeg(bootstrap, mon.registry, trace_ids, fields.get("results_topic"))


def assert_specimen_metrics(
    registry: CollectorRegistry, answers: int, patterns: Mapping[str, int]
) -> None:
    """The monitor scored ``answers`` specimens exactly: one claim correct, two misattributed
    (``patterns`` counts them by pattern) and all three faithful each; no dead letters."""
    r = registry
    assert metric_sum(r, "citemon_claims_total", verdict="correct") == answers
    assert metric_sum(r, "citemon_claims_total", verdict="misattributed") == 2 * answers
    for pattern in PATTERN_NAMES:
        want = patterns.get(pattern, 0)
        assert metric_sum(r, "citemon_misattributions_total", pattern=pattern) == want, pattern
    assert metric_sum(r, "citemon_faithful_claims_total") == 3 * answers
    assert metric_sum(r, "citemon_dead_letters_total") == 0
