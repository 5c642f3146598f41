"""``citemon run``'s self-checks on the real broker: the shuffle canary and corrected accuracy.

Ground truth as in ``test_monitor_e2e``: the fake RAG service's answers scored offline by the
same judge. The canary's trace IDs come from the results topic (the spans' own IDs), so the
test predicts exactly which answers the canary takes, what it counts, and the gauge's value.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from citemon.checks.shuffle_probe import probe_selected, shuffled_check
from citemon.core.calibration import Calibration, corrected_accuracy
from citemon.core.probe import ProbeCounts, cited_counts, probe_sensitivity
from citemon.core.records import AnswerRecord
from citemon.core.tally import Tally
from citemon.engine.claims import extract_claims
from citemon.engine.scoring import Scorer
from citemon.judges.lexical import LexicalJudge
from citemon.metrics import CITED_VERDICTS
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    publish,
    read_topic,
    run_monitor,
    settings_for,
    verdicts_by_version,
    wait_for,
)

LABELS = {"service": "support-bot", "environment": "demo"}
CALIB = Calibration(judge="lexical", tp=90, fn=10, tn=75, fp=25)  # sens 0.90, spec 0.75


def _content(claims: list[Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((c["text"], tuple(c["cited_ids"])) for c in claims)


def _citation_sets(record: AnswerRecord) -> int:
    return len({tuple(c.cited_ids) for c in extract_claims(record) if c.cited_ids})


def _canary_counts(registry: Any) -> Counter[str]:
    out: Counter[str] = Counter()
    for outcome in ("scored", "skipped", "failed", "dropped"):
        out[outcome] = int(
            metric_sum(registry, "citemon_judge_canary_answers_total", outcome=outcome)
        )
    return out


async def test_lexical_canary_and_corrected_accuracy(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=1)
    plan = [("v1", 60, False), ("v2", 30, True)]
    n = sum(k for _, k, _ in plan)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, plan, seed=2)
    expected = await expected_verdicts(sent)
    calib_path = tmp_path / "lexical.calibration.json"
    CALIB.save(calib_path)
    settings = settings_for(
        kafka_bootstrap,
        topic,
        results_topic=results,
        calibration=calib_path,
        probe_rate=0.5,
    )
    async with run_monitor(settings) as mon:
        await wait_for(
            lambda: metric_sum(mon.registry, "citemon_answers_total") >= n, 30, "all answers"
        )
        # Results are produced with the commit, before the counters move: all are there.
        bodies = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, results)]
        assert len(bodies) == n
        by_content = {}
        scorer = Scorer(LexicalJudge())
        for record in sent:
            score = await scorer.score(record)
            by_content[_content([c.model_dump() for c in score.claims])] = record
        picked = [b for b in bodies if probe_selected(b["trace_id"], 0.5)]
        want = Counter[str]()
        orig, shuf = Tally(), Tally()
        for body in picked:
            record = by_content[_content(body["claims"])].model_copy(
                update={"trace_id": body["trace_id"]}
            )
            got = await shuffled_check(scorer, record)
            if got is None:
                assert _citation_sets(record) < 2
                want["skipped"] += 1
                continue
            want["scored"] += 1
            real = cited_counts(await scorer.score(record))
            orig, shuf = orig + real, shuf + got
        # A fair share of answers, and both kinds: v2 cites one passage everywhere (skipped).
        assert 0.3 * n < len(picked) < 0.7 * n
        assert want["scored"] >= 15 and want["skipped"] >= 5
        # Every answer committed and no probe in flight: every probe has been counted.
        await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        assert _canary_counts(mon.registry) == want | {"failed": 0, "dropped": 0}
        assert mon.pipeline.metrics.probe_totals() == ProbeCounts(orig, shuf)
        sensitivity = probe_sensitivity(orig, shuf)
        assert sensitivity is not None and sensitivity > 0.8  # the lexical judge reads passages
        assert metric_sum(mon.registry, "citemon_judge_canary_sensitivity") == sensitivity

        # The canary's re-checks are in no quality metric: the verdicts are exactly offline's.
        assert verdicts_by_version(mon.registry) == expected
        assert metric_sum(mon.registry, "citemon_answers_total") == n

        # Corrected accuracy: Rogan–Gladen of the very counts behind citemon_citation_accuracy.
        for version, verdicts in expected.items():
            correct, cited = verdicts["correct"], sum(verdicts[v] for v in CITED_VERDICTS)
            labels = {**LABELS, "version": version}
            accuracy = mon.registry.get_sample_value("citemon_citation_accuracy", labels)
            assert accuracy == correct / cited
            point = corrected_accuracy(correct, cited, CALIB)
            assert point is not None
            got_corrected = mon.registry.get_sample_value(
                "citemon_citation_accuracy_corrected", labels
            )
            assert got_corrected == point[0]
            assert got_corrected == min(1.0, max(0.0, (accuracy + 0.75 - 1) / (0.90 + 0.75 - 1)))
        # v1 mostly right, v2 mostly wrong, and the correction spreads them further apart.
        v1 = mon.registry.get_sample_value("citemon_citation_accuracy", {**LABELS, "version": "v1"})
        v1c = mon.registry.get_sample_value(
            "citemon_citation_accuracy_corrected", {**LABELS, "version": "v1"}
        )
        assert v1 is not None and v1c is not None and v1c > v1 > 0.8


async def test_a_blind_judge_has_canary_sensitivity_zero(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    plan = [("v1", 30, False), ("v2", 10, True)]
    n = sum(k for _, k, _ in plan)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, plan, seed=3)
    shufflable = sum(_citation_sets(r) >= 2 for r in sent)
    assert shufflable >= 20
    settings = settings_for(
        kafka_bootstrap, topic, ("--judge", "tests.oracles:yes_judge"), probe_rate=1.0
    )
    async with run_monitor(settings) as mon:
        await wait_for(
            lambda: sum(_canary_counts(mon.registry).values()) >= n, 30, "every answer's canary"
        )
        assert _canary_counts(mon.registry) == {
            "scored": shufflable,
            "skipped": n - shufflable,
            "failed": 0,
            "dropped": 0,
        }
        totals = mon.pipeline.metrics.probe_totals()
        orig_correct, orig_cited = totals.original.correct, totals.original.cited
        shuf_correct, shuf_cited = totals.shuffled.correct, totals.shuffled.cited
        assert orig_cited > 2 * shufflable  # several cited claims per answer
        assert orig_correct == orig_cited == shuf_correct == shuf_cited  # "yes" to everything
        assert metric_sum(mon.registry, "citemon_judge_canary_sensitivity") == 0.0
        # No calibration: no corrected series at all (absent, not a made-up value).
        text = "\n".join(
            s.name for m in mon.registry.collect() for s in m.samples if "corrected" in s.name
        )
        assert text == ""
