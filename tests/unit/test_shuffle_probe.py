"""The production self-checks: shuffle probe selection, the check-only shuffled accuracy, the
probe and corrected-accuracy windows, and the pipeline keeping the probe away from the real
answer."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from citemon._checks.selftest import ShuffleResult, run_shuffle_selftest
from citemon._checks.shuffle import rotate_citations
from citemon._checks.shuffle_probe import _digest, probe_selected, shuffled_check
from citemon._commands.run import serve
from citemon._core.calibration import Calibration, corrected_accuracy
from citemon._core.errors import ConfigError, JudgeHTTPError
from citemon._core.probe import ProbeCounts, cited_counts, probe_sensitivity
from citemon._core.records import AnswerRecord, Verdict
from citemon._core.tally import Tally
from citemon._demo.data import sample_records, specimen
from citemon._engine.scoring import Scorer
from citemon._engine.settings import ScoringSettings
from citemon._engine.summary import Summary
from citemon._metrics import Metrics
from citemon._service.answers import ratio_bound, trace_id_sampled
from citemon._service.pipeline import Pipeline
from citemon._service.settings import Settings, settings_from_args
from citemon.cli import build_parser
from citemon.judges.cache import ReplyCache
from citemon.judges.http import HTTPBatchJudge
from citemon.judges.lexical import LexicalJudge
from citemon.judges.settings import JudgeSettings
from citemon.judges.transport import HTTPTransport
from tests.built import Build
from tests.judge_server import JudgeServer
from tests.oracles import SPECIMEN_TRUTH, EntailsBatch, OracleJudge, YesJudge
from tests.unit.test_metrics import SVE, FakeClock, answer, claim

CALIB = Calibration(judge="lexical", tp=80, fn=20, tn=70, fp=30)  # sens 0.8, spec 0.7


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def trace_ids(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


# -- the maths ---------------------------------------------------------------------------------


def _sensitivity(oc: int, on: int, sc: int, sn: int) -> float | None:
    return probe_sensitivity(Tally(correct=oc, cited=on), Tally(correct=sc, cited=sn))


def test_sensitivity_is_the_relative_accuracy_drop() -> None:
    assert _sensitivity(8, 10, 2, 10) == pytest.approx(0.75)  # (0.8 − 0.2) / 0.8
    assert _sensitivity(9, 10, 9, 10) == 0.0  # blind: shuffling changed nothing
    assert _sensitivity(5, 10, 0, 8) == 1.0  # every shuffled citation failed
    assert _sensitivity(4, 10, 6, 10) == pytest.approx(-0.5)  # worse than blind: shown
    assert _sensitivity(0, 10, 0, 10) is None  # a drop from nothing means nothing
    assert _sensitivity(3, 0, 1, 5) is None
    assert _sensitivity(3, 5, 0, 0) is None


def test_selection_is_deterministic_at_its_rate_and_independent_of_sampling() -> None:
    ids = trace_ids(40_000)
    picked = [t for t in ids if probe_selected(t, 0.1)]
    assert 0.095 < len(picked) / len(ids) < 0.105
    assert picked == [t for t in ids if probe_selected(t, 0.1)]  # same IDs every time
    assert set(picked) <= {t for t in ids if probe_selected(t, 0.2)}  # nested like a sampler
    # Among the traces the sampler keeps at 0.5 (low 64 bits), the probe still takes ~10 %.
    bound = ratio_bound(0.5)
    kept = [t for t in ids if trace_id_sampled(t, bound)]
    share = sum(probe_selected(t, 0.1) for t in kept) / len(kept)
    assert 0.093 < share < 0.107
    # Even where the sampler's bits are all alike (a low-64-bit band), the hash spreads.
    band = [f"{i:016x}" + "0" * 16 for i in range(10_000)]
    assert 0.09 < sum(probe_selected(t, 0.1) for t in band) / len(band) < 0.11
    assert not any(probe_selected(t, 0.0) for t in ids[:100])
    assert all(probe_selected(t, 1.0) for t in ids[:100])
    assert not probe_selected(None, 1.0) and not probe_selected("", 1.0)


async def test_check_only_counts_equal_full_scoring_of_the_rotated_claims() -> None:
    """The probe's cheap path must give exactly the counts :meth:`Scorer.score` would."""
    records = [
        r.model_copy(update={"trace_id": t})
        for r, t in zip(sample_records() * 3, trace_ids(300), strict=False)
    ]
    checked = 0
    judges = (LexicalJudge(), OracleJudge(SPECIMEN_TRUTH), YesJudge(), EntailsBatch(LexicalJudge()))
    for judge in judges:
        for policy in ("any_of", "single"):
            scorer = Scorer(judge, ScoringSettings(policy=policy))  # type: ignore[arg-type]
            for record in records:
                got = await shuffled_check(scorer, record)
                claims = await scorer.claims(record)
                moved = rotate_citations(claims, random.Random(_digest(record.trace_id or "")))
                if moved is None:
                    assert got is None
                    continue
                assert got == cited_counts(await scorer.score(record, moved))
                checked += 1
    assert checked > 700


async def test_a_v2_judge_is_asked_once_per_cited_set_with_the_real_scores_prompt() -> None:
    """With wire contract v2 the probe asks the citation check as the real score does (same
    prompt, same verdicts), one request per distinct rotated cited set, no support search."""
    records = [
        r.model_copy(update={"trace_id": t})
        for r, t in zip(sample_records(), trace_ids(40, seed=5), strict=False)
    ]
    async with (
        JudgeServer() as server,
        HTTPBatchJudge(HTTPTransport(server.base_url, "m"), cache=ReplyCache(0)) as judge,
    ):
        scorer = Scorer(judge)
        asked = 0
        for record in records:
            moved = rotate_citations(
                await scorer.claims(record), random.Random(_digest(record.trace_id or ""))
            )
            server.reset()
            got = await shuffled_check(scorer, record)
            if moved is None:
                assert got is None and not server.requests
                continue
            passages = record.passage_map()
            sets = {frozenset(i for i in c.cited_ids if i in passages) for c in moved if c.cited}
            assert [r.kind for r in server.requests] == ["cited"] * len(sets - {frozenset()})
            asked += len(server.requests)
            assert got == cited_counts(await scorer.score(record, moved))
        assert asked >= 20


async def test_shuffled_check_on_the_specimen() -> None:
    record = specimen().model_copy(update={"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
    scorer = Scorer(OracleJudge(SPECIMEN_TRUTH))
    # Cited [p-3310, p-3310, p-3312]; a rotation gives each claim another's citation set.
    # This trace ID's seed picks [p-3310, p-3312, p-3310]: C0 still right (p-3310 says it), C1
    # now right by luck (p-3312 says it), C2 wrong (only p-3311 says it) → 2 of 3.
    moved = rotate_citations(
        await scorer.claims(record), random.Random(_digest(record.trace_id or ""))
    )
    assert moved is not None
    assert [c.cited_ids for c in moved] == [["p-3310"], ["p-3312"], ["p-3310"]]
    assert await shuffled_check(scorer, record) == Tally(correct=2, cited=3)
    assert cited_counts(await scorer.score(record)) == Tally(correct=1, cited=3)
    assert await shuffled_check(Scorer(YesJudge()), record) == Tally(correct=3, cited=3)
    # Nothing to rotate (one citation set), or a truncated answer: no probe.
    one_set = record.model_copy(update={"answer": "Audit logs are kept 90 days. [p-3310]"})
    assert await shuffled_check(scorer, one_set) is None
    assert await shuffled_check(scorer, record.model_copy(update={"truncated": True})) is None


async def test_windowed_sensitivity_is_shuffle_result_sensitivity_of_the_same_answers() -> None:
    """Pooled over answers, the gauge is ``ShuffleResult.sensitivity`` of the same rotations."""
    records = sample_records()
    truth: dict[str, set[str]] = {}
    for r in records:
        for label in r.labels or []:
            if label["verdict"] in ("correct", "misattributed"):
                truth.setdefault(label["claim"], set()).update(
                    label.get("supported_by")
                    or ([label["cited_ids"][0]] if label["verdict"] == "correct" else [])
                )
    scorer = Scorer(OracleJudge(truth))
    reg = CollectorRegistry()
    m = Metrics(reg)
    original, shuffled = Summary(), Summary()
    for r, tid in zip(records, trace_ids(len(records)), strict=True):
        record = r.model_copy(update={"trace_id": tid})
        got = await shuffled_check(scorer, record)
        if got is None:
            continue
        real = await scorer.score(record)
        m.record_probe(cited_counts(real), got)
        original.add(real)
        claims = await scorer.claims(record)
        moved = rotate_citations(claims, random.Random(_digest(tid)))
        assert moved is not None
        shuffled.add(await scorer.score(record, moved))
    offline = ShuffleResult(original=original, shuffled=shuffled)
    assert offline.sensitivity is not None and offline.sensitivity > 0.8
    exact = probe_sensitivity(original.tally, shuffled.tally)
    assert value(reg, "citemon_judge_canary_sensitivity") == exact
    # ShuffleResult works from the summary's accuracies, rounded to 4 places.
    assert exact == pytest.approx(offline.sensitivity, abs=1e-3)
    assert value(reg, "citemon_judge_canary_answers_total", outcome="scored") == original.answers
    assert original.answers >= 10
    # The offline self-test (its own seed) agrees the judge reads the passages.
    assert (await run_shuffle_selftest(scorer, records)).passed()


def test_probe_window_slides_and_falls_back_to_a_set_value() -> None:
    clock = FakeClock()
    reg = CollectorRegistry()
    m = Metrics(reg, window_s=900, probe_window_s=3600, window_buckets=15, clock=clock)
    assert value(reg, "citemon_judge_canary_sensitivity") is None  # absent, not 0
    m.record_probe(Tally(correct=9, cited=10), Tally(correct=1, cited=10), trace_id="ab" * 16)
    m.record_answer(answer(claim("correct")))
    clock.now += 1200  # past the 15-minute window, inside the hour
    m.record_probe(Tally(correct=7, cited=10), Tally(correct=7, cited=10))
    assert m.probe_totals() == ProbeCounts(Tally(correct=16, cited=20), Tally(correct=8, cited=20))
    assert value(reg, "citemon_judge_canary_sensitivity") == pytest.approx((0.8 - 0.4) / 0.8)
    assert value(reg, "citemon_citation_accuracy", **SVE) is None  # its window has moved on
    clock.now += 3000  # the first pair is out of the hour
    assert value(reg, "citemon_judge_canary_sensitivity") == 0.0
    clock.now += 3600
    assert value(reg, "citemon_judge_canary_sensitivity") is None  # empty window: absent
    m.set_probe_sensitivity(0.9)  # a one-off result set by hand shows while nothing is windowed
    assert value(reg, "citemon_judge_canary_sensitivity") == 0.9
    m.record_probe(Tally(correct=4, cited=4), Tally(correct=2, cited=4))
    assert value(reg, "citemon_judge_canary_sensitivity") == 0.5
    assert value(reg, "citemon_judge_canary_answers_total", outcome="scored") == 3
    m.probe("skipped")
    m.probe("dropped")
    assert value(reg, "citemon_judge_canary_answers_total", outcome="skipped") == 1
    assert value(reg, "citemon_judge_canary_answers_total", outcome="failed") == 0
    with pytest.raises(ValueError):
        m.probe("bogus")  # type: ignore[arg-type]


def test_corrected_accuracy_uses_the_accuracy_windows_counts() -> None:
    clock = FakeClock()
    reg = CollectorRegistry()
    m = Metrics(reg, window_s=900, window_buckets=15, clock=clock, calibration=CALIB)
    v2 = {**SVE, "version": "v2"}
    # v1: 6 correct of 8 cited (an unjudged and an uncited claim count in no accuracy).
    for _ in range(2):
        m.record_answer(
            answer(claim("correct"), claim("correct"), claim("correct"), claim("misattributed"))
        )
    m.record_answer(answer(claim("unjudged", faithful=None), claim("uncited")))
    # v2: 1 correct of 4 cited: Rogan–Gladen (0.25 + 0.7 − 1) / 0.5 < 0, clipped to 0.
    m.record_answer(
        answer(claim("correct"), claim("unsupported"), claim("dangling"), claim("multi_hop"), **v2)
    )
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.75
    expected = corrected_accuracy(6, 8, CALIB)
    assert expected is not None
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) == expected[0]
    assert expected[0] == pytest.approx((0.75 + 0.7 - 1) / (0.8 + 0.7 - 1))  # 0.9
    assert value(reg, "citemon_citation_accuracy_corrected", **v2) == 0.0
    clock.now += 600
    m.record_answer(answer(claim("misattributed"), claim("misattributed")))  # now 6 of 10
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.6
    expected = corrected_accuracy(6, 10, CALIB)
    assert expected is not None
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) == expected[0]
    assert expected[0] == pytest.approx(0.6)
    clock.now += 600  # the first answers left the window: 0 of 2
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.0
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) == 0.0
    clock.now += 900
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) is None  # empty: absent
    # The calibration itself, for the rule that corrects the accuracy of all replicas pooled.
    assert value(reg, "citemon_judge_sensitivity") == CALIB.confusion.sensitivity == 0.8
    assert value(reg, "citemon_judge_specificity") == CALIB.confusion.specificity == 0.7


def test_an_uninformative_calibration_exports_no_corrected_value() -> None:
    reg = CollectorRegistry()
    coin = Calibration(judge="lexical", tp=50, fn=50, tn=51, fp=49)
    m = Metrics(reg, calibration=coin)
    m.record_answer(answer(claim("correct"), claim("misattributed")))
    assert value(reg, "citemon_citation_accuracy", **SVE) == 0.5
    assert value(reg, "citemon_citation_accuracy_corrected", **SVE) is None
    reg2 = CollectorRegistry()
    m2 = Metrics(reg2)  # without a calibration nothing is corrected either
    m2.record_answer(answer(claim("correct")))
    assert value(reg2, "citemon_citation_accuracy", **SVE) == 1.0
    assert value(reg2, "citemon_citation_accuracy_corrected", **SVE) is None
    assert value(reg2, "citemon_judge_sensitivity") is None
    assert value(reg2, "citemon_judge_specificity") is None


# -- settings and start-up ---------------------------------------------------------------------


def test_flags_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (Settings().probe_rate, Settings().calibration, Settings().probe_window) == (
        0.0,
        None,
        3600.0,
    )
    monkeypatch.setenv("CITEMON_PROBE_RATE", "0.02")
    monkeypatch.setenv("CITEMON_CALIBRATION", str(tmp_path / "env.json"))
    monkeypatch.setenv("CITEMON_PROBE_WINDOW", "30m")
    s = settings_from_args(build_parser().parse_args(["run"]))
    assert (s.probe_rate, s.calibration, s.probe_window) == (0.02, tmp_path / "env.json", 1800)
    args = ["run", "--probe-rate", "0.5", "--calibration", "c.json", "--probe-window", "2h"]
    s = settings_from_args(build_parser().parse_args(args))
    assert (s.probe_rate, s.calibration, s.probe_window) == (0.5, Path("c.json"), 7200)
    monkeypatch.setenv("CITEMON_CALIBRATION", "")
    assert settings_from_args(build_parser().parse_args(["run"])).calibration is None
    with pytest.raises(ConfigError, match="probe_rate"):
        settings_from_args(build_parser().parse_args(["run", "--probe-rate", "1.5"]))


def _deprecations(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]


def test_old_canary_flags_still_work_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """``--canary-rate``/``--canary-window`` (the probe's names before it was renamed) still set
    the probe, each logging one deprecation line naming the new flag; they are not in --help."""
    args = ["run", "--canary-rate", "0.25", "--canary-window", "2h"]
    with caplog.at_level(logging.WARNING, logger="citemon._core.settings"):
        s = settings_from_args(build_parser().parse_args(args))
    assert (s.probe_rate, s.probe_window) == (0.25, 7200)
    assert _deprecations(caplog) == [
        "--canary-rate is deprecated: use --probe-rate (same meaning)",
        "--canary-window is deprecated: use --probe-window (same meaning)",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="citemon._core.settings"):
        s = settings_from_args(build_parser().parse_args(["run", "--probe-rate", "0.5"]))
    assert (s.probe_rate, _deprecations(caplog)) == (0.5, [])
    # A bad value under the old name is the same usage error as under the new one.
    with pytest.raises(ConfigError, match="probe_rate"):
        settings_from_args(build_parser().parse_args(["run", "--canary-rate", "1.5"]))


def test_run_help_names_the_probe_flags_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    lines = capsys.readouterr().out.splitlines()
    options = [line.split()[0] for line in lines if line.startswith("  --")]
    assert ("--probe-rate" in options, "--probe-window" in options) == (True, True)
    assert ("--canary-rate" in options, "--canary-window" in options) == (False, False)


def test_old_canary_variables_still_work_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``CITEMON_CANARY_RATE``/``_WINDOW`` still set the probe when the new variables are unset,
    with one deprecation line each; beside the new variable the old one is ignored, and says so."""
    monkeypatch.setenv("CITEMON_CANARY_RATE", "0.02")
    monkeypatch.setenv("CITEMON_CANARY_WINDOW", "30m")
    with caplog.at_level(logging.WARNING, logger="citemon._core.settings"):
        s = settings_from_args(build_parser().parse_args(["run"]))
    assert (s.probe_rate, s.probe_window) == (0.02, 1800)
    assert _deprecations(caplog) == [
        "CITEMON_CANARY_RATE is deprecated: use CITEMON_PROBE_RATE (same meaning)",
        "CITEMON_CANARY_WINDOW is deprecated: use CITEMON_PROBE_WINDOW (same meaning)",
    ]
    caplog.clear()
    monkeypatch.setenv("CITEMON_PROBE_RATE", "0.1")
    with caplog.at_level(logging.WARNING, logger="citemon._core.settings"):
        s = settings_from_args(build_parser().parse_args(["run"]))
    assert (s.probe_rate, s.probe_window) == (0.1, 1800)
    assert _deprecations(caplog) == [
        "CITEMON_CANARY_RATE is deprecated and ignored: CITEMON_PROBE_RATE is set",
        "CITEMON_CANARY_WINDOW is deprecated: use CITEMON_PROBE_WINDOW (same meaning)",
    ]
    # The flag beats either variable.
    s = settings_from_args(build_parser().parse_args(["run", "--canary-rate", "0.3"]))
    assert s.probe_rate == 0.3


async def test_an_unreadable_calibration_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "calib.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        args = build_parser().parse_args(["run", "--calibration", str(path)])
        settings = settings_from_args(args, metrics_port=0)
        with pytest.raises(ConfigError, match="cannot read calibration file"):
            await serve(settings, stop=asyncio.Event())


def test_cli_exits_2_on_an_unreadable_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from citemon.cli import main

    assert main(["run", "--calibration", str(tmp_path / "missing.json")]) == 2
    assert "cannot read calibration file" in capsys.readouterr().err


# -- the pipeline: the probe never touches the real answer ------------------------------------


_TRUTH = {"Alpha is one.": {"p1"}, "Beta is two.": {"p2"}, "Gamma is three.": {"p3"}}


class _FailsOnWrongCitations:
    """Reads passages like the oracle, but *errors* whenever a claim is shown a wrong one: the
    real answers (all cited correctly) never see an error, every rotated claim does."""

    def __init__(self, truth: Mapping[str, set[str]]) -> None:
        self.truth = truth
        self.calls = 0

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        self.calls += 1
        await asyncio.sleep(0)
        if not self.truth.get(claim, set()) & set(passages):
            raise JudgeHTTPError("injected failure", status=503)
        return Verdict(entailed=True)


def _correct_record(trace_id: str) -> AnswerRecord:
    return AnswerRecord(
        id=trace_id[:6],
        answer="Alpha is one. [p1] Beta is two. [p2] Gamma is three. [p3]",
        passages=[{"id": f"p{i}", "text": t} for i, t in enumerate(("a", "b", "c"), 1)],  # type: ignore[misc]
        trace_id=trace_id,
        **SVE,
    )


async def _score_and_commit(pipeline: Pipeline, trace_ids_: list[str]) -> None:
    """Each answer scored by a job holding a record of its own, then committed the way
    ``Pipeline.commit`` counts it once delivered (no broker here: these tests are about the
    probe; tests/integration covers delivery)."""
    tp = TopicPartition("t", 0)
    await pipeline.on_partitions_assigned([tp])
    # pending 1 each: the job's release finishes it, as the intake's would after admitting it
    entries = [pipeline.offsets.take(tp, offset) for offset in range(len(trace_ids_))]
    jobs = pipeline.answers
    await asyncio.gather(
        *(
            jobs.score(_correct_record(t), [e])
            for t, e in zip(trace_ids_, entries, strict=True)
            if e is not None
        )
    )
    for ready in pipeline.offsets.ready():
        pipeline._count(ready)


def _settings(judge: str, **fields: object) -> Settings:
    """``citemon run``'s settings with the judge one of this module's factories makes."""
    return Settings(judge=JudgeSettings(judge=f"{__name__}:{judge}"), **fields)  # type: ignore[arg-type]


def failing_judge() -> _FailsOnWrongCitations:
    return _FailsOnWrongCitations(_TRUTH)


def oracle_judge() -> OracleJudge:
    return OracleJudge(_TRUTH)


async def test_a_failing_probe_leaves_the_real_answer_alone(build: Build) -> None:
    reg = CollectorRegistry()
    pipeline = build(_settings("failing_judge", probe_rate=1.0), registry=reg)
    ids = trace_ids(5)
    await _score_and_commit(pipeline, ids)
    await pipeline.shuffle_probes.idle()
    assert value(reg, "citemon_answers_total", **SVE) == 5
    assert value(reg, "citemon_claims_total", **SVE, verdict="correct") == 15
    assert value(reg, "citemon_claims_total", **SVE, verdict="unjudged") == 0
    assert value(reg, "citemon_judge_canary_answers_total", outcome="failed") == 5
    assert value(reg, "citemon_judge_canary_answers_total", outcome="scored") == 0
    assert value(reg, "citemon_judge_canary_sensitivity") is None
    assert pipeline.stats.answer_retries == 0 and pipeline.stats.unjudged_after_retries == 0


async def test_the_pipeline_probe_counts_only_the_probe(build: Build) -> None:
    reg = CollectorRegistry()
    ids = trace_ids(400, seed=11)
    picked = [t for t in ids if probe_selected(t, 0.25)]
    pipeline = build(_settings("oracle_judge", probe_rate=0.25), registry=reg)
    await _score_and_commit(pipeline, ids)
    await pipeline.shuffle_probes.idle()
    assert value(reg, "citemon_answers_total", **SVE) == 400
    assert value(reg, "citemon_claims_total", **SVE, verdict="correct") == 1200
    assert value(reg, "citemon_claims_total", **SVE, verdict="misattributed") == 0
    assert value(reg, "citemon_judge_canary_answers_total", outcome="scored") == len(picked)
    n = 3 * len(picked)
    assert pipeline.metrics.probe_totals() == ProbeCounts(
        Tally(correct=n, cited=n), Tally(correct=0, cited=n)
    )
    assert value(reg, "citemon_judge_canary_sensitivity") == 1.0


async def test_probes_in_flight_are_bounded_by_the_answers_bound(build: Build) -> None:
    # --max-inflight-answers bounds the probes too: with 1, a probe picked while another runs
    # is dropped, and counted. Ten scored answers offered at once: one probe runs, nine drop.
    reg = CollectorRegistry()
    pipeline = build(
        _settings("oracle_judge", probe_rate=1.0, max_inflight_answers=1), registry=reg
    )
    records = [_correct_record(t) for t in trace_ids(10)]
    scores = await pipeline.scorer.score_many(records)
    for record, score in zip(records, scores, strict=True):
        pipeline.shuffle_probes.maybe_start(record, score)
    await pipeline.shuffle_probes.idle()
    assert value(reg, "citemon_judge_canary_answers_total", outcome="scored") == 1
    assert value(reg, "citemon_judge_canary_answers_total", outcome="dropped") == 9
