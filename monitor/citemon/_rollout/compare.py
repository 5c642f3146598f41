"""Deploy comparison: did the candidate version cite worse than the baseline?

Counts per version come from the Prometheus HTTP API (the counters, summed across replicas) or
from a file of per-answer scores. Accuracy and coverage are compared as a difference of two
proportions (pooled variance) and shown with Wilson intervals. IDs per claim is compared on its
excess over one (a cited claim carries at least one ID): excess IDs are treated as Poisson
counts over the cited claims, and the log rate ratio is tested with a normal approximation.

Beside the decision, and never part of it: which misattribution patterns the candidate changed.
Each pattern's rate per cited claim is compared as a proportion (the same tests), and a pattern
counts as *changed* when its p-value is below ``alpha`` divided by the number of patterns
(Bonferroni: five looks at one comparison) and the rate moved by at least ``min_effect``. And
each version's multi-hop ceiling (:attr:`Tally.multi_hop_ceiling`), the accuracy its question
mix allows. Pattern counts come beside the tallies (:data:`PatternCounts`).

The decision's p-value is, by default, the mixture SPRT's always-valid one
(:func:`~citemon._core.stats.msprt_p_value`): a gate that runs ``compare`` every minute while
the candidate collects claims, and fails at the first look below ``alpha``, fails a healthy
candidate with probability at most ``alpha``. The fixed-sample p-value of the z-test is still
reported (``fixed_p_value``); ``test="fixed"`` decides on it, which is only valid for a
single look (looked at ten times it fails a healthy candidate about twice as often as
``alpha`` says: tests/unit/test_compare.py measures it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from citemon._core.errors import InputError, redacted, without_passwords
from citemon._core.records import PATTERNS, AnswerScore
from citemon._core.stats import (
    msprt_p_value,
    normal_cdf,
    two_proportion_variance,
    two_proportion_z,
)
from citemon._core.tally import Tally

__all__ = [
    "MIXTURE_SD",
    "Comparison",
    "PatternCounts",
    "TestKind",
    "VersionCounts",
    "compare",
    "counts_from_prometheus",
    "counts_from_scores",
    "load_patterns",
    "patterns_from_prometheus",
    "patterns_from_scores",
    "prometheus_duration",
]

Outcome = Literal["regressed", "no evidence", "improved", "not enough data"]
TestKind = Literal["sequential", "fixed"]

#: The mixture's standard deviation per metric, on the scale the metric is tested on: drops of
#: about 0.1 in a proportion, a rate ratio of about e^0.5 = 1.65 in excess IDs.
MIXTURE_SD: dict[str, float] = {
    "citation_accuracy": 0.1,
    "citation_coverage": 0.1,
    "ids_per_claim": 0.5,
    "misattribution_pattern": 0.1,
}

PatternCounts = dict[str, dict[str, int]]
"""Version → misattributed claims by pattern (every pattern named, zeros included)."""


VersionCounts = Tally
"""What the comparison needs of one version: its :class:`~citemon._core.tally.Tally` (correct,
cited and uncited claims, cited IDs), whose ratios are the values compared."""


@dataclass(slots=True)
class Test:
    """One metric compared: both values, their intervals, the difference and its p-value."""

    name: str
    baseline: float | None
    candidate: float | None
    baseline_ci95: tuple[float, float] | None = None
    candidate_ci95: tuple[float, float] | None = None
    p_value: float | None = None
    """The p-value the decision uses: always-valid (sequential) or fixed-sample."""
    worse_when: Literal["lower", "higher"] = "lower"
    z: float | None = None
    fixed_p_value: float | None = None
    """The two-sided p-value of the one-look z-test (valid for a single look only)."""
    sequential_p_value: float | None = None
    """The mixture SPRT's always-valid p-value (valid however often it is looked at)."""

    def decide_on(self, test: TestKind) -> None:
        self.p_value = self.sequential_p_value if test == "sequential" else self.fixed_p_value

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline

    def direction(self, alpha: float, min_effect: float) -> int:
        """-1 significantly worse, +1 significantly better, 0 no evidence."""
        delta = self.delta
        if delta is None or self.p_value is None or self.p_value >= alpha:
            return 0
        if abs(delta) < min_effect:
            return 0
        worse = delta < 0 if self.worse_when == "lower" else delta > 0
        return -1 if worse else 1


@dataclass(slots=True)
class Comparison:
    baseline: str
    candidate: str
    counts: dict[str, Tally]
    tests: list[Test] = field(default_factory=list)
    outcome: Outcome = "no evidence"
    test: TestKind = "sequential"
    pattern_counts: PatternCounts = field(default_factory=dict)
    patterns: list[Test] = field(default_factory=list)
    """Each pattern's rate per cited claim, baseline against candidate (not in the decision)."""
    changed: list[str] = field(default_factory=list)
    """The patterns whose rate the candidate changed (Bonferroni over the patterns)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "outcome": self.outcome,
            "test": self.test,
            "counts": {
                v: {"correct": c.correct, "cited": c.cited, "uncited": c.uncited,
                    "cited_ids": c.cited_ids, "multi_hop": c.multi_hop,
                    "misattribution_patterns": dict(self.pattern_counts.get(v, {}))}
                for v, c in self.counts.items()
            },
            "multi_hop_ceiling": {v: _r(c.multi_hop_ceiling) for v, c in self.counts.items()},
            "patterns_changed": list(self.changed),
            "patterns": [
                {"pattern": t.name, "baseline": _r(t.baseline), "candidate": _r(t.candidate),
                 "baseline_ci95": _ri(t.baseline_ci95), "candidate_ci95": _ri(t.candidate_ci95),
                 "delta": _r(t.delta), "p_value": _r(t.p_value),
                 "changed": t.name in self.changed}
                for t in self.patterns
            ],
            "tests": [
                {"metric": t.name, "baseline": _r(t.baseline), "candidate": _r(t.candidate),
                 "baseline_ci95": _ri(t.baseline_ci95), "candidate_ci95": _ri(t.candidate_ci95),
                 "delta": _r(t.delta), "p_value": _r(t.p_value), "z": _r(t.z),
                 "fixed_p_value": _r(t.fixed_p_value),
                 "sequential_p_value": _r(t.sequential_p_value)}
                for t in self.tests
            ],
        }  # fmt: skip


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _ri(x: tuple[float, float] | None) -> list[float] | None:
    return None if x is None else [round(x[0], 4), round(x[1], 4)]


def _proportion_test(
    name: Literal["citation_accuracy", "citation_coverage"], b: Tally, c: Tally
) -> Test:
    """The two versions' proportion ``name`` (a :class:`Tally` ratio of that name) compared."""

    def counts(t: Tally) -> tuple[int, int]:
        return (t.correct, t.cited) if name == "citation_accuracy" else (t.cited, t.judged)

    (s1, n1), (s2, n2) = counts(b), counts(c)
    z = two_proportion_z(s1, n1, s2, n2)
    variance = two_proportion_variance(s1, n1, s2, n2)
    test = Test(
        name=name,
        baseline=getattr(b, name),
        candidate=getattr(c, name),
        baseline_ci95=getattr(b, f"{name}_ci95"),
        candidate_ci95=getattr(c, f"{name}_ci95"),
    )
    if z is not None and variance is not None and test.delta is not None:
        test.z, test.fixed_p_value = z
        test.sequential_p_value = msprt_p_value(test.delta, variance, MIXTURE_SD[name])
    return test


def _pattern_tests(
    b: Tally, c: Tally, pb: dict[str, int], pc: dict[str, int], test: TestKind
) -> list[Test]:
    """Each pattern's misattributed claims per cited claim, baseline against candidate."""
    out = []
    for pattern in PATTERNS:
        s1, n1, s2, n2 = pb.get(pattern, 0), b.cited, pc.get(pattern, 0), c.cited
        t = Test(
            name=pattern,
            baseline=b.per_cited(s1),
            candidate=c.per_cited(s2),
            baseline_ci95=b.per_cited_ci95(s1),
            candidate_ci95=c.per_cited_ci95(s2),
            worse_when="higher",
        )
        z = two_proportion_z(s1, n1, s2, n2)
        variance = two_proportion_variance(s1, n1, s2, n2)
        if z is not None and variance is not None and t.delta is not None:
            t.z, t.fixed_p_value = z
            sd = MIXTURE_SD["misattribution_pattern"]
            t.sequential_p_value = msprt_p_value(t.delta, variance, sd)
        t.decide_on(test)
        out.append(t)
    return out


def _ids_test(b: Tally, c: Tally) -> Test:
    test = Test(
        name="ids_per_claim",
        baseline=b.ids_per_claim,
        candidate=c.ids_per_claim,
        worse_when="higher",
    )
    if b.cited and c.cited:
        # Excess IDs over one per claim, with a 0.5 continuity correction so zeros are defined.
        # Never below zero: Prometheus extrapolates and we round each counter's increase() on
        # its own, so a window of single-ID claims can read back one ID short.
        e1 = max(b.cited_ids - b.cited, 0) + 0.5
        e2 = max(c.cited_ids - c.cited, 0) + 0.5
        log_ratio = math.log(e2 / c.cited) - math.log(e1 / b.cited)
        variance = 1 / e1 + 1 / e2
        test.z = log_ratio / math.sqrt(variance)
        test.fixed_p_value = 2 * (1 - normal_cdf(abs(test.z)))
        test.sequential_p_value = msprt_p_value(log_ratio, variance, MIXTURE_SD[test.name])
    return test


def compare(
    counts: Mapping[str, Tally],
    baseline: str,
    candidate: str,
    *,
    alpha: float = 0.05,
    min_effect: float = 0.02,
    min_claims: int = 30,
    test: TestKind = "sequential",
    patterns: Mapping[str, dict[str, int]] | None = None,
) -> Comparison:
    """Compare ``candidate`` against ``baseline``; regressed if any metric is significantly worse.

    ``min_effect`` ignores significant but negligible differences (in absolute units of each
    metric); ``min_claims`` cited claims per version are needed before anything is concluded.
    ``test`` chooses the p-value the decision uses: ``sequential`` (always valid, for gates
    that look repeatedly) or ``fixed`` (the one-look z-test). ``patterns`` (version →
    misattributed claims by pattern) adds the pattern report, which never moves the outcome.
    """
    b, c = counts.get(baseline, Tally()), counts.get(candidate, Tally())
    result = Comparison(baseline, candidate, {baseline: b, candidate: c}, test=test)
    result.tests = [
        _proportion_test("citation_accuracy", b, c),
        _proportion_test("citation_coverage", b, c),
        _ids_test(b, c),
    ]
    for t in result.tests:
        t.decide_on(test)
    if patterns is not None:
        pb, pc = dict(patterns.get(baseline, {})), dict(patterns.get(candidate, {}))
        result.pattern_counts = {baseline: pb, candidate: pc}
        result.patterns = _pattern_tests(b, c, pb, pc, test)
        if min(b.cited, c.cited) >= min_claims:
            each = alpha / len(PATTERNS)
            result.changed = [t.name for t in result.patterns if t.direction(each, min_effect)]
    if min(b.cited, c.cited) < min_claims:
        result.outcome = "not enough data"
        return result
    directions = [t.direction(alpha, min_effect) for t in result.tests]
    if -1 in directions:
        result.outcome = "regressed"
    elif 1 in directions:
        result.outcome = "improved"
    return result


def counts_from_scores(lines: Iterable[str], *, service: str | None = None) -> dict[str, Tally]:
    """Per-version counts from ``citemon.scores`` JSON lines or a ``score --format json`` file."""
    out: dict[str, Tally] = {}
    for raw in _answers("".join(lines)):
        score = AnswerScore.model_validate(raw)
        if service is not None and score.service != service:
            continue
        tally = out.setdefault(score.version or "unknown", Tally())
        for claim in score.claims:
            tally.add(claim)
    return out


def _answers(text: str) -> list[Any]:
    """The answers of a scores file: JSON lines, or one ``score --format json`` document."""
    answers: list[Any]
    try:
        whole = json.loads(text)
        answers = whole["answers"] if isinstance(whole, dict) and "answers" in whole else [whole]
    except ValueError:
        answers = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                answers.append(json.loads(line))
            except ValueError as exc:
                raise InputError(f"not valid JSON ({exc})", line=number) from exc
    return answers


def patterns_from_scores(lines: Iterable[str], *, service: str | None = None) -> PatternCounts:
    """Per-version misattributed claims by pattern, from what :func:`counts_from_scores` reads
    (a claim written before patterns existed counts as ``other``)."""
    out: PatternCounts = {}
    for answer in _answers("".join(lines)):
        score = AnswerScore.model_validate(answer)
        if service is not None and score.service != service:
            continue
        counts = out.setdefault(score.version or "unknown", dict.fromkeys(PATTERNS, 0))
        for claim in score.claims:
            if claim.verdict == "misattributed":
                counts[claim.pattern or "other"] += 1
    return out


_DURATION = re.compile(
    r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?", re.ASCII
)


def prometheus_duration(text: str) -> str:
    """``text`` if it is a Prometheus duration (``1h``, ``90m``, ``1h30m``), else InputError:
    it goes into PromQL as a range, so nothing else may pass."""
    if not _DURATION.fullmatch(text) or not any(c in "123456789" for c in text):
        raise InputError(f"--window {text!r} is not a Prometheus duration (e.g. 1h, 30m, 1h30m)")
    return text


def _selector(versions: Iterable[str], service: str | None, window: str) -> str:
    """``{version=~"…",service="…"}[window]``: versions matched literally, the window checked."""
    labels = f'version=~"{"|".join(_quote(_literal(v)) for v in versions)}"'
    if service:
        labels += f',service="{_quote(service)}"'
    return f"{{{labels}}}[{prometheus_duration(window)}]"


def patterns_from_prometheus(
    url: str,
    versions: Iterable[str],
    *,
    window: str = "1h",
    service: str | None = None,
    client: httpx.Client | None = None,
) -> PatternCounts:
    """Per-version misattributed claims by pattern over ``window`` (all replicas)."""
    selector = _selector(versions, service, window)
    query = f"sum by (version, pattern) (increase(citemon_misattributions_total{selector}))"
    own = client is None
    http = client or httpx.Client(timeout=10.0)
    out: PatternCounts = {}
    try:
        for sample in _query(http, url, query):
            labels, value = sample["metric"], round(float(sample["value"][1]))
            counts = out.setdefault(labels.get("version", "unknown"), dict.fromkeys(PATTERNS, 0))
            pattern = labels.get("pattern", "other")
            counts[pattern] = counts.get(pattern, 0) + value
    finally:
        if own:
            http.close()
    return out


def counts_from_prometheus(
    url: str,
    versions: Iterable[str],
    *,
    window: str = "1h",
    service: str | None = None,
    client: httpx.Client | None = None,
) -> dict[str, Tally]:
    """Per-version counts over ``window`` from the Prometheus HTTP API (counters, all replicas)."""
    selector = _selector(versions, service, window)
    queries = {
        "claims": f"sum by (version, verdict) (increase(citemon_claims_total{selector}))",
        "ids": f"sum by (version) (increase(citemon_cited_ids_total{selector}))",
    }
    own = client is None
    http = client or httpx.Client(timeout=10.0)
    out: dict[str, Tally] = {}
    try:
        for key, query in queries.items():
            for sample in _query(http, url, query):
                labels, value = sample["metric"], round(float(sample["value"][1]))
                counts = out.setdefault(labels.get("version", "unknown"), Tally())
                if key == "ids":
                    counts.cited_ids += value
                else:
                    counts.add_verdict(labels.get("verdict", ""), value)
    finally:
        if own:
            http.close()
    return out


def _literal(value: str) -> str:
    """``value`` as a regular expression matching only itself (RE2: punctuation escaped), so a
    version such as ``1.2.0+build.5`` selects its own series and ``1.2`` not ``1x2``."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _query(http: httpx.Client, url: str, query: str) -> list[dict[str, Any]]:
    try:
        reply = http.get(f"{url.rstrip('/')}/api/v1/query", params={"query": query})
        reply.raise_for_status()
        body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        # Credentials in the URL (basic auth) are shown neither in it nor in httpx's message.
        raise InputError(
            f"Prometheus query failed at {redacted(url)}: {without_passwords(str(exc))}"
        ) from None
    if body.get("status") != "success":
        raise InputError(f"Prometheus query failed: {body.get('error', body)}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def load_scores(path: str, *, service: str | None = None) -> dict[str, Tally]:
    file = Path(path)
    if not file.is_file():
        raise InputError(f"no such file: {path}")
    with file.open(encoding="utf-8") as f:
        return counts_from_scores(f, service=service)


def load_patterns(path: str, *, service: str | None = None) -> PatternCounts:
    file = Path(path)
    if not file.is_file():
        raise InputError(f"no such file: {path}")
    with file.open(encoding="utf-8") as f:
        return patterns_from_scores(f, service=service)
