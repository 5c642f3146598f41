"""Misattribution patterns: each rule, the bugs of a fake RAG service classified through the
shim's spans, patterns changing no verdict or count, and the chance rates against a simulation."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import citemon._engine.scoring as scoring
from citemon._core.records import PATTERNS, AnswerRecord, ClaimResult, Passage
from citemon._core.tally import Tally
from citemon._core.text import DEFAULT_PASSAGE_ID_KEYS
from citemon._engine.patterns import assign_patterns, chance_rates, off_by_one_chance
from citemon._engine.scoring import Scorer
from citemon._engine.settings import ScoringSettings
from citemon._engine.summary import summarize
from citemon._metrics import Metrics
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import record_answer
from tests.buggy_rag import BUGS, Planted, buggy_answers, oracle_for, span_passages
from tests.oracles import OracleJudge

KEYS = DEFAULT_PASSAGE_ID_KEYS


def _record(k: int, **meta: Any) -> AnswerRecord:
    return AnswerRecord(
        answer="-", passages=[Passage(id=f"p{i}", text=f"t{i}", **meta) for i in range(1, k + 1)]
    )


def _claim(
    sentence: int,
    cited: list[str],
    verdict: str = "misattributed",
    support: list[str] | None = None,
) -> ClaimResult:
    return ClaimResult(
        sentence=sentence,
        text=f"claim {sentence}",
        cited_ids=cited,
        resolved_ids=cited,
        verdict=verdict,  # type: ignore[arg-type]
        supported_by=support if support is not None else [],
    )


# -- the rules, one at a time ---------------------------------------------------------------------


@pytest.mark.parametrize("shift", [1, -1])
def test_off_by_one_needs_two_claims_with_one_offset(shift: int) -> None:
    record = _record(5)
    # cited position = support position + shift, for both misattributed claims
    a = _claim(0, [f"p{2 + shift}"], support=["p2"])
    b = _claim(1, [f"p{4 + shift}"], support=["p4"])
    correct = _claim(2, ["p1"], "correct", ["p1"])
    assign_patterns([a, b, correct], record, KEYS)
    assert (a.pattern, b.pattern, correct.pattern) == ("off_by_one", "off_by_one", None)


def test_one_shifted_claim_or_mixed_offsets_are_not_off_by_one() -> None:
    record = _record(5)
    alone = _claim(0, ["p3"], support=["p2"])
    assign_patterns([alone], record, KEYS)
    assert alone.pattern == "other"
    plus, minus = _claim(0, ["p3"], support=["p2"]), _claim(1, ["p3"], support=["p4"])
    assign_patterns([plus, minus], record, KEYS)
    assert (plus.pattern, minus.pattern) == ("other", "previous_citation")


def test_first_retrieved_is_the_top_passage_cited_alone() -> None:
    record = _record(4)
    first = _claim(0, ["p1"], support=["p3"])
    with_another = _claim(1, ["p1", "p2"], support=["p4"])
    assign_patterns([first, with_another], record, KEYS)
    assert (first.pattern, with_another.pattern) == ("first_retrieved", "other")


def test_previous_citation_compares_with_the_last_cited_claim_of_an_earlier_sentence() -> None:
    record = _record(4)
    claims = [
        _claim(0, ["p2"], "correct", ["p2"]),
        _claim(1, [], "uncited"),  # skipped: no citation
        _claim(2, ["p2"], support=["p4"]),  # repeats sentence 0's citation
        _claim(3, ["p3"], support=["p4"]),
        _claim(3, ["p3"], support=["p2"]),  # a part of the same sentence: not compared
    ]
    assign_patterns(claims, record, KEYS)
    assert [c.pattern for c in claims] == [None, None, "previous_citation", "other", "other"]


def test_same_document_by_source_or_metadata_id_but_not_a_chunk_id() -> None:
    by_source = AnswerRecord(
        answer="-",
        passages=[
            Passage(id="p1", text="a", source="x.md"),
            Passage(id="p2", text="b", source="guide.md"),
            Passage(id="p3", text="c", source="guide.md"),
        ],
    )
    claim = _claim(0, ["p2"], support=["p3"])
    assign_patterns([claim], by_source, KEYS)
    assert claim.pattern == "same_document"
    by_meta = AnswerRecord(
        answer="-",
        passages=[
            Passage(id="p1", text="a"),
            Passage(id="p2", text="b", metadata={"ref_doc_id": "doc-7", "passage_id": "p2"}),
            Passage(id="p3", text="c", metadata={"ref_doc_id": "doc-7", "passage_id": "p3"}),
            Passage(id="p4", text="d", metadata={"passage_id": "p2"}),  # p2's chunk ID, no doc
        ],
    )
    sibling, chunk_id = _claim(0, ["p2"], support=["p3"]), _claim(1, ["p4"], support=["p2"])
    assign_patterns([sibling, chunk_id], by_meta, KEYS)
    assert (sibling.pattern, chunk_id.pattern) == ("same_document", "other")
    # Another key set: the document ID is no longer one.
    assign_patterns([sibling], by_meta, ("doc_id",))
    assert sibling.pattern == "other"


def test_the_order_decides_when_several_hold() -> None:
    record = _record(3, source="one.md")  # every passage one document
    # cites p1 (first_retrieved), as the claim before it did (previous_citation), same doc
    claims = [_claim(0, ["p1"], "correct", ["p1"]), _claim(1, ["p1"], support=["p3"])]
    assign_patterns(claims, record, KEYS)
    assert claims[1].pattern == "first_retrieved"
    claims = [_claim(0, ["p2"], "correct", ["p2"]), _claim(1, ["p2"], support=["p3"])]
    assign_patterns(claims, record, KEYS)
    assert claims[1].pattern == "previous_citation"


def test_a_verdict_that_is_not_misattributed_has_no_pattern() -> None:
    claims = [_claim(0, ["p1"], v) for v in ("correct", "multi_hop", "unsupported", "unjudged")]
    for c in claims:
        c.pattern = "other"  # a stale value is cleared
    assign_patterns(claims, _record(3), KEYS)
    assert [c.pattern for c in claims] == [None] * 4


def test_the_multi_hop_ceiling() -> None:
    assert Tally(cited=10, multi_hop=2, correct=5).multi_hop_ceiling == pytest.approx(0.8)
    assert Tally(cited=3).multi_hop_ceiling == 1.0
    assert Tally().multi_hop_ceiling is None


# -- a fake RAG service with each bug, through the shim's spans and the OTLP decoder -------------


def _through_the_shim(records: list[AnswerRecord]) -> list[AnswerRecord]:
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "buggy-rag", "service.version": "v-bug"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for r in records:
        record_answer(
            question=r.question,
            answer=r.answer,
            passages=span_passages(r),
            tracer_provider=provider,
        )
    provider.shutdown()
    decoded = decode_otlp_proto(encode_spans(memory.get_finished_spans()).SerializeToString())
    assert decoded.records and len(decoded.records) == len(records)
    return list(decoded.records)


@pytest.mark.parametrize("bug", sorted(BUGS))
async def test_each_bug_of_a_fake_rag_service_gets_its_pattern(bug: str) -> None:
    planted = list(buggy_answers(bug, 40, seed=7))
    records = _through_the_shim([p.record for p in planted])
    scores = await Scorer(oracle_for(planted)).score_many(records)
    summary = summarize(scores).as_dict()
    patterns = Counter(c.pattern for s in scores for c in s.claims if c.verdict == "misattributed")
    want = BUGS[bug]
    assert set(patterns) == {want}, patterns
    assert summary["misattribution_patterns"][want] == summary["verdicts"]["misattributed"]
    expected_wrong = {
        "zero_based": None,  # claims about the first passage cite [0]: dangling, not misattributed
        "first_passage": None,  # claims about the first passage are correct
        "carry_forward": 2 * 40,
        "sibling_chunk": 40,
    }[bug]
    if expected_wrong is not None:
        assert summary["verdicts"]["misattributed"] == expected_wrong
    else:
        about_first = sum(
            any(pid.endswith("-p1") for ids in p.truth.values() for pid in ids) for p in planted
        )
        other_verdict = "dangling" if bug == "zero_based" else "correct"
        assert summary["verdicts"][other_verdict] >= about_first > 0
        assert summary["verdicts"]["misattributed"] == 3 * 40 - about_first


# -- a pattern changes no verdict and no count ----------------------------------------------------


def _random_answer(
    rng: random.Random, index: int
) -> tuple[AnswerRecord, dict[str, set[str]], dict[str, set[str]]]:
    k = rng.randint(1, 6)
    docs = ["a.md", "b.md", None]
    passages = []
    for i in range(1, k + 1):
        doc = rng.choice(docs)
        meta = rng.choice(
            [None, {"doc_id": rng.choice(["D1", "D2"])}, {"passage_id": f"r{index}-{i}"}]
        )
        passages.append(Passage(id=f"r{index}-{i}", text=f"text {i}", source=doc, metadata=meta))
    support: dict[str, set[str]] = {}
    joint: dict[str, set[str]] = {}
    sentences = []
    for n in range(rng.randint(1, 5)):
        claim = f"Answer {index} claim {n} is stated."
        ids = [p.id for p in passages]
        support[claim] = set(rng.sample(ids, rng.randint(0, min(2, k))))
        if rng.random() < 0.2 and k >= 2:
            joint[claim] = set(rng.sample(ids, 2))
        markers = []
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            kind = rng.random()
            if kind < 0.4:
                markers.append(rng.choice(ids))
            elif kind < 0.7:
                markers.append(str(rng.randint(0, k + 1)))
            elif kind < 0.85:
                markers.append(rng.choice(["D1", "D2"]))
            else:
                markers.append("zz-404")
        sentences.append(claim + "".join(f" [{m}]" for m in markers))
    record = AnswerRecord(
        id=f"r{index}",
        answer=" ".join(sentences),
        passages=passages,
        version=rng.choice(["v1", "v2"]),
        truncated=rng.random() < 0.05,
    )
    return record, support, joint


async def test_patterns_change_no_verdict_and_no_count(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(2026)
    answers = [_random_answer(rng, i) for i in range(600)]
    support = {c: s for _, sup, _ in answers for c, s in sup.items()}
    joint = {c: s for _, _, j in answers for c, s in j.items()}
    records = [r for r, _, _ in answers]
    for policy in ("any_of", "single"):
        options = ScoringSettings(policy=policy)  # type: ignore[arg-type]
        with_patterns = await Scorer(OracleJudge(support, joint), options).score_many(records)
        with monkeypatch.context() as m:
            m.setattr(scoring, "assign_patterns", lambda *a, **k: None)
            without = await Scorer(OracleJudge(support, joint), options).score_many(records)
        wrong = 0
        for a, b in zip(with_patterns, without, strict=True):
            for ca, cb in zip(a.claims, b.claims, strict=True):
                assert (ca.pattern is not None) == (ca.verdict == "misattributed")
                assert cb.pattern is None
                assert ca.model_dump(exclude={"pattern"}) == cb.model_dump()
                wrong += ca.verdict == "misattributed"
            assert a.judge_calls == b.judge_calls
        sa, sb = summarize(with_patterns).as_dict(), summarize(without).as_dict()
        assert sum(sa["misattribution_patterns"].values()) == wrong > 50
        assert len({p for p, n in sa["misattribution_patterns"].items() if n}) >= 3
        sa.pop("misattribution_patterns"), sb.pop("misattribution_patterns")
        assert sa == sb
        # and the metrics: the same counters, plus the patterns, which add up to misattributed
        regs = CollectorRegistry(), CollectorRegistry()
        for reg, scores in zip(regs, (with_patterns, without), strict=True):
            metrics = Metrics(reg)
            for s in scores:
                metrics.record_answer(s)
        for version in ("v1", "v2"):
            labels = {"service": "unknown", "version": version, "environment": "unknown"}
            claims = {
                v: regs[0].get_sample_value("citemon_claims_total", labels | {"verdict": v})
                for v in ("correct", "misattributed", "multi_hop", "unsupported", "dangling")
            }
            assert claims == {
                v: regs[1].get_sample_value("citemon_claims_total", labels | {"verdict": v})
                for v in claims
            }
            by_pattern = [
                regs[0].get_sample_value("citemon_misattributions_total", labels | {"pattern": p})
                for p in PATTERNS
            ]
            assert sum(p or 0 for p in by_pattern) == claims["misattributed"]


# -- chance rates: the formulas against a seeded simulation of the classifier itself -------------


def _one_random_miscitation(rng: random.Random, k: int) -> str:
    """The model of :func:`chance_rates`: a cited claim before (uniform), then one wrong one."""
    record = _record(k)
    ids = [p.id for p in record.passages]
    q = rng.choice(ids)
    s = rng.choice(ids)
    c = rng.choice([p for p in ids if p != s])
    claims = [_claim(0, [q], "correct", [q]), _claim(1, [c], support=[s])]
    assign_patterns(claims, record, KEYS)
    assert claims[1].pattern is not None
    return claims[1].pattern


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_chance_rates_match_a_simulation(k: int) -> None:
    rng = random.Random(k)
    draws = 20_000
    got = Counter(_one_random_miscitation(rng, k) for _ in range(draws))
    for pattern, rate in chance_rates(k).items():
        se = max((rate * (1 - rate) / draws) ** 0.5, 1e-9)
        assert abs(got[pattern] / draws - rate) <= 4.5 * se + 1e-12, (pattern, got, rate)
    assert chance_rates(3) == pytest.approx(
        {"off_by_one": 0, "first_retrieved": 1 / 3, "previous_citation": 2 / 9,
         "same_document": 0, "other": 4 / 9}
    )  # fmt: skip


@pytest.mark.parametrize(("k", "n"), [(3, 2), (5, 2), (4, 3), (3, 1)])
def test_off_by_one_chance_matches_a_simulation(k: int, n: int) -> None:
    rng = random.Random(100 * k + n)
    draws = 20_000
    hits = 0
    for _ in range(draws):
        record = _record(k)
        ids = [p.id for p in record.passages]
        claims = []
        for i in range(n):
            s = rng.choice(ids)
            claims.append(_claim(2 * i, [rng.choice([p for p in ids if p != s])], support=[s]))
        assign_patterns(claims, record, KEYS)
        hits += claims[0].pattern == "off_by_one"
    rate = off_by_one_chance(k, n)
    se = max((rate * (1 - rate) / draws) ** 0.5, 1e-9)
    assert abs(hits / draws - rate) <= 4.5 * se + 1e-12, (hits, rate)


def test_planted_answers_are_what_they_say() -> None:
    """The fake service's own promise: three claims, five passages, one supporter each."""
    for bug in BUGS:
        for p in buggy_answers(bug, 5):
            assert isinstance(p, Planted) and len(p.record.passages) == 5
            assert len(p.truth) == 3 and all(len(s) == 1 for s in p.truth.values())
    with pytest.raises(ValueError, match="unknown bug"):
        next(buggy_answers("nope", 1))


def test_the_docs_chance_table_and_its_example_are_chance_rates() -> None:
    """docs/why-citations-fail.md quotes chance_rates(k) for k = 3, 5, 10 and reads one mix
    against it: the page's numbers are the function's."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "why-citations-fail.md").read_text()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `(\w+)` \|[^\n]*?\|([^|\n]+\|[^|\n]+\|[^|\n]+)\|$", page, re.M)
    }
    for pattern in ("first_retrieved", "previous_citation", "other"):
        cells = [float(c) for c in rows[pattern].split("|")]
        assert cells == [round(chance_rates(k)[pattern], 2) for k in (3, 5, 10)], pattern
    pairs = re.findall(r"\(\*n\* = 2: ([\d.]+)\)", rows["off_by_one"])
    assert [float(p) for p in pairs] == [round(off_by_one_chance(k, 2), 2) for k in (3, 5, 10)]
    example = re.search(
        r"a version at (\d+)% `first_retrieved` with five passages is at chance", page
    )
    assert example is not None
    assert int(example.group(1)) / 100 == pytest.approx(chance_rates(5)["first_retrieved"])
