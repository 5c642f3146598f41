"""The HTTP judge against a real OpenAI-compatible server: llama.cpp's, from llama-cpp-python.

Not a stub of ours: ``python -m llama_cpp.server`` serving a tiny random-weight ``llama`` model
(:mod:`tests.llama_model`). llama-cpp-python 0.3.36 refuses ``response_format`` ``json_schema``
(HTTP 422) and constrains decoding to the schema sent in ``json_object``, so the structured-
output fallback is exercised for real; it returns ``logprobs``, so MiniCheck's confidence is
too. Verdicts are noise: these tests assert the protocol (what was sent, refused, parsed,
counted, capped), never accuracy. ``make llama`` installs the server; without it these tests
skip, and fail under ``CI=true``.

Marked ``slow``: the server comes from a wheel that compiles llama.cpp the first time (8-21
minutes on 2 cores), which a newcomer's first ``make test`` should not wait for; ``make
test-slow`` depends on ``make llama`` and CI (``.ci/run``) runs both suites.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from citemon._core.errors import JudgeInvalidReply
from citemon._core.judge import CitedVerdict, SupportVerdict
from citemon._core.records import VERDICTS, Verdict
from citemon._demo.data import sample_records
from citemon.judges.http import HTTPBatchJudge, HTTPJudge
from citemon.judges.prompts import build_minicheck_messages
from citemon.judges.transport import HTTPTransport
from tests.conftest import REPO
from tests.integration.conftest import TopicFactory
from tests.integration.llama_support import SLOTS, LlamaServer, llama_server
from tests.integration.monitor_support import (
    metric_sum,
    publish,
    run_monitor,
    settings_for,
    wait_for,
)

pytestmark = pytest.mark.slow

FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.1}


@pytest.fixture(scope="module")
def json_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with llama_server(tmp_path_factory.mktemp("llama-json"), head="json") as server:
        yield server


@pytest.fixture(scope="module")
def yes_no_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with llama_server(tmp_path_factory.mktemp("llama-yes-no"), head="yes_no") as server:
        yield server


def fresh_model() -> str:
    """A model name nobody used yet: the server serves its one model under any name, and the
    judge remembers a fallback per endpoint *and model*, so each test sees the refusal anew."""
    return f"tiny-{uuid.uuid4().hex[:8]}"


class Observer:
    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.causes: list[str] = []
        self.current = self.peak = 0

    def request_done(self, outcome: str, seconds: float) -> None:
        self.outcomes.append(outcome)

    def inflight(self, delta: int) -> None:
        self.current += delta
        self.peak = max(self.peak, self.current)

    def cache(self, hit: bool) -> None:
        pass

    def invalid_reply(self, cause: str) -> None:
        self.causes.append(cause)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]


CASES = [
    ("Audit logs are kept for 90 days.", {"p-1": "Audit logs are kept for 90 days."}),
    ("Exports run nightly.", {"p-2": "Exports run every night at 02:00 UTC."}),
    ("Admins can extend retention.", {"p-3": "Only owners can change retention."}),
    ("SSO is included.", {"p-4": "SAML single sign-on is part of the Enterprise plan."}),
    ("The API is rate limited.", {"p-5": "Requests over 100 per minute get HTTP 429."}),
    ("Backups are encrypted.", {"p-6": "Backups are stored in another region."}),
]


async def test_v1_schema_refused_then_json_object_with_the_schema(
    json_server: LlamaServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="citemon.judges.http")
    observer = Observer()
    async with HTTPJudge(
        HTTPTransport(
            json_server.base_url,
            fresh_model(),
            max_inflight=2,
            timeout_s=60,
            retries=2,
            observers=(observer,),
            **FAST,
        )
    ) as judge:
        first = await judge.entails(*CASES[0])
        assert judge.response_format == "json_object+schema"
        rest = await asyncio.gather(*(judge.entails(c, p) for c, p in CASES[1:]))
    # The real server refused json_schema once (HTTP 422), logged once; every later request
    # carried the schema in json_object, and its grammar made every reply schema-valid.
    (warning,) = refusals(caplog)
    # 0.3.36 answers 422, or 500 with FastAPI 0.165 (the same pydantic validation error).
    found = re.search(r"HTTP (\d{3})", warning)
    assert found and found.group(1) in ("422", "500") and "response_format" in warning
    assert json_server.log_text().count(f'/v1/chat/completions HTTP/1.1" {found.group(1)}') == 1
    assert observer.outcomes == ["error"] + ["ok"] * len(CASES)
    assert observer.causes == []
    for verdict in [first, *rest]:
        assert isinstance(verdict, Verdict) and isinstance(verdict.entailed, bool)
        assert isinstance(verdict.reason, str)
    assert observer.peak == 2 and observer.current == 0  # the cap, reached, never exceeded


async def test_v2_batches_through_llama_cpp(json_server: LlamaServer) -> None:
    observer = Observer()
    claims = [c for c, _ in CASES[:3]]
    passages = {pid: text for _, p in CASES[:3] for pid, text in p.items()}
    async with HTTPBatchJudge(
        HTTPTransport(
            json_server.base_url,
            fresh_model(),
            timeout_s=60,
            retries=2,
            observers=(observer,),
            **FAST,
        )
    ) as judge:
        cited = await judge.check_citations(claims, passages, precision=True)
        support = await judge.find_support(claims, passages)
        assert judge.response_format == "json_object+schema"
    assert len(cited) == len(support) == 3
    # Grammar-constrained: claim IDs and passage IDs come only from the schema's enums, so a
    # claim either has a valid verdict or (a random model skipping it) no entry at all.
    for outcome in cited:
        if isinstance(outcome, CitedVerdict):
            if outcome.entailed:
                assert set(outcome.supported_by or ()) <= set(passages)
        else:
            assert isinstance(outcome, JudgeInvalidReply) and outcome.cause == "missing_claims"
    for outcome in support:
        if isinstance(outcome, SupportVerdict):
            assert set(outcome.supported_by) <= set(passages)
        else:
            assert isinstance(outcome, JudgeInvalidReply) and outcome.cause == "missing_claims"
    assert set(observer.causes) <= {"missing_claims"}
    assert observer.outcomes[0] == "error"  # the 422
    assert Counter(observer.outcomes)["error"] == 1


async def test_minicheck_confidence_from_llama_cpp_logprobs(yes_no_server: LlamaServer) -> None:
    observer = Observer()
    async with HTTPJudge(
        HTTPTransport(
            yes_no_server.base_url,
            fresh_model(),
            max_inflight=2,
            timeout_s=60,
            retries=0,
            observers=(observer,),
            **FAST,
        ),
        reply_format="minicheck",
    ) as judge:
        verdicts = await asyncio.gather(*(judge.entails(c, p) for c, p in CASES))
        assert judge.response_format == "logprobs"  # nothing refused
    assert observer.outcomes == ["ok"] * len(CASES) and observer.causes == []
    for verdict in verdicts:
        assert verdict.reason in ("MiniCheck: Yes", "MiniCheck: No")
        assert verdict.confidence is not None and 0.5 <= verdict.confidence <= 1.0
    # The confidence is the server's own numbers: ask the same question by hand.
    claim, passages = CASES[0]
    body = {
        "model": "any",
        "messages": build_minicheck_messages(claim, passages),
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 5,
    }
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (await client.post(f"{yes_no_server.base_url}/chat/completions", json=body)).json()
    choice = reply["choices"][0]
    first = choice["logprobs"]["content"][0]
    assert choice["message"]["content"].startswith(first["token"])
    top = {t["token"]: math.exp(t["logprob"]) for t in first["top_logprobs"]}
    answer = first["token"]
    assert answer in ("Yes", "No") and verdicts[0].reason == f"MiniCheck: {answer}"
    assert verdicts[0].confidence == pytest.approx(top[answer] / (top["Yes"] + top["No"]), abs=1e-6)


def _score(
    server: LlamaServer, tmp_path: Path, flags: list[str]
) -> subprocess.CompletedProcess[str]:
    records = sample_records(seed=7)[:3]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "citemon"), "score", str(src), "--format", "json",
            "--judge", "http", "--judge-base-url", server.base_url, "--judge-model", fresh_model(),
            "--judge-concurrency", str(SLOTS), "--judge-timeout", "60", *flags,
        ],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_citemon_score_through_llama_cpp(
    json_server: LlamaServer, tmp_path: Path, protocol: str
) -> None:
    done = _score(json_server, tmp_path, ["--judge-protocol", protocol])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    summary = out["summary"]
    assert summary["answers"] == 3
    assert sum(summary["verdicts"].values()) == summary["claims"] > 0
    assert set(summary["verdicts"]) == set(VERDICTS)
    # One refusal, logged once, whatever the number of requests.
    assert done.stderr.count("refused json_schema") == 1, done.stderr


def test_citemon_score_minicheck_through_llama_cpp(
    yes_no_server: LlamaServer, tmp_path: Path
) -> None:
    done = _score(yes_no_server, tmp_path, ["--judge-format", "minicheck"])
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["answers"] == 3
    assert summary["verdicts"]["unjudged"] == 0  # every reply a Yes or a No
    assert "refused" not in done.stderr


@pytest.mark.parametrize(
    ("head", "flags"),
    [
        ("json", ["--judge-protocol", "v1"]),
        ("json", ["--judge-protocol", "v2"]),
        ("yes_no", ["--judge-format", "minicheck"]),
    ],
    ids=["v1", "v2", "minicheck"],
)
async def test_citemon_run_through_llama_cpp(
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    request: pytest.FixtureRequest,
    head: str,
    flags: list[str],
) -> None:
    server: LlamaServer = request.getfixturevalue(f"{head}_server")
    topic = await kafka_topic(partitions=2)
    settings = settings_for(
        kafka_bootstrap,
        topic,
        (
            "--judge", "http", "--judge-base-url", server.base_url, "--judge-model", fresh_model(),
            "--judge-concurrency", str(SLOTS), "--judge-timeout", "60", *flags,
        ),
        max_inflight_answers=4,
    )  # fmt: skip
    async with run_monitor(settings) as mon:
        peak = 0.0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, metric_sum(mon.registry, "citemon_judge_inflight"))
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 8, False)])
        try:
            await wait_for(
                lambda: metric_sum(mon.registry, "citemon_answers_total") >= len(sent),
                300,
                "every answer scored through the llama server",
                step_s=0.2,
            )
        finally:
            watcher.cancel()
        registry = mon.registry
        assert metric_sum(registry, "citemon_answers_total") == len(sent)
        assert metric_sum(registry, "citemon_judge_inflight_limit") == SLOTS
        assert peak == SLOTS  # reached, and never above the cap
        assert metric_sum(registry, "citemon_judge_inflight") == 0
        ok = metric_sum(registry, "citemon_judge_requests_total", outcome="ok")
        errors = metric_sum(registry, "citemon_judge_requests_total", outcome="error")
        assert ok > 0
        # json: the one refusal of the fallback (422, or 500 here); minicheck: nothing refused.
        log = server.log_text()
        statuses = Counter(re.findall(r'/v1/chat/completions HTTP/1.1" (\d+)', log))
        assert errors == (1 if head == "json" else 0), (
            statuses,
            log[log.rfind("Exception:") - 200 :][:2500],
        )
        if head == "yes_no":
            assert metric_sum(registry, "citemon_judge_invalid_replies_total") == 0
            assert metric_sum(registry, "citemon_claims_total", verdict="unjudged") == 0
