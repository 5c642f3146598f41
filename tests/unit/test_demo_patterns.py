"""The demo's v2 (every claim cites the first retrieved passage) is named for what it is:
``first_retrieved`` dominates its row of the demo's table and the closing lines."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry

from citemon._demo.data import QUESTIONS, answer
from citemon._demo.version_table import render_versions, verdict_line
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics
from citemon.judges.lexical import LexicalJudge


async def test_the_demo_table_names_v2s_pattern() -> None:
    rng = random.Random(0)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    scorer = Scorer(LexicalJudge())
    for version, bug in (("v1", False), ("v2", True)):
        for i in range(60):
            fault = "misattributed" if i % 5 == 0 else "correct"
            record = answer(rng.choice(QUESTIONS), fault, f"{version}-{i}", first_passage_bug=bug,
                            service="support-bot", version=version, environment="demo")  # fmt: skip
            metrics.record_answer(await scorer.score(record))
    table = render_versions(registry).splitlines()
    column = table[0].index("misattributed as")
    assert table[0][column:] == (
        "misattributed as      verdicts: correct/misattr/multi-hop/unsupp/dangling/uncited"
    )
    v1, v2 = table[1], table[2]
    assert v1.startswith("v1") and v1[column:].split()[:2] == ["other", "100%"], v1
    assert v2.startswith("v2") and v2[column:].split()[:2] == ["first_retrieved", "100%"], v2
    closing = verdict_line(registry)
    assert closing is not None
    assert closing.splitlines()[-1] == (
        "Why: 100% of v2's misattributed claims are first_retrieved (v1: 0%);"
        " docs/why-citations-fail.md says who fixes it."
    )
