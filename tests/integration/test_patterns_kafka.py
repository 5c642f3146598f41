"""A fake RAG service with each citation bug, through the real shim and KafkaSpanExporter to a
real broker, scored by ``citemon run``: each deploy's misattributions counted under its pattern
in ``citemon_misattributions_total`` and carried by the claims of the results records."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from citemon.core.records import PATTERNS
from citemon_instrumentation import KafkaSpanExporter, record_answer
from tests.buggy_rag import BUGS, Planted, buggy_answers, span_passages
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    metric_sum,
    read_topic,
    run_monitor,
    settings_for,
    wait_for,
)

PER_BUG = 12


def _ship(bootstrap: str, topic: str, answers: dict[str, list[Planted]]) -> None:
    """Each bug is its own deploy (service.version = the bug's name), as a team would ship it."""
    for bug, planted in answers.items():
        resource = Resource.create(
            {"service.name": "buggy-rag", "service.version": bug,
             "deployment.environment.name": "test"}
        )  # fmt: skip
        provider = TracerProvider(resource=resource)
        exporter = KafkaSpanExporter(bootstrap, topic)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
        for p in planted:
            record_answer(
                question=p.record.question,
                answer=p.record.answer,
                passages=span_passages(p.record),
                tracer_provider=provider,
            )
        assert provider.force_flush(30_000)
        provider.shutdown()
        assert exporter.failed_spans == exporter.dropped_spans == 0


async def test_each_bug_is_counted_under_its_pattern(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=1)
    answers = {bug: list(buggy_answers(bug, PER_BUG, seed=11)) for bug in BUGS}
    await asyncio.to_thread(_ship, kafka_bootstrap, topic, answers)
    settings = settings_for(
        kafka_bootstrap, topic, ("--judge", "tests.buggy_rag:planted_judge"),
        results_topic=results,
    )  # fmt: skip
    async with run_monitor(settings) as mon:
        r = mon.registry
        await wait_for(
            lambda: metric_sum(r, "citemon_answers_total") == PER_BUG * len(BUGS),
            60,
            "every planted answer scored",
        )
        for bug, pattern in BUGS.items():
            wrong = metric_sum(r, "citemon_claims_total", version=bug, verdict="misattributed")
            assert wrong >= PER_BUG, (bug, wrong)
            by_pattern = {
                p: metric_sum(r, "citemon_misattributions_total", version=bug, pattern=p)
                for p in PATTERNS
            }
            assert by_pattern == {p: (wrong if p == pattern else 0) for p in PATTERNS}, bug
    bodies = [json.loads(rec.value) for rec in await read_topic(kafka_bootstrap, results)]
    assert len(bodies) == PER_BUG * len(BUGS)
    seen = Counter(
        (b["version"], c.get("pattern"))
        for b in bodies
        for c in b["claims"]
        if c["verdict"] == "misattributed"
    )
    assert {pattern for (_, pattern) in seen} == set(BUGS.values())
    assert all(BUGS[version] == pattern for version, pattern in seen)
    # A claim that is not misattributed carries no pattern at all in the record.
    assert all(
        "pattern" not in c for b in bodies for c in b["claims"] if c["verdict"] != "misattributed"
    )
