"""The metrics module: exact counts from scored answers, windowed gauges, caps, the endpoint."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from citemon._core.errors import INVALID_REPLY_CAUSES
from citemon._core.judge import JudgeObserver
from citemon._core.records import AnswerScore, ClaimResult, VerdictName
from citemon._metrics import JUDGE_OUTCOMES, SPAN_OUTCOMES, Metrics, MetricsServer

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SVE = {"service": "support-bot", "version": "v1", "environment": "prod"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claim(
    verdict: VerdictName,
    ids: tuple[str, ...] = ("p-1",),
    *,
    faithful: bool | None = True,
    overlap: bool = False,
    irrelevant: tuple[str, ...] = (),
) -> ClaimResult:
    return ClaimResult(
        sentence=0,
        text="claim",
        cited_ids=list(ids) if verdict != "uncited" else [],
        verdict=verdict,
        faithful=faithful,
        overlap=overlap,
        irrelevant_ids=list(irrelevant),
    )


def answer(*claims: ClaimResult, version: str = "v1", **kw: str) -> AnswerScore:
    labels = {**SVE, "version": version, **kw}
    return AnswerScore(id="a", trace_id=TRACE, claims=list(claims), **labels)


def specimen() -> AnswerScore:
    """The specimen (docs/design.md): 1 correct, 2 misattributed (one an overlap), all faithful."""
    return answer(
        claim("correct", ("p-3310",)),
        claim("misattributed", ("p-3310",)),
        claim("misattributed", ("p-3312",), overlap=True),
    )


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_specimen_counts_exactly() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_answer(specimen())
    assert value(reg, "citemon_answers_total", **SVE) == 1
    assert value(reg, "citemon_claims_total", **SVE, verdict="correct") == 1
    assert value(reg, "citemon_claims_total", **SVE, verdict="misattributed") == 2
    # Every verdict's series exists from the first answer so PromQL ratios see the whole mix.
    assert value(reg, "citemon_claims_total", **SVE, verdict="dangling") == 0
    assert value(reg, "citemon_faithful_claims_total", **SVE) == 3
    assert value(reg, "citemon_cited_ids_total", **SVE) == 3
    assert value(reg, "citemon_overlap_misattributions_total", **SVE) == 1
    assert value(reg, "citemon_irrelevant_citations_total", **SVE) == 0
    assert value(reg, "citemon_citation_accuracy", **SVE) == pytest.approx(1 / 3)
    assert value(reg, "citemon_citation_coverage", **SVE) == 1.0
    assert value(reg, "citemon_faithfulness", **SVE) == 1.0
    assert value(reg, "citemon_ids_per_claim", **SVE) == 1.0


def test_unjudged_and_uncited_claims_move_only_their_own_ratios() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_answer(
        answer(
            claim("correct", ("p-1", "p-2", "p-3"), irrelevant=("p-3",)),
            claim("unsupported", ("p-2",), faithful=False),
            claim("uncited", faithful=True),
            claim("uncited", faithful=False),
            claim("unjudged", ("p-9", "p-8"), faithful=None),
        )
    )
    assert value(reg, "citemon_claims_total", **SVE, verdict="unjudged") == 1
    assert value(reg, "citemon_claims_total", **SVE, verdict="uncited") == 2
    # IDs over the two cited judged claims only (3 + 1); the unjudged claim's 2 IDs are out.
    assert value(reg, "citemon_cited_ids_total", **SVE) == 4
    assert value(reg, "citemon_irrelevant_citations_total", **SVE) == 1
    assert value(reg, "citemon_faithful_claims_total", **SVE) == 2
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.5
    assert value(reg, "citemon_citation_coverage", **SVE) == 0.5  # 2 cited of 4 judged
    assert value(reg, "citemon_faithfulness", **SVE) == 0.5
    assert value(reg, "citemon_ids_per_claim", **SVE) == 2.0


def test_window_slides_and_forgets_quiet_label_sets() -> None:
    reg = CollectorRegistry()
    clock = FakeClock()
    m = Metrics(reg, window_s=900.0, clock=clock)
    for _ in range(3):
        m.record_answer(answer(claim("correct")))
    clock.now += 600
    m.record_answer(answer(claim("misattributed"), claim("misattributed")))
    assert value(reg, "citemon_citation_accuracy", **SVE) == pytest.approx(3 / 5)
    clock.now += 360  # the first three are now 960 s old: out of a 900 s window
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.0
    clock.now += 900
    assert value(reg, "citemon_citation_accuracy", **SVE) is None  # absent, not a fake number
    # The counters never forget.
    assert value(reg, "citemon_claims_total", **SVE, verdict="correct") == 3


def test_versions_beyond_the_cap_fold_into_other_until_a_slot_goes_idle() -> None:
    reg = CollectorRegistry()
    clock = FakeClock()
    m = Metrics(reg, max_versions=2, version_idle_s=3600, clock=clock)
    for version in ("v1", "v2", "v3", "v4"):
        m.record_answer(answer(claim("correct"), version=version))
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "v2"}) == 1
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "other"}) == 2
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "v3"}) is None
    assert value(reg, "citemon_label_overflow_total", label="version") == 2
    # v1 and v2 go quiet for an hour; v5 arrives, takes v1's slot and v1's series go away.
    clock.now += 3600
    m.record_answer(answer(claim("correct"), version="v2"))
    m.record_answer(answer(claim("correct"), version="v5"))
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "v5"}) == 1
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "v1"}) is None
    assert value(reg, "citemon_claims_total", **{**SVE, "version": "v1"}, verdict="correct") is None
    assert value(reg, "citemon_answers_total", **{**SVE, "version": "v2"}) == 2


def test_missing_labels_are_unknown_and_services_are_capped() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg, max_services=1)
    m.record_answer(AnswerScore(claims=[claim("correct")]))
    m.record_answer(answer(claim("correct")))
    unknown = {"service": "unknown", "version": "unknown", "environment": "unknown"}
    assert value(reg, "citemon_answers_total", **unknown) == 1
    other = {"service": "other", "version": "v1", "environment": "prod"}
    assert value(reg, "citemon_answers_total", **other) == 1
    assert value(reg, "citemon_label_overflow_total", label="service") == 1


def test_trace_ids_become_exemplars_in_openmetrics() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_answer(specimen())
    text = openmetrics_latest(reg).decode()
    line = next(
        ln for ln in text.splitlines() if ln.startswith("citemon_claims_total{") and "misattr" in ln
    )
    assert f'# {{trace_id="{TRACE}"}} 2.0' in line
    # An explicit trace_id wins over the score's; an over-long one is dropped, not sent.
    m.record_answer(specimen(), trace_id="x" * 200)
    text = openmetrics_latest(reg).decode()
    assert "x" * 200 not in text


def test_spans_dead_letters_lag_and_settable_gauges() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg, build_version="9.9.9")
    assert value(reg, "citemon_judge_canary_sensitivity") is None  # absent until it has run
    m.span("answer")
    m.span("sampled_out", 4)
    m.dead_letter("not_protobuf")
    m.consumer_lag("otlp_spans", 0, 120)
    m.consumer_lag("otlp_spans", 1, -3)
    m.set_corrected_accuracy(**SVE, value=0.71)
    m.set_probe_sensitivity(0.93)
    assert value(reg, "citemon_spans_total", outcome="answer") == 1
    assert value(reg, "citemon_spans_total", outcome="sampled_out") == 4
    assert value(reg, "citemon_spans_total", outcome="invalid") == 0
    assert value(reg, "citemon_spans_total", outcome="skipped") == 0
    assert SPAN_OUTCOMES == ("answer", "sampled_out", "skipped", "invalid", "part", "unkeyed")
    assert value(reg, "citemon_dead_letters_total", reason="not_protobuf") == 1
    assert value(reg, "citemon_consumer_lag", topic="otlp_spans", partition="0") == 120
    assert value(reg, "citemon_consumer_lag", topic="otlp_spans", partition="1") == 0
    m.forget_partition("otlp_spans", 0)
    assert value(reg, "citemon_consumer_lag", topic="otlp_spans", partition="0") is None
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) == 0.71
    assert value(reg, "citemon_judge_canary_sensitivity") == 0.93
    assert value(reg, "citemon_build_info", version="9.9.9") == 1
    with pytest.raises(ValueError):
        m.span("bogus")  # type: ignore[arg-type]


def test_judge_observer() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    obs: JudgeObserver = m.judge
    assert isinstance(obs, JudgeObserver)
    assert value(reg, "citemon_judge_inflight_limit") is None
    m.judge.set_limit(8)
    obs.inflight(+1)
    obs.inflight(+1)
    obs.inflight(-1)
    obs.request_done("ok", 0.3)
    obs.request_done("timeout", 12.0)
    obs.cache(True)
    obs.cache(False)
    obs.cache(False)
    assert value(reg, "citemon_judge_inflight") == 1
    assert value(reg, "citemon_judge_inflight_limit") == 8
    assert value(reg, "citemon_judge_requests_total", outcome="ok") == 1
    assert value(reg, "citemon_judge_requests_total", outcome="timeout") == 1
    # docs/design.md's outcomes, each series present from the start (0 until it happens).
    assert JUDGE_OUTCOMES == ("ok", "error", "timeout", "rate_limited", "invalid")
    for outcome in ("error", "rate_limited", "invalid"):
        assert value(reg, "citemon_judge_requests_total", outcome=outcome) == 0
    assert value(reg, "citemon_judge_request_seconds_count") == 2
    assert value(reg, "citemon_judge_request_seconds_bucket", le="0.5") == 1
    assert value(reg, "citemon_judge_request_seconds_bucket", le="15.0") == 2
    assert value(reg, "citemon_judge_cache_total", result="hit") == 1
    assert value(reg, "citemon_judge_cache_total", result="miss") == 2


def test_invalid_replies_are_counted_by_cause() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    assert " ".join(INVALID_REPLY_CAUSES) == (
        "not_completion too_large truncated not_json schema missing_claims not_yes_no"
    )
    for cause in INVALID_REPLY_CAUSES:  # every series present from the start
        assert value(reg, "citemon_judge_invalid_replies_total", cause=cause) == 0
    m.judge.invalid_reply("not_json")
    m.judge.invalid_reply("not_json")
    m.judge.invalid_reply("not_yes_no")
    m.judge.invalid_reply("made-up")  # an unknown cause cannot grow the label set
    assert value(reg, "citemon_judge_invalid_replies_total", cause="not_json") == 2
    assert value(reg, "citemon_judge_invalid_replies_total", cause="not_yes_no") == 1
    assert value(reg, "citemon_judge_invalid_replies_total", cause="schema") == 1
    assert value(reg, "citemon_judge_invalid_replies_total", cause="made-up") is None


async def test_server_serves_metrics_probes_and_openmetrics() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_answer(specimen())
    ready = False
    async with (
        MetricsServer(reg, host="127.0.0.1", port=0, ready=lambda: ready) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client,
    ):
        plain = await client.get("/metrics")
        assert plain.status_code == 200
        assert plain.headers["content-type"].startswith("text/plain")
        assert 'citemon_answers_total{environment="prod",service="support-bot"' in plain.text
        assert "trace_id" not in plain.text  # the classic format cannot carry exemplars
        om = await client.get(
            "/metrics",
            headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"},
        )
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert f'trace_id="{TRACE}"' in om.text
        assert om.text.endswith("# EOF\n")
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 503
        ready = True
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/nope")).status_code == 404
        assert (await client.post("/metrics")).status_code == 405
        head = await client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        # A client that sends half a request and stalls does not wedge the server.
        stalled, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")
        await writer.drain()
        assert (await client.get("/healthz")).status_code == 200
        port = server.port
    # Stopping hangs up on the stalled client instead of waiting out its read timeout.
    rest = await asyncio.wait_for(stalled.read(), timeout=2)
    assert rest == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)  # stopped: nothing listens any more
