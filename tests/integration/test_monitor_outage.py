"""A judge that returns 503 for a while: lag rises, nothing is lost, everything is scored after."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from citemon.core.records import Verdict
from citemon.engine.scoring import Scorer
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    publish,
    run_monitor,
    settings_for,
    verdicts_by_version,
    wait_for,
)
from tests.judge_server import Fault, JudgeServer, content_word_rule

OUTAGE_S = 4.0


class _RuleJudge:
    """The judge server's own rule, offline: what the monitor must count once the judge is back."""

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        ok, reason = content_word_rule(claim, passages)
        return Verdict(entailed=ok, reason=reason)


def _lag(mon) -> int:  # type: ignore[no-untyped-def]
    return int(metric_sum(mon.registry, "citemon_consumer_lag"))


async def test_judge_outage_holds_the_line_then_scores_everything(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    async with JudgeServer() as judge:
        judge.script(Fault.status(503), forever=True)
        settings = settings_for(
            kafka_bootstrap,
            topic,
            (
                "--judge", "http", "--judge-base-url", judge.base_url,
                "--judge-retries", "1", "--judge-timeout", "2", "--judge-concurrency", "4",
            ),
            max_inflight_answers=8,
            answer_retry_backoff_s=0.2,
            answer_retry_backoff_max_s=0.5,
        )  # fmt: skip
        async with run_monitor(settings) as mon:
            first = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 30, False)])
            await wait_for(lambda: mon.pipeline.gate.down, 15, "the gate to see the outage")
            await wait_for(lambda: _lag(mon) >= 30, 10, "lag to show the held answers")
            second = await asyncio.to_thread(
                publish, kafka_bootstrap, topic, [("v2", 30, True)], seed=5
            )
            await wait_for(lambda: _lag(mon) >= 60, 10, "lag to grow")
            await asyncio.sleep(OUTAGE_S)
            # Held, not degraded: nothing recorded, work capped, the judge probed, not hammered.
            assert metric_sum(mon.registry, "citemon_answers_total") == 0
            assert mon.pipeline.inflight <= settings.max_inflight_answers
            assert mon.pipeline.paused
            errors = metric_sum(mon.registry, "citemon_judge_requests_total", outcome="error")
            assert errors > 0
            attempts_during = judge.attempts()
            assert attempts_during < 200, attempts_during  # probes with backoff, not a storm
            judge.reset()  # the judge is back
            await wait_for(
                lambda: metric_sum(mon.registry, "citemon_answers_total") >= 60, 30, "all scored"
            )
            await wait_for(lambda: _lag(mon) == 0, 10, "lag back to 0")
            expected = await expected_verdicts(first + second, Scorer(_RuleJudge()))
            assert metric_sum(mon.registry, "citemon_answers_total") == 60
            assert verdicts_by_version(mon.registry) == expected
            assert all(c["unjudged"] == 0 for c in verdicts_by_version(mon.registry).values())
            assert mon.pipeline.gate.outages >= 1
            assert mon.pipeline.stats.unjudged_after_retries == 0


async def test_answers_cut_off_by_the_drain_deadline_are_not_committed(
    kafka_bootstrap: str, kafka_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CITEMON_TEST_JUDGE_DELAY_S", "0.3")
    topic = await kafka_topic(partitions=2)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 40, False)])
    settings = settings_for(
        kafka_bootstrap,
        topic,
        ("--judge", "tests.integration.slow_judge:factory"),
        max_inflight_answers=6,
        drain_timeout_s=0.05,
    )
    async with run_monitor(settings) as mon:
        await wait_for(lambda: metric_sum(mon.registry, "citemon_answers_total") >= 3, 30, "3")
    stats = mon.task.result()
    first = int(metric_sum(mon.registry, "citemon_answers_total"))
    assert stats.cancelled_at_drain > 0  # the deadline really cut answers off
    assert first == stats.answers_committed < len(sent)
    # The next run scores exactly what the first did not commit: nothing lost, nothing twice.
    async with run_monitor(settings) as mon2:
        await asyncio.wait_for(mon2.pipeline.caught_up(), 90)  # the rest, committed
        assert metric_sum(mon2.registry, "citemon_answers_total") == len(sent) - first
