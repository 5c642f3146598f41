"""The classifier judge against a loopback server in TEI's exact ``/predict`` shape.

The server (tests/tei_server.py) scores a pair by the share of the claim's content words found
in the premise, with whitespace words as tokens, so every score and chunk here is known exactly.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from citemon._core.errors import JudgeHTTPError, JudgeInvalidReply
from citemon.judges.cache import ReplyCache
from citemon.judges.classifier import ClassifierJudge
from citemon.judges.transport import HTTPTransport
from tests.integration.test_http_judge_faults import RecordingObserver
from tests.judge_server import Fault
from tests.oracles import EntailsBatch
from tests.tei_server import OVERLOADED, UNHEALTHY, TEIServer, share_score

FAST = {"backoff_base_s": 0.005, "backoff_max_s": 0.05}
CLAIM = "Audit logs retention period is ninety days."
SENTENCE = "The retention period for audit logs is ninety days ."  # 10 words
FILLER = [f"w{n}" for n in range(200)]  # words that are none of the claim's


def _passage(before: int, after: int) -> str:
    return " ".join([*FILLER[:before], SENTENCE, *FILLER[before : before + after]])


async def test_request_shape_and_known_scores() -> None:
    async with TEIServer() as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), threshold=0.6
        ) as judge:
            yes = await judge.entails(CLAIM, {"p1": SENTENCE})
            half = await judge.entails("Audit logs are encrypted at rest.", {"p1": SENTENCE})
        request = server.requests[0]
        assert request.path == "/predict"
        assert request.body == {
            "inputs": [[SENTENCE, CLAIM]],
            "truncate": True,
            "raw_scores": False,
        }
    assert yes.entailed is True and yes.confidence == 1.0
    assert yes.reason == "entailment score 1.000 (one chunk) >= threshold 0.6"
    # audit, logs found; encrypted, rest not: 2 of 4 content words.
    assert half.confidence == share_score(SENTENCE, "Audit logs are encrypted at rest.") == 0.5
    assert half.entailed is False


async def test_passages_are_joined_in_order_and_only_those_shown_are_sent() -> None:
    async with (
        TEIServer() as server,
        ClassifierJudge(HTTPTransport(server.base_url, "classifier", **FAST)) as judge,
    ):
        verdict = await judge.entails(
            CLAIM, {"b": "Audit logs retention period", "a": "ninety days"}
        )
        assert server.requests[0].body["inputs"] == [
            ["Audit logs retention period\n\nninety days", CLAIM]
        ]
    assert verdict.entailed is True
    assert (await _no_passages()).reason == "no passages were shown"


async def _no_passages():  # type: ignore[no-untyped-def]
    judge = ClassifierJudge(HTTPTransport("http://127.0.0.1:9", "classifier"))
    try:
        return await judge.entails(CLAIM, {})
    finally:
        await judge.aclose()


async def test_label_is_matched_case_insensitively() -> None:
    server = TEIServer(labels=("LABEL_0", "LABEL_1"), entail_label="LABEL_1")
    async with (
        server,
        ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), label="label_1"
        ) as judge,
    ):
        verdict = await judge.entails(CLAIM, {"p1": SENTENCE})
    assert verdict.entailed is True and verdict.confidence == 1.0


async def test_a_label_the_model_lacks_fails_at_once_naming_its_labels() -> None:
    async with TEIServer(labels=("LABEL_0", "LABEL_1"), entail_label="LABEL_1") as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", retries=3, **FAST)
        ) as judge:
            with pytest.raises(JudgeInvalidReply, match=r"no label 'entailment'.*LABEL_0.*LABEL_1"):
                await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 1  # not retried: asking again cannot help


async def test_entailing_sentence_in_the_second_chunk_is_found() -> None:
    passage = _passage(before=45, after=15)  # 70 words: chunks [0, 40) and [30, 70)
    async with TEIServer(max_input_length=50) as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), window_words=40, overlap_words=10
        ) as judge:
            verdict = await judge.entails(CLAIM, {"p1": passage})
        (request,) = server.requests
        first, second = (pair[0].split() for pair in request.body["inputs"])
        assert (len(first), len(second)) == (40, 40)
        assert first == passage.split()[:40] and second == passage.split()[30:70]
        # The same passage sent whole is cut to the model's 50 tokens and the sentence is lost.
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), window_words=1000
        ) as whole:
            cut = await whole.entails(CLAIM, {"p1": passage})
    assert verdict.entailed is True and verdict.confidence == 1.0
    assert verdict.reason == "entailment score 1.000 (chunk 2 of 2) >= threshold 0.5"
    assert cut.entailed is False and cut.confidence == 0.0


async def test_a_sentence_across_a_chunk_boundary_is_whole_in_the_overlap() -> None:
    passage = _passage(before=33, after=30)  # the sentence is words 33-42, across 40
    async with TEIServer() as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), window_words=40, overlap_words=10
        ) as judge:
            overlapping = await judge.entails(CLAIM, {"p1": passage})
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST),
            window_words=40,
            overlap_words=0,
            threshold=0.99,
        ) as judge:
            disjoint = await judge.entails(CLAIM, {"p1": passage})
    assert overlapping.entailed is True and overlapping.confidence == 1.0
    # Without overlap each half holds part of the sentence: at best 4 of its 6 content words.
    assert disjoint.entailed is False and disjoint.confidence == pytest.approx(4 / 6)


async def test_tei_batch_size_error_lowers_the_cap_and_loses_no_pair(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passage = " ".join(FILLER[:90])  # 90 words, window 10, overlap 0: 9 chunks
    async with TEIServer(max_client_batch_size=4) as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST),
            window_words=10,
            overlap_words=0,
            batch_pairs=16,
        ) as judge:
            with caplog.at_level(logging.WARNING, logger="citemon.judges.classifier"):
                verdict = await judge.entails(CLAIM + " w85", {"p1": passage})
            assert judge.batch_pairs == 4
            sizes = server.batch_sizes()
            assert sizes[0] == 9 and sorted(sizes[1:]) == [1, 4, 4]
            # The second call starts at the learned cap: no refused request.
            await judge.entails(CLAIM + " w55", {"p1": passage})
            assert sorted(server.batch_sizes()[4:]) == [1, 4, 4]
        assert len(server.pairs_seen) == 18  # every chunk scored exactly once per call
    assert verdict.entailed is False and verdict.confidence == pytest.approx(1 / 7)
    assert verdict.reason is not None and "chunk 9 of 9" in verdict.reason
    warnings = [r for r in caplog.records if "refused 9 pairs" in r.getMessage()]
    assert len(warnings) == 1 and "at most 4" in warnings[0].getMessage()


async def test_payload_limit_413_halves_the_batch() -> None:
    passage = " ".join(FILLER[:80])  # 8 chunks of 10 words
    async with TEIServer(payload_limit=400) as server:  # 8 pairs: 481 bytes, 4 pairs: about 270
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST),
            window_words=10,
            overlap_words=0,
            batch_pairs=8,
        ) as judge:
            verdict = await judge.entails("w30 w75", {"p1": passage})
            assert judge.batch_pairs == 4
        assert server.batch_sizes()[0] == 8 and sorted(server.batch_sizes()[1:]) == [4, 4]
    assert verdict.confidence == 0.5  # w30 and w75 are never in one 10-word chunk


async def test_a_single_pair_over_the_payload_limit_is_an_error_not_a_loop() -> None:
    async with TEIServer(payload_limit=50) as server:
        async with ClassifierJudge(HTTPTransport(server.base_url, "classifier", **FAST)) as judge:
            with pytest.raises(JudgeHTTPError, match=r"HTTP 413.*cannot be split"):
                await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 1


async def test_503_and_429_are_retried_then_scored() -> None:
    observer = RecordingObserver()
    async with TEIServer() as server:
        server.script(Fault.status(503, body=UNHEALTHY), Fault.status(429, body=OVERLOADED))
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", observers=(observer,), retries=3, **FAST)
        ) as judge:
            verdict = await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 3
    assert verdict.entailed is True
    assert observer.outcomes == ["error", "rate_limited", "ok"]
    assert observer.current == 0


async def test_teis_424_backend_error_is_retried_and_a_422_is_not() -> None:
    backend = '{"error": "Backend error: out of memory", "error_type": "backend"}'
    async with TEIServer() as server:
        server.script(Fault.status(424, body=backend))
        async with ClassifierJudge(HTTPTransport(server.base_url, "classifier", **FAST)) as judge:
            assert (await judge.entails(CLAIM, {"p1": SENTENCE})).entailed
        assert server.attempts() == 2
    async with TEIServer(max_input_length=5, auto_truncate=False) as server:
        server.script(
            Fault.status(422, body='{"error": "tokenizer error", "error_type": "tokenizer"}')
        )
        async with ClassifierJudge(HTTPTransport(server.base_url, "classifier", **FAST)) as judge:
            with pytest.raises(JudgeHTTPError, match=r"HTTP 422.*tokenizer error"):
                await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 1


async def test_retry_after_on_429_is_obeyed() -> None:
    async with TEIServer() as server:
        server.script(Fault.status(429, body=OVERLOADED, retry_after="0.3"))
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", backoff_max_s=5.0)
        ) as judge:
            await judge.entails(CLAIM, {"p1": SENTENCE})
        first, second = server.requests
    assert second.received_at - first.received_at >= 0.3


async def test_after_the_retry_budget_the_error_is_raised() -> None:
    async with TEIServer() as server:
        server.script(Fault.status(503, body=UNHEALTHY), forever=True)
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", retries=2, **FAST)
        ) as judge:
            with pytest.raises(JudgeHTTPError, match="HTTP 503"):
                await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 3


async def test_inflight_cap_is_reached_and_never_exceeded() -> None:
    async with TEIServer(latency_s=0.05) as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", max_inflight=2, **FAST)
        ) as judge:
            verdicts = await asyncio.gather(
                *(judge.entails(f"{CLAIM} w{n}", {"p1": SENTENCE}) for n in range(100, 108))
            )
        assert server.max_concurrent == 2
    assert {v.confidence for v in verdicts} == {6 / 7}


async def test_scores_are_cached_and_threshold_applies_after_the_cache() -> None:
    observer = RecordingObserver()
    async with TEIServer() as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", observers=(observer,), **FAST)
        ) as judge:
            a = await judge.entails(CLAIM, {"p1": SENTENCE})
            b = await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 1
    assert a == b and (observer.hits, observer.misses) == (1, 1)


async def test_api_key_is_sent_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-tei-1234567890"
    async with TEIServer(api_key=secret) as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST, api_key=secret)
        ) as judge:
            assert (await judge.entails(CLAIM, {"p1": SENTENCE})).entailed
            assert secret not in repr(judge) and "api_key='***'" in repr(judge)
        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", api_key="sk-wrong-999", **FAST)
        ) as judge:
            with pytest.raises(JudgeHTTPError) as caught:
                await judge.entails(CLAIM, {"p1": SENTENCE})
    assert "HTTP 401" in str(caught.value) and "sk-wrong-999" not in str(caught.value)


async def test_batch_methods_answer_what_entails_answers_in_fewer_requests() -> None:
    passages = {
        "1": "Audit logs retention period is thirty days.",
        "2": "The period is ninety days.",
        "3": "Backups are encrypted.",
    }
    claims = [CLAIM, "Backups are encrypted.", "Audit logs retention period", CLAIM]
    async with TEIServer() as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), threshold=0.99
        ) as judge:
            cited = await judge.check_citations(claims, passages, precision=True)
            support = await judge.find_support(claims, passages)
            batched_requests = server.attempts()
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST),
            threshold=0.99,
            cache=ReplyCache(0),
        ) as plain:
            reference = EntailsBatch(plain)
            assert cited == await reference.check_citations(claims, passages, precision=True)
            assert support == await reference.find_support(claims, passages)
            reference_requests = server.attempts() - batched_requests
    # check_citations: one request for the set with every claim, one for the subsets of the
    # entailed ones; find_support then needs nothing new (the same questions, cached).
    # EntailsBatch asks one pair per request (the repeated claim shares its twin's, in flight
    # at the same time): 3 x (1 + 3 + 3) + 3 x (1 + 3) = 33.
    assert batched_requests == 2
    assert reference_requests == 33
    assert reference_requests > 3 * batched_requests
    assert [getattr(c, "entailed", None) for c in cited] == [True, True, True, True]
    first = cited[0]
    assert first.supported_by == () and first.dispensable == ("3",)  # type: ignore[union-attr]


async def test_find_support_asks_single_passages_only_when_the_context_entails() -> None:
    passages = {"1": "Audit logs retention period", "2": "ninety days", "3": "Backups are kept."}
    claims = [CLAIM, "Audit logs retention", "Snapshots are encrypted."]
    async with TEIServer() as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), threshold=0.99
        ) as judge:
            got = await judge.find_support(claims, passages)
        # Round 1: the three claims against the context; round 2: the two it entails, alone
        # against each of the three passages. The third claim costs no per-passage pair.
        assert server.batch_sizes() == [3, 6]
    assert [(s.joint, s.supported_by) for s in got] == [  # type: ignore[union-attr]
        (True, ()),
        (True, ("1",)),
        (False, ()),
    ]


async def test_url_credentials_become_basic_auth_and_are_shown_nowhere() -> None:
    async with TEIServer(api_key="right-key") as server:  # wants Bearer: Basic gets a 401
        url = server.base_url.replace("http://", "http://tei-user:pw-s3cret@") + "/?x=1"
        async with ClassifierJudge(HTTPTransport(url, "classifier", **FAST)) as judge:
            assert "pw-s3cret" not in repr(judge)
            with pytest.raises(JudgeHTTPError) as caught:
                await judge.entails(CLAIM, {"p1": SENTENCE})
        (request,) = server.requests
    assert request.path == "/predict?x=1"  # the query string stays after the endpoint
    assert request.headers["authorization"].startswith("Basic ")
    assert "pw-s3cret" not in str(caught.value) and "tei-user" not in str(caught.value)


async def test_teis_info_sets_the_cap_before_the_first_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passage = " ".join(FILLER[:90])  # 9 chunks of 10 words
    async with TEIServer(max_client_batch_size=4, serve_info=True) as server:
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST),
            window_words=10,
            overlap_words=0,
            batch_pairs=16,
        ) as judge:
            with caplog.at_level(logging.INFO, logger="citemon.judges.classifier"):
                verdicts = await asyncio.gather(
                    judge.entails(CLAIM + " w85", {"p1": passage}),
                    judge.entails(CLAIM + " w15", {"p1": passage}),
                )
            assert judge.batch_pairs == 4
        (info,) = server.info_requests  # once, before any batch
        assert info.received_at < min(r.received_at for r in server.requests)
        assert sorted(server.batch_sizes()) == [1, 1, 4, 4, 4, 4]  # none refused
    assert [v.confidence for v in verdicts] == [pytest.approx(1 / 7)] * 2
    assert any("at most 4 pairs per request (its /info)" in r.getMessage() for r in caplog.records)


async def test_a_failing_info_is_ignored() -> None:
    async with TEIServer(serve_info=True) as server:
        server.info_fault = Fault.status(500, body="boom")
        async with ClassifierJudge(
            HTTPTransport(server.base_url, "classifier", **FAST), batch_pairs=8
        ) as judge:
            assert (await judge.entails(CLAIM, {"p1": SENTENCE})).entailed
            assert judge.batch_pairs == 8
        assert len(server.info_requests) == 1 and len(server.requests) == 1


async def test_a_slow_or_dropped_reply_is_retried_within_the_timeout() -> None:
    observer = RecordingObserver()
    async with TEIServer() as server:
        server.script(Fault.slow(5.0), Fault.drop(), Fault.truncate())
        async with ClassifierJudge(
            HTTPTransport(
                server.base_url,
                "classifier",
                timeout_s=0.3,
                retries=3,
                observers=(observer,),
                **FAST,
            )
        ) as judge:
            verdict = await judge.entails(CLAIM, {"p1": SENTENCE})
        assert server.attempts() == 4
    assert verdict.entailed is True
    assert observer.outcomes == ["timeout", "error", "error", "ok"]
