"""Counter series for ``promtool test rules`` input, written once for the generators.

``bench/detection_curve.py`` and the rule-test generators (``scripts/gen_detection_test.py``,
``scripts/gen_fast_burn_test.py``) all write Prometheus counters sample by sample in promtool's
expanding notation; this is the one place that turns per-scrape increments into those values.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["claims_labels", "counter"]


def counter(increments: Sequence[int | None]) -> str:
    """Cumulative values from per-scrape increments; None = no sample (the series is idle)."""
    total, out = 0, []
    for inc in increments:
        if inc is None:
            out.append("_")
        else:
            total += inc
            out.append(str(total))
    return " ".join(out)


def claims_labels(service: str, version: str, verdict: str) -> str:
    """The labels of one ``citemon_claims_total`` series as one monitor replica scrapes them."""
    return (
        f'service="{service}",version="{version}",environment="prod",verdict="{verdict}",'
        'instance="m-0",job="citemon"'
    )
