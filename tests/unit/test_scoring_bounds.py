"""The judge-call bound per answer, typed ``unjudged`` causes, and CPU work off the event loop
(or, for decoding, in slices)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry

from bench.loop_stall import payload as bench_payload
from citemon._core.judge import CPUJudge
from citemon._core.records import AnswerRecord, AnswerScore, Passage, Verdict
from citemon._engine.scoring import Scorer
from citemon._engine.settings import ScoringSettings
from citemon._engine.support_search import allot
from citemon._metrics import Metrics
from citemon._otlp.assembly import TRACE_OUTCOMES
from citemon._service.answers import AnswerCounts, JudgeGate, judge_failed, score_with_retries
from citemon._service.settings import Settings
from citemon.judges.lexical import LexicalJudge
from tests.built import Build
from tests.oracles import OracleJudge

CLAIM = "The reactor output rose by twelve percent in the third quarter."


def _haystack(n: int, supporter: int, *, supporter_words: bool = True) -> AnswerRecord:
    """An answer citing p0 wrongly, over ``n`` passages: p{supporter} is the one that entails
    it (sharing the claim's words unless told not to); the rest share no word with it."""
    passages = [Passage(id=f"p{i}", text=f"filler number {i} about gardening") for i in range(n)]
    if supporter_words:
        passages[supporter] = Passage(id=f"p{supporter}", text=CLAIM)
    return AnswerRecord(answer=f"{CLAIM} [p0]", passages=passages)


async def test_a_1000_passage_search_is_cut_at_the_bound_keeping_the_likely_supporter() -> None:
    judge = OracleJudge({CLAIM: {"p999"}}, joint={CLAIM: {f"p{i}" for i in range(1000)}})
    score = await Scorer(judge, ScoringSettings(max_judge_calls_per_answer=100)).score(
        _haystack(1000, 999)
    )
    (claim,) = score.claims
    # 1 citation check + 1 faithfulness call, then 98 of the 999 other passages, ranked by
    # overlap: p999 (every word in common) first, then retrieval order.
    assert len(judge.calls) == 100 and score.judge_calls == 100
    assert claim.search_cut == 901 and score.judge_calls_cut == 901
    assert [shown for _, shown in judge.calls[2:4]] == [("p999",), ("p1",)]
    assert (claim.verdict, claim.supported_by, claim.unjudged_cause) == (
        "misattributed",
        ["p999"],
        None,
    )


async def test_a_cut_search_that_found_no_supporter_is_unjudged_not_multi_hop() -> None:
    # The supporter shares no word with the claim: ranked last, cut. "multi_hop" would claim
    # no single passage supports it, which was not checked.
    judge = OracleJudge({CLAIM: {"p500"}}, joint={CLAIM: {f"p{i}" for i in range(1000)}})
    score = await Scorer(judge, ScoringSettings(max_judge_calls_per_answer=50)).score(
        _haystack(1000, 500, supporter_words=False)
    )
    (claim,) = score.claims
    assert score.judge_calls == 50 and claim.search_cut == 999 - 48
    assert (claim.verdict, claim.unjudged_cause, claim.faithful) == ("unjudged", "search_cut", True)
    assert claim.reason is not None and "48 of 999 passages asked" in claim.reason
    assert not judge_failed(score)  # no evidence about the judge: never retried, never gated


async def test_zero_means_no_bound_and_an_uncut_search_is_multi_hop() -> None:
    judge = OracleJudge({}, joint={CLAIM: {f"p{i}" for i in range(300)}})
    score = await Scorer(judge, ScoringSettings(max_judge_calls_per_answer=0)).score(
        _haystack(300, 1, supporter_words=False)
    )
    assert score.judge_calls == 2 + 299 and score.judge_calls_cut == 0
    assert score.claims[0].verdict == "multi_hop"


def test_the_budget_is_shared_max_min_fairly() -> None:
    assert allot([5, 300, 300], 100) == [5, 47, 48]
    assert allot([10, 20], 100) == [10, 20]
    assert allot([7, 7, 7], 0) == [0, 0, 0]


async def test_two_failed_claims_share_what_is_left_of_the_bound() -> None:
    other = "The pump pressure fell by nine bar during the night shift."
    passages = [Passage(id=f"p{i}", text=f"filler {i}") for i in range(200)]
    rec = AnswerRecord(answer=f"{CLAIM} [p0] {other} [p0]", passages=passages)
    judge = OracleJudge({}, joint={c: {f"p{i}" for i in range(200)} for c in (CLAIM, other)})
    score = await Scorer(judge, ScoringSettings(max_judge_calls_per_answer=100)).score(rec)
    # 2 x (citation check + faithfulness) = 4; 96 left: 48 each of 199.
    assert score.judge_calls == 100
    assert [c.search_cut for c in score.claims] == [151, 151]
    assert [c.unjudged_cause for c in score.claims] == ["search_cut", "search_cut"]


async def test_a_truncated_answers_judge_failure_stays_a_judge_failure() -> None:
    rec = AnswerRecord(
        answer="Alpha [p1]. Beta [p1].",
        passages=[Passage(id="p1", text="x"), Passage(id="p2", text="y")],
        truncated=True,
    )
    failing = await Scorer(OracleJudge({}, fail_on={"Alpha.", "Beta."})).score(rec)
    assert [c.unjudged_cause for c in failing.claims] == ["judge_failure", "judge_failure"]
    assert judge_failed(failing)  # retried, and outage evidence: not a success probe
    fine = await Scorer(OracleJudge({"Alpha.": {"p1"}})).score(rec)
    assert [(c.verdict, c.unjudged_cause) for c in fine.claims] == [
        ("correct", None),
        ("unjudged", "truncated"),
    ]
    assert not judge_failed(fine)


async def test_an_answer_that_asked_the_judge_nothing_does_not_reopen_the_gate() -> None:
    gate = JudgeGate(backoff_s=0.01, backoff_max_s=0.01)
    gate.report(ok=False, started=0.0, probe=False)
    assert gate.down
    scorer, settings, counts = Scorer(LexicalJudge()), Settings(), AnswerCounts()

    async def score_once(record: AnswerRecord) -> AnswerScore:
        return await score_with_retries(
            record, scorer=scorer, gate=gate, settings=settings, counts=counts, clock=time.monotonic
        )

    score = await score_once(AnswerRecord(answer="No claims here ...", passages=[]))
    assert score.judge_calls == 0
    assert gate.down and gate.probes == 1  # the probe went through and proved nothing
    ok = await score_once(
        AnswerRecord(answer="Alpha beta [p1].", passages=[Passage(id="p1", text="Alpha beta.")])
    )
    assert ok.judge_calls == 1 and not gate.down


def test_unjudged_causes_and_cut_calls_are_counted() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    score = asyncio.run(
        Scorer(
            OracleJudge({CLAIM: {"p500"}}), ScoringSettings(max_judge_calls_per_answer=50)
        ).score(_haystack(1000, 500, supporter_words=False))
    )
    metrics.record_answer(score)
    get = registry.get_sample_value
    assert get("citemon_unjudged_claims_total", {"cause": "search_cut"}) == 1
    assert get("citemon_unjudged_claims_total", {"cause": "judge_failure"}) == 0
    assert get("citemon_judge_calls_cut_total") == 951


async def test_trace_outcomes_are_exported_from_the_assembler(build: Build) -> None:
    registry = CollectorRegistry()
    assembler = build(Settings(), registry=registry).assembler
    for outcome in TRACE_OUTCOMES:  # every series from the first scrape, at 0
        assert registry.get_sample_value("citemon_traces_total", {"outcome": outcome}) == 0
    assembler.completed, assembler.settled, assembler.evicted = 3, 2, 1
    assembler.dropped_incomplete, assembler.superseded = 4, 5
    assembler.unrecognized, assembler.no_passages, assembler.no_answer = 6, 3, 1
    assembler.citations_not_recorded = 7
    assembler.no_content = 8
    got = {
        o: registry.get_sample_value("citemon_traces_total", {"outcome": o}) for o in TRACE_OUTCOMES
    }
    assert got == {
        "completed": 3,
        "settled": 2,
        "dropped_incomplete": 4,
        "evicted": 1,
        "superseded": 5,
        "unrecognized": 6,
        "no_passages": 3,
        "no_answer": 1,
        "citations_not_recorded": 7,
        "no_content": 8,
    }


class _ThreadRecordingJudge(LexicalJudge):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def check(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        self.threads.add(threading.current_thread().name)
        return super().check(claim, passages)


async def test_with_an_executor_cpu_judges_run_in_its_threads_not_on_the_loop() -> None:
    judge = _ThreadRecordingJudge()
    assert isinstance(judge, CPUJudge)
    rec = AnswerRecord(
        answer="Alpha beta [p1]. Gamma delta [p1].",
        passages=[Passage(id="p1", text="Alpha beta."), Passage(id="p2", text="Gamma delta.")],
    )
    with ThreadPoolExecutor(2, thread_name_prefix="citemon-cpu") as pool:
        offloaded = await Scorer(judge, executor=pool).score(rec)
    assert judge.threads and all(t.startswith("citemon-cpu") for t in judge.threads)
    judge.threads.clear()
    inline = await Scorer(judge).score(rec)
    assert judge.threads == {threading.current_thread().name}
    assert offloaded == inline  # the same verdicts either way


def _fetch(tp: TopicPartition, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    payload = bench_payload()  # 2 MB of OTLP: milliseconds to decode each
    return [
        ConsumerRecord(tp.topic, tp.partition, i, 0, 0, None, payload, None, 0, len(payload), [])
        for i in range(n)
    ]


async def test_a_large_fetch_is_decoded_in_slices_and_a_rebalance_drops_the_rest(
    build: Build,
) -> None:
    tp = TopicPartition("t", 0)
    pipeline = build(Settings(sample_rate=0.0))
    await pipeline.on_partitions_assigned([tp])
    records = _fetch(tp, 40)
    yields = 0

    async def rebalance_at_the_first_yield() -> None:
        nonlocal yields
        yields += 1
        await pipeline.on_partitions_revoked([])  # a rebalance begins, revoking nothing

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.gather(pipeline.intake.take_all({tp: records}), rebalance_at_the_first_yield())
    assert yields == 1
    # The other task ran at the first slice's end: the fetch stopped there, and what it took
    # is tracked in order (the rest is fetched again from the committed offset).
    taken = pipeline.stats.records
    assert 1 <= taken < len(records), (taken, loop.time() - t0)
    assert pipeline.stats.sampled_out == taken
    assert [r.offset for r in pipeline.offsets.ready()] == [taken]
    # Without a rebalance every record is taken.
    (ready,) = pipeline.offsets.ready()
    pipeline.offsets.confirm(ready)
    await pipeline.intake.take_all({tp: _fetch(tp, 50)[taken:]})
    assert pipeline.stats.records == 50
