"""``citemon run --judge classifier`` on the real broker, against the TEI-shaped loopback server.

Ground truth: the fake RAG service's answers scored offline by the server's own rule (the share
of a claim's content words in the passages) at the calibration file's threshold, which the
monitor must apply: exact verdict counts per version, and judge metrics that count every
``/predict`` request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from citemon.core.calibration import Calibration
from citemon.engine.scoring import Scorer
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    publish,
    run_monitor,
    settings_for,
    verdicts_by_version,
)
from tests.integration.test_classifier_cli import ShareJudge
from tests.tei_server import TEIServer

PLAN = [("v1", 40, False), ("v2", 20, True)]
N = sum(n for _, n, _ in PLAN)
THRESHOLD = 0.9


async def test_run_applies_the_calibrated_threshold_and_counts_judge_requests(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_topic(partitions=2)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, PLAN, seed=3)
    expected = await expected_verdicts(sent, Scorer(ShareJudge(THRESHOLD)))
    default = await expected_verdicts(sent, Scorer(ShareJudge(0.5)))
    assert expected != default  # the threshold changes verdicts, so applying it is visible
    calib = tmp_path / "calib.json"
    Calibration(judge="classifier", tp=45, fn=5, tn=40, fp=10, threshold=THRESHOLD).save(calib)
    async with TEIServer(max_client_batch_size=2) as server:
        flags = [
            "--judge", "classifier", "--judge-base-url", server.base_url,
            "--judge-concurrency", "3", "--judge-batch-pairs", "16",
        ]  # fmt: skip
        settings = settings_for(kafka_bootstrap, topic, flags, calibration=calib)
        async with run_monitor(settings) as mon:
            await asyncio.wait_for(mon.pipeline.caught_up(), 90)  # every answer committed
            assert verdicts_by_version(mon.registry) == expected
            refused = sum(1 for n in server.batch_sizes() if n > 2)
            ok = metric_sum(mon.registry, "citemon_judge_requests_total", outcome="ok")
            failed = metric_sum(mon.registry, "citemon_judge_requests_total", outcome="error")
            assert ok + failed == len(server.requests) and ok > 0
            # Only batches sized before the server's cap of 2 was learned were refused, each sent
            # again in smaller requests (the exact verdicts above: nothing lost).
            assert failed == refused > 0
            assert metric_sum(mon.registry, "citemon_judge_inflight_limit") == 3
            assert server.max_concurrent <= 3
            assert metric_sum(mon.registry, "citemon_judge_sensitivity") == 0.9
