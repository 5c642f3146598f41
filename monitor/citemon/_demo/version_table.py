"""The demo's per-version table, read from the monitor's Prometheus counters: answers,
citation accuracy with its 95% Wilson interval, coverage, IDs per claim, faithfulness, the
verdict mix and the dominant misattribution pattern, and the closing lines comparing v1 with
v2."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry

from citemon._core.stats import two_proportion_z, wilson

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


def _cited(row: dict[str, float]) -> int:
    return int(sum(row.get(v, 0) for v in _MIX if v != "uncited"))


def _top_pattern(row: dict[str, float]) -> tuple[str, float] | None:
    """The most common misattribution pattern and its share of the misattributed claims."""
    counts = {k.removeprefix("pattern:"): n for k, n in row.items() if k.startswith("pattern:")}
    total = sum(counts.values())
    if not total:
        return None
    name = max(counts, key=lambda k: counts[k])
    return name, counts[name] / total


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
        cited = _cited(row)
        correct = int(row.get("correct", 0))
        judged = cited + int(row.get("uncited", 0))
        faithful = row.get("citemon_faithful_claims_total", 0)
        ci = wilson(correct, cited)
        mix = "/".join(str(int(row.get(v, 0))) for v in _MIX)
        unjudged = int(row.get("unjudged", 0))
        top = _top_pattern(row)
        why = f"{top[0]} {top[1]:.0%}" if top else "–"
        mix += f" (+{unjudged} unjudged)" if unjudged else ""
        lines.append(
            f"{version:<8}{int(row['citemon_answers_total']):>8}"
            f"{_fmt(correct / cited if cited else None):>10}  "
            f"{(f'[{ci[0]:.2f}, {ci[1]:.2f}]' if ci else '–'):<13}"
            f"{_fmt(cited / judged if judged else None):>9}"
            f"{_fmt(row.get('citemon_cited_ids_total', 0) / cited if cited else None):>11}"
            f"{_fmt(faithful / judged if judged else None):>10}   "
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
    s1, n1, s2, n2 = int(a.get("correct", 0)), _cited(a), int(b.get("correct", 0)), _cited(b)
    test = two_proportion_z(s1, n1, s2, n2)
    if test is None or not n1 or not n2:
        return None
    z, p = test
    line = (
        f"v1 → v2: citation accuracy {s1 / n1:.2f} → {s2 / n2:.2f} "
        f"({s2 / n2 - s1 / n1:+.2f}; two-proportion z = {z:.1f}, "
        f"{'p < 1e-6' if p < 1e-6 else f'p = {p:.1g}'}).\n"
        "Faithfulness does not move: v2 says the same things and cites the wrong passage."
    )
    top = _top_pattern(b)
    if top is not None:
        name = top[0]
        base = sum(n for k, n in a.items() if k.startswith("pattern:"))
        was = f"{a.get(f'pattern:{name}', 0) / base:.0%}" if base else "none misattributed"
        line += (
            f"\nWhy: {top[1]:.0%} of v2's misattributed claims are {name} (v1: {was});"
            " docs/why-citations-fail.md says who fixes it."
        )
    return line
