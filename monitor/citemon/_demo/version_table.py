"""The demo's per-version table, read from the monitor's Prometheus counters: answers,
citation accuracy with its 95% Wilson interval, coverage, IDs per claim, faithfulness, the
verdict mix and the dominant misattribution pattern, and the closing lines comparing v1 with
v2."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry

from citemon._core.stats import ratio, two_proportion_z
from citemon._core.tally import Tally

__all__ = ["render_versions", "verdict_line"]

_MIX: Final = ("correct", "misattributed", "multi_hop", "unsupported", "dangling", "uncited")


def _per_version(registry: CollectorRegistry) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            version = sample.labels.get("version")
            if version is None:
                continue
            row = out.setdefault(version, {})
            if sample.name == "citemon_claims_total":
                row[sample.labels["verdict"]] = row.get(sample.labels["verdict"], 0) + sample.value
            elif sample.name == "citemon_misattributions_total":
                key = f"pattern:{sample.labels['pattern']}"
                row[key] = row.get(key, 0) + sample.value
            elif sample.name in (
                "citemon_answers_total",
                "citemon_cited_ids_total",
                "citemon_faithful_claims_total",
            ):
                row[sample.name] = row.get(sample.name, 0) + sample.value
    return {v: row for v, row in out.items() if row.get("citemon_answers_total")}


def _tally(row: dict[str, float]) -> Tally:
    """The version's claim counters as a :class:`Tally`, which owns the ratios made of them."""
    tally = Tally(
        cited_ids=int(row.get("citemon_cited_ids_total", 0)),
        faithful=int(row.get("citemon_faithful_claims_total", 0)),
    )
    for verdict in _MIX:
        tally.add_verdict(verdict, int(row.get(verdict, 0)))
    return tally


def _pattern_share(row: dict[str, float], name: str) -> float | None:
    """The share of the version's misattributed claims that ``name`` explains."""
    total = sum(n for k, n in row.items() if k.startswith("pattern:"))
    return ratio(row.get(f"pattern:{name}", 0), total)


def _top_pattern(row: dict[str, float]) -> tuple[str, float] | None:
    """The most common misattribution pattern and its share of the misattributed claims."""
    counts = {k.removeprefix("pattern:"): n for k, n in row.items() if k.startswith("pattern:")}
    if not sum(counts.values()):
        return None
    name = max(counts, key=lambda k: counts[k])
    share = _pattern_share(row, name)
    return None if share is None else (name, share)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "  –" if value is None else format(value, spec)


def render_versions(registry: CollectorRegistry) -> str:
    """Per version: answers, accuracy with its 95% Wilson interval, coverage, IDs per claim,
    and the verdict mix — all from the monitor's Prometheus counters."""
    lines = [
        f"{'version':<8}{'answers':>8}{'accuracy':>10}  {'95% CI':<13}{'coverage':>9}"
        f"{'IDs/claim':>11}{'faithful':>10}   {'misattributed as':<22}"
        "verdicts: correct/misattr/multi-hop/unsupp/dangling/uncited"
    ]
    for version, row in sorted(_per_version(registry).items()):
        tally = _tally(row)
        ci = tally.citation_accuracy_ci95
        mix = "/".join(str(int(row.get(v, 0))) for v in _MIX)
        unjudged = int(row.get("unjudged", 0))
        top = _top_pattern(row)
        why = f"{top[0]} {top[1]:.0%}" if top else "–"
        mix += f" (+{unjudged} unjudged)" if unjudged else ""
        lines.append(
            f"{version:<8}{int(row['citemon_answers_total']):>8}"
            f"{_fmt(tally.citation_accuracy):>10}  "
            f"{(f'[{ci[0]:.2f}, {ci[1]:.2f}]' if ci else '–'):<13}"
            f"{_fmt(tally.citation_coverage):>9}"
            f"{_fmt(tally.ids_per_claim):>11}"
            f"{_fmt(tally.judged_faithfulness):>10}   "
            f"{why:<22}{mix}"
        )
    return "\n".join(lines)


def verdict_line(registry: CollectorRegistry) -> str | None:
    """v1 against v2: the drop in citation accuracy and its two-proportion z-test (``None``
    until both versions have cited claims)."""
    rows = _per_version(registry)
    if "v1" not in rows or "v2" not in rows:
        return None
    a, b = rows["v1"], rows["v2"]
    before, after = _tally(a), _tally(b)
    test = two_proportion_z(before.correct, before.cited, after.correct, after.cited)
    was_accuracy, now_accuracy = before.citation_accuracy, after.citation_accuracy
    if test is None or was_accuracy is None or now_accuracy is None:
        return None
    z, p = test
    line = (
        f"v1 → v2: citation accuracy {was_accuracy:.2f} → {now_accuracy:.2f} "
        f"({now_accuracy - was_accuracy:+.2f}; two-proportion z = {z:.1f}, "
        f"{'p < 1e-6' if p < 1e-6 else f'p = {p:.1g}'}).\n"
        "Faithfulness does not move: v2 says the same things and cites the wrong passage."
    )
    top = _top_pattern(b)
    if top is not None:
        name = top[0]
        share = _pattern_share(a, name)
        was = "none misattributed" if share is None else f"{share:.0%}"
        line += (
            f"\nWhy: {top[1]:.0%} of v2's misattributed claims are {name} (v1: {was});"
            " docs/why-citations-fail.md says who fixes it."
        )
    return line
