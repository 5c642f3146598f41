"""aiokafka's repeated errors are logged once, then counted (``citemon_kafka_client_errors_total``),
with one summary line per interval; citemon's own messages are never held back."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from citemon._metrics import Metrics
from citemon._service.lifecycle import RepeatedClientErrors, quiet_repeats


def _record(name: str, msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_the_first_of_each_message_passes_and_repeats_are_counted() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    now = [0.0]
    noise = RepeatedClientErrors(
        metrics.client_error_repeated, summary_every_s=60.0, clock=lambda: now[0]
    )
    missing = "Topic %s not found in cluster metadata"
    assert noise.filter(_record("aiokafka.cluster", missing, "t1"))
    passed = [noise.filter(_record("aiokafka.cluster", missing, "t1")) for _ in range(50)]
    assert passed == [False] * 50
    assert noise.filter(_record("aiokafka.cluster", missing, "t2"))  # another topic: said once
    assert noise.filter(_record("citemon._service.pipeline", "commit failed"))  # ours: always
    assert noise.filter(_record("citemon._service.pipeline", "commit failed"))
    assert noise.filter(_record("aiokafka.cluster", "refreshing", level=logging.INFO))
    value = registry.get_sample_value(
        "citemon_kafka_client_errors_total", {"logger": "aiokafka.cluster"}
    )
    assert value == 50
    now[0] = 61.0
    summary = _record("aiokafka.cluster", missing, "t1")
    assert noise.filter(summary)
    assert summary.getMessage() == (
        "Topic t1 not found in cluster metadata (and 51 more times in the last 61 s, not "
        "logged: citemon_kafka_client_errors_total)"
    )
    assert not noise.filter(_record("aiokafka.cluster", missing, "t1"))


def test_quiet_repeats_filters_the_root_handlers_for_the_block(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[str] = []
    log = logging.getLogger("aiokafka.consumer.fetcher")
    with quiet_repeats(counted.append):
        for _ in range(5):
            log.error("Unable to fetch %s", "x")
    texts = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert texts == ["Unable to fetch x"] and counted == [log.name] * 4
    log.error("Unable to fetch %s", "x")  # outside the block: as aiokafka logs it
    assert len([r for r in caplog.records if r.name == log.name]) == 2
