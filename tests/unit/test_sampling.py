"""Sampling: the trace-ID decision is OpenTelemetry's, and the per-version budget holds."""

from __future__ import annotations

import random

import pytest
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

from citemon._service.answers import Sampler, TokenBucket, ratio_bound, trace_id_sampled


@pytest.mark.parametrize("rate", [0.0, 0.001, 0.1, 0.25, 0.5, 0.9, 0.999, 1.0])
def test_same_decision_as_opentelemetry_trace_id_ratio(rate: float) -> None:
    otel = TraceIdRatioBased(rate)
    sampler = Sampler(rate=rate)
    rng = random.Random(rate)
    ids = [rng.getrandbits(128) for _ in range(20_000)]
    # The bound's edges: IDs whose low 64 bits sit just around it.
    bound = ratio_bound(rate)
    ids += [(rng.getrandbits(64) << 64) | max(0, min(b, (1 << 64) - 1)) for b in (bound - 1, bound)]
    kept = 0
    for tid in ids:
        expected = (
            otel.should_sample(None, tid, "rag.answer").decision is Decision.RECORD_AND_SAMPLE
        )
        assert trace_id_sampled(tid, bound) is expected
        assert sampler.by_trace_id(f"{tid:032x}") is expected  # hex, as decoded spans carry it
        kept += expected
    assert bound == otel.bound
    if 0.0 < rate < 1.0:
        assert abs(kept / len(ids) - rate) < 0.02
    assert sampler.dropped_by_ratio == len(ids) - kept


def test_missing_or_bad_trace_id_is_kept_only_at_rate_one() -> None:
    assert Sampler(rate=1.0).by_trace_id(None)
    assert not Sampler(rate=0.99).by_trace_id(None)
    assert not Sampler(rate=0.5).by_trace_id("not-hex")
    with pytest.raises(ValueError):
        ratio_bound(1.5)


def test_budget_is_per_version_so_a_flood_does_not_starve_a_quiet_deploy() -> None:
    sampler = Sampler(budget_per_minute=60)
    t = 1_000.0
    flood = sum(sampler.by_budget("bot", "v1", t + i * 0.001) for i in range(1000))
    assert flood == 60  # one minute's burst, and nothing refilled in one second
    quiet = [sampler.by_budget("bot", "v2", t + 1) for _ in range(5)]
    assert quiet == [True] * 5
    assert sampler.dropped_by_budget == 940


def test_budget_refills_by_record_time_not_arrival() -> None:
    bucket = TokenBucket(capacity=10, rate_per_s=1.0, tokens=0.0, last_s=0.0)
    assert not bucket.take(0.5)
    assert bucket.take(1.0)  # one token after one second of record time
    assert not bucket.take(0.2)  # an earlier timestamp (another partition) refills nothing
    assert [bucket.take(100.0) for _ in range(11)].count(True) == 10  # capped at capacity


def test_a_backlog_replayed_at_once_is_sampled_as_live() -> None:
    # 10 answers/s for 10 minutes under a budget of 300/min: half pass, whenever it is consumed.
    sampler = Sampler(budget_per_minute=300)
    kept = sum(sampler.by_budget("bot", "v1", 5_000 + i / 10) for i in range(6000))
    assert kept == pytest.approx(300 + 3000, abs=2)  # the burst plus 5/s refill


def test_budget_keys_are_bounded() -> None:
    sampler = Sampler(budget_per_minute=1, max_keys=3)
    for v in range(10):
        assert sampler.by_budget("bot", f"v{v}", 0.0)
    assert len(sampler._buckets) == 3
    assert not sampler.by_budget("bot", "v9", 0.0)  # the newest still has its (empty) bucket
    assert Sampler(budget_per_minute=0).by_budget("bot", "v1", 0.0)  # 0 = no budget
