from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from citemon._core.stats import msprt_p_value
from citemon._demo.data import FAULTS, QUESTIONS, answer
from citemon._engine.scoring import Scorer
from citemon._rollout.compare import TestKind, VersionCounts, compare
from citemon.cli import main
from citemon.judges.lexical import LexicalJudge


def _scores_file(tmp_path: Path, rounds: int = 3) -> Path:
    records = []
    for r in range(rounds):
        for qi, q in enumerate(QUESTIONS):
            for fault in ("correct", "correct", *FAULTS[1:3]):
                records.append(answer(q, fault, f"v1-{r}-{qi}-{fault}", version="v1"))
                records.append(answer(q, fault, f"v2-{r}-{qi}-{fault}", version="v2",
                                      first_passage_bug=True))  # fmt: skip
    scores = asyncio.run(Scorer(LexicalJudge()).score_many(records))
    path = tmp_path / "scores.jsonl"
    path.write_text("\n".join(s.model_dump_json() for s in scores) + "\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def _loopback(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """A loopback HTTP server answering with ``handler`` while the block runs; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_compare_flags_the_attribution_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scores_file(tmp_path)
    assert main(["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v2",
                 "--format", "json"]) == 1  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "regressed"
    accuracy = next(t for t in out["tests"] if t["metric"] == "citation_accuracy")
    assert accuracy["baseline"] > 0.8 > 0.5 > accuracy["candidate"]
    assert accuracy["p_value"] < 1e-6
    # The other way round the candidate is better.
    assert main(["compare", "--scores", str(path), "--baseline", "v2", "--candidate", "v1"]) == 0
    assert "verdict: improved" in capsys.readouterr().out


def test_same_quality_is_no_evidence_and_small_samples_decide_nothing() -> None:
    same = {"a": VersionCounts(correct=80, cited=100, uncited=10, cited_ids=120),
            "b": VersionCounts(correct=78, cited=100, uncited=11, cited_ids=121)}  # fmt: skip
    assert compare(same, "a", "b").outcome == "no evidence"
    tiny = {"a": VersionCounts(correct=9, cited=10, cited_ids=10),
            "b": VersionCounts(correct=2, cited=10, cited_ids=10)}  # fmt: skip
    assert compare(tiny, "a", "b").outcome == "not enough data"


def test_ids_per_claim_climbing_is_a_regression_even_when_accuracy_holds() -> None:
    counts = {"a": VersionCounts(correct=180, cited=200, uncited=0, cited_ids=240),
              "b": VersionCounts(correct=182, cited=200, uncited=0, cited_ids=680)}  # fmt: skip
    result = compare(counts, "a", "b")
    assert result.outcome == "regressed"
    ids = next(t for t in result.tests if t.name == "ids_per_claim")
    assert ids.baseline == 1.2 and ids.candidate == 3.4
    assert ids.direction(0.05, 0.02) == -1


def test_missing_scores_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--scores", "/nope", "--baseline", "a", "--candidate", "b"]) == 2
    assert "no such file: /nope" in capsys.readouterr().err


def test_prometheus_counts_with_fewer_ids_than_cited_claims() -> None:
    # Counts read back from a real Prometheus in test_alert_e2e: each counter's increase() is
    # extrapolated and rounded on its own, so v2's 294 single-ID claims came back with 293 IDs.
    counts = {"v1": VersionCounts(correct=440, cited=454, uncited=7, cited_ids=460),
              "v2": VersionCounts(correct=98, cited=294, uncited=0, cited_ids=293)}  # fmt: skip
    result = compare(counts, "v1", "v2")
    assert result.outcome == "regressed"  # accuracy 0.97 → 0.33 stands whatever IDs do
    ids = next(t for t in result.tests if t.name == "ids_per_claim")
    assert ids.candidate == pytest.approx(293 / 294)
    assert ids.direction(0.05, 0.02) == 0  # one ID per claim in both: no IDs regression


def _false_fail_rate(test: TestKind, runs: int = 2000, seed: int = 19) -> float:
    """A healthy canary (p = 0.90 like its stable version) gated every minute: 30 cited claims a
    minute to the canary, 300 to the stable version, looked at from minute 2 to minute 11 (the
    rollout templates' ten looks), failed at the first look that says "regressed"."""
    rng = np.random.default_rng(seed)
    fails = 0
    for _ in range(runs):
        stable, canary = VersionCounts(), VersionCounts()
        for minute in range(1, 12):
            for counts, n in ((stable, 300), (canary, 30)):
                correct = int(rng.binomial(n, 0.9))
                counts.correct += correct
                counts.cited += n
                counts.cited_ids += n
            if minute < 2:
                continue
            if compare({"s": stable, "c": canary}, "s", "c", test=test).outcome == "regressed":
                fails += 1
                break
    return fails / runs


def test_ten_looks_at_a_healthy_canary_fail_it_at_most_alpha_with_the_sequential_test() -> None:
    """The reason for the sequential test: the one-look z-test, looked at ten times, fails a
    healthy canary about twice as often as its alpha (0.05) says; the mixture SPRT stays under.
    (Seeded: 2000 simulated canaries; the figures are in docs/alerts-and-gates.md.)"""
    fixed = _false_fail_rate("fixed")
    sequential = _false_fail_rate("sequential")
    assert fixed > 0.05, fixed
    assert sequential <= 0.05, sequential
    assert fixed > 5 * sequential, (fixed, sequential)  # seeded: 0.109 and 0.010


def test_sequential_test_still_fails_a_real_regression_at_the_first_look() -> None:
    # Two minutes of a canary with the first-passage bug (0.333) against a stable 0.972.
    counts = {"v1": VersionCounts(correct=583, cited=600, cited_ids=600),
              "v2": VersionCounts(correct=20, cited=60, cited_ids=60)}  # fmt: skip
    result = compare(counts, "v1", "v2")
    assert result.test == "sequential" and result.outcome == "regressed"
    accuracy = result.tests[0]
    assert accuracy.sequential_p_value is not None and accuracy.sequential_p_value < 1e-6
    assert accuracy.p_value == accuracy.sequential_p_value
    # Fixed-sample figures are reported beside it, and the always-valid p is the larger.
    assert accuracy.fixed_p_value is not None and accuracy.z is not None
    assert accuracy.fixed_p_value < accuracy.sequential_p_value
    assert accuracy.z == pytest.approx(-16.78, abs=0.01)


def test_msprt_p_value_matches_its_formula() -> None:
    # V = 0.0015, tau = 0.1, delta = -0.06
    log_l = 0.5 * math.log(0.0015 / 0.0115) + 0.01 * 0.0036 / (2 * 0.0015 * 0.0115)
    assert msprt_p_value(-0.06, 0.0015, 0.1) == pytest.approx(math.exp(-log_l))
    assert msprt_p_value(0.0, 0.0015, 0.1) == 1.0  # no difference: no evidence at all
    assert msprt_p_value(0.5, 0.0, 0.1) is None


def test_json_keeps_its_fields_and_adds_the_sequential_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scores_file(tmp_path, rounds=1)
    main(["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v2",
          "--format", "json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert {"baseline", "candidate", "outcome", "counts", "tests", "test", "multi_hop_ceiling",
            "patterns", "patterns_changed"} == set(out)  # fmt: skip
    assert out["test"] == "sequential"
    accuracy = out["tests"][0]
    assert {"metric", "baseline", "candidate", "baseline_ci95", "candidate_ci95", "delta",
            "p_value", "z", "fixed_p_value", "sequential_p_value"} == set(accuracy)  # fmt: skip
    assert accuracy["p_value"] == accuracy["sequential_p_value"]
    main(["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v2",
          "--format", "json", "--test", "fixed"])  # fmt: skip
    fixed = json.loads(capsys.readouterr().out)
    assert fixed["test"] == "fixed"
    assert fixed["tests"][0]["p_value"] == fixed["tests"][0]["fixed_p_value"]


def test_compare_reports_the_patterns_a_candidate_changed_beside_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """v1 cites a sibling chunk now and then (same_document), v2 cites the first passage
    (first_retrieved): both patterns changed, each with its intervals, outside the verdict."""
    import asyncio

    from citemon._engine.scoring import Scorer
    from tests.buggy_rag import buggy_answers, oracle_for

    v1 = list(buggy_answers("sibling_chunk", 40, seed=1, version="v1"))
    v2 = list(buggy_answers("first_passage", 40, seed=2, version="v2"))
    for p in v2:
        p.record.id = f"b-{p.record.id}"
    scores = asyncio.run(Scorer(oracle_for(v1 + v2)).score_many([p.record for p in v1 + v2]))
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(s.model_dump_json() + "\n" for s in scores), encoding="utf-8")
    args = ["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v2"]
    assert main([*args, "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["patterns_changed"] == ["first_retrieved", "same_document"]
    rows = {r["pattern"]: r for r in out["patterns"]}
    assert rows["same_document"]["baseline"] == round(40 / 120, 4)
    assert rows["same_document"]["candidate"] == 0
    wrong_v2 = out["counts"]["v2"]["misattribution_patterns"]["first_retrieved"]
    assert wrong_v2 == sum(c.verdict == "misattributed" for s in scores[40:] for c in s.claims)
    assert rows["first_retrieved"]["candidate"] == round(wrong_v2 / 120, 4)
    lo, hi = rows["first_retrieved"]["candidate_ci95"]
    assert lo < wrong_v2 / 120 < hi and rows["first_retrieved"]["p_value"] < 0.01
    assert not rows["other"]["changed"] and rows["other"]["p_value"] is None
    assert out["multi_hop_ceiling"] == {"v1": 1.0, "v2": 1.0}
    # A change in patterns alone is not a regression: v1 against itself, patterns unchanged.
    assert main(["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v1"]) == 0
    table = capsys.readouterr().out
    assert "patterns changed: none (p < alpha/5; not in the verdict)" in table
    assert main(args) == 1
    table = capsys.readouterr().out.splitlines()
    assert table[-2] == (
        "patterns changed: first_retrieved, same_document (p < alpha/5; not in the verdict)"
    )
    first = next(line for line in table if line.startswith(" first_retrieved"))
    assert first.endswith("changed") and "<1e-6" in first
    assert next(line for line in table if line.startswith("multi-hop ceiling")).split() == [
        "multi-hop", "ceiling", "1.000", "1.000",
    ]  # fmt: skip


def test_prometheus_selectors_match_versions_with_regex_characters(tmp_path: Path) -> None:
    """A version is a literal, not a regex: ``1.2.0+build.5`` (semver build metadata) must
    select its own counters (unescaped, ``+`` repeats the ``0`` and the series is never read,
    so the gate says "not enough data" for ever), and ``1.2`` must not select ``1x2``. The
    queries ``compare`` sends are captured on a loopback HTTP server and evaluated by
    promtool's PromQL engine on those series."""
    from urllib.parse import parse_qs, urlsplit

    import yaml

    from citemon._rollout.compare import counts_from_prometheus, patterns_from_prometheus
    from tests.unit.test_grafana import run_promtool

    sent: list[str] = []

    class Prometheus(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            sent.append(parse_qs(urlsplit(self.path).query)["query"][0])
            body = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with _loopback(Prometheus) as port:
        url = f"http://127.0.0.1:{port}"
        counts_from_prometheus(url, ["1.2.0+build.5", "1.2"], service="bot")
        patterns_from_prometheus(url, ["1.2.0+build.5", "1.2"], service="bot")
    assert len(sent) == 3

    def series(name: str, version: str, extra: str) -> dict[str, str]:
        labels = f'service="bot",version="{version}",environment="prod",{extra}'
        return {"series": f'{name}{{{labels},instance="m-0"}}', "values": "0+1x60"}

    versions = ("1.2.0+build.5", "1.2", "1x2")
    input_series = [
        *(series("citemon_claims_total", v, 'verdict="correct"') for v in versions),
        *(series("citemon_cited_ids_total", v, 'verdict="correct"') for v in versions),
        *(series("citemon_misattributions_total", v, 'pattern="other"') for v in versions),
    ]
    checks = [
        {
            "expr": f"count by (version) ({query.replace('[1h]', '[30m]')})",
            "eval_time": "40m",
            "exp_samples": [
                {"labels": f'{{version="{v}"}}', "value": 1} for v in ("1.2.0+build.5", "1.2")
            ],
        }
        for query in sent
    ]
    test = {"tests": [{"interval": "1m", "input_series": input_series,
                       "promql_expr_test": checks}]}  # fmt: skip
    path = tmp_path / "selector_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    assert "SUCCESS" in run_promtool("test", "rules", path)


@pytest.mark.parametrize("window", ["1h", "30m", "1h30m", "2d", "500ms", "1y2w3d4h5m6s7ms"])
def test_a_prometheus_duration_is_taken_as_the_window(window: str) -> None:
    from citemon._rollout.compare import prometheus_duration

    assert prometheus_duration(window) == window


@pytest.mark.parametrize(
    "window",
    ["", "0", "0s", "1H", "h", "1h ", "30m30h", "1.5h", "1\u0661h", "1h]) or vector(1) or (x[1h"],
)
def test_a_window_that_is_no_prometheus_duration_is_refused_before_any_query(
    window: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--window`` goes into PromQL as a range: anything but a duration is refused, with the
    flag named, before Prometheus is asked (the URL here answers nothing)."""
    code = main(
        ["compare", "--prometheus", "http://127.0.0.1:9", "--baseline", "v1", "--candidate",
         "v2", "--window", window]
    )  # fmt: skip
    assert code == 2
    assert f"--window {window!r} is not a Prometheus duration" in capsys.readouterr().err


def test_a_prometheus_password_in_the_url_is_never_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Basic auth in ``--prometheus`` (``https://user:password@host``): a failed query names
    the server without the password, and httpx's own message (which quotes the whole request
    URL) is starred too."""

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with _loopback(Refusing) as port:
        url = f"http://alice:pw-never-shown@127.0.0.1:{port}/"
        code = main(["compare", "--baseline", "v1", "--candidate", "v2", "--prometheus", url])
    err = capsys.readouterr().err
    assert code == 2 and "401 Unauthorized" in err
    assert "pw-never-shown" not in err
    assert f"at http://alice@127.0.0.1:{port}/:" in err
