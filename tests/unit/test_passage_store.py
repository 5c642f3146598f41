"""The passage store's managed layer and its use by the scorer (docs/passage-store.md): one
lookup per answer, the cache, the cap, the timeout, retries, holding through an outage, the
content-hash check, the causes, the URL rules and the metrics. The backends themselves are
tested against real servers in tests/integration/test_passage_store.py."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from citemon._core.errors import ConfigError
from citemon._core.passages import PassageLookupError
from citemon._core.records import AnswerRecord, Passage
from citemon._engine.passage_text import fill_from_store
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics
from citemon._passages import ManagedStore, StoreLimits, open_backend, redacted
from citemon._passages.open import add_passage_store_arguments, open_store
from citemon.judges.lexical import LexicalJudge
from tests.integration.dialect_traces import ANSWER, PASSAGES, QUESTION
from tests.oracles import specimen_text_judge


class Backend:
    """A store in memory that can be told to fail; it counts what it was asked."""

    def __init__(self, passages: Mapping[str, str] = PASSAGES, *, failures: int = 0) -> None:
        self.passages = dict(passages)
        self.failures = failures
        self.asked: list[list[str]] = []

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        self.asked.append(list(ids))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("connection refused")
        return {i: self.passages[i] for i in ids if i in self.passages}


def typed(*, answer: str = ANSWER, ids: Sequence[str] = tuple(PASSAGES)) -> AnswerRecord:
    return AnswerRecord(
        question=QUESTION, answer=answer, passages=[Passage(id=i, score=0.5) for i in ids]
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


FAST = StoreLimits(backoff_s=0.001, backoff_max_s=0.002)


async def test_one_lookup_per_answer_and_the_specimen_scores() -> None:
    backend = Backend()
    store = ManagedStore(backend, FAST)
    score = await Scorer(specimen_text_judge(), passages=store).score(typed())
    assert backend.asked == [list(PASSAGES)]  # every missing ID in one round trip
    assert [c.verdict for c in score.claims] == ["correct", "misattributed", "misattributed"]
    assert score.text_source == dict.fromkeys(PASSAGES, "store")
    assert "text_source" in score.model_dump()
    assert score.evidence["p-3310"] == PASSAGES["p-3310"]


async def test_without_a_store_the_typed_documents_stay_unjudged() -> None:
    score = await Scorer(specimen_text_judge()).score(typed())
    assert {c.unjudged_cause for c in score.claims} == {"no_passage_text"}
    assert "text_source" not in score.model_dump()  # left out when nothing came from a store


async def test_the_cache_answers_repeated_ids_until_its_ttl() -> None:
    clock = Clock()
    backend = Backend()
    limits = StoreLimits(cache_size=10, cache_ttl_s=60, backoff_s=0.001)
    store = ManagedStore(backend, limits, clock=clock)
    assert store.stats.hit_ratio is None  # nothing asked yet: no ratio, not a fake 0
    scorer = Scorer(specimen_text_judge(), passages=store)
    for _ in range(3):
        await scorer.score(typed())
    assert len(backend.asked) == 1
    assert (store.stats.fetched, store.stats.cached, store.stats.lookups) == (3, 6, 3)
    assert store.stats.hit_ratio == pytest.approx(6 / 9)
    clock.now += 61
    await scorer.score(typed())
    assert len(backend.asked) == 2  # expired: asked again


async def test_an_id_the_store_lacks_stays_no_passage_text_and_is_asked_again() -> None:
    backend = Backend({k: v for k, v in PASSAGES.items() if k != "p-3312"})
    store = ManagedStore(backend, FAST)
    score = await Scorer(specimen_text_judge(), passages=store).score(typed())
    assert score.claims[2].unjudged_cause == "no_passage_text"
    assert store.stats.not_found == 1
    await Scorer(specimen_text_judge(), passages=store).score(typed())
    assert backend.asked[-1] == ["p-3312"]  # not cached as missing: indexed later, found


async def test_retries_then_success() -> None:
    backend = Backend(failures=2)
    store = ManagedStore(backend, StoreLimits(retries=2, backoff_s=0.001))
    assert await store.lookup(["p-3310"]) == {"p-3310": PASSAGES["p-3310"]}
    assert store.stats.round_trips == 3 and store.up


async def test_a_store_failing_after_retries_is_passage_lookup_failed_never_wrong() -> None:
    store = ManagedStore(Backend(failures=99), StoreLimits(retries=1, backoff_s=0.001))
    score = await Scorer(specimen_text_judge(), passages=store).score(typed())
    assert {(c.verdict, c.unjudged_cause) for c in score.claims} == {
        ("unjudged", "passage_lookup_failed")
    }
    assert store.stats.failed == 3 and store.stats.round_trips == 2
    assert store.last_error == "ConnectionError: connection refused"


async def test_a_partial_failure_turns_failed_verdicts_unjudged_but_keeps_correct_ones() -> None:
    """With one passage's text missing, a failed verdict might be the missing text's doing."""
    record = AnswerRecord(
        answer="Audit log retention is 90 days on the Business plan. [p-1] "
        "Retention can be extended by contacting your account manager. [p-1]",
        passages=[Passage(id="p-1", text=PASSAGES["p-3310"]), Passage(id="p-2")],
    )
    store = ManagedStore(Backend(failures=99), StoreLimits(retries=0))
    score = await Scorer(LexicalJudge(), passages=store).score(record)
    assert score.claims[0].verdict == "correct"
    assert (score.claims[1].verdict, score.claims[1].unjudged_cause) == (
        "unjudged",
        "passage_lookup_failed",
    )
    plain = await Scorer(LexicalJudge()).score(record)  # without a store: judged as it is
    assert plain.claims[1].verdict == "unsupported"


async def test_a_lookup_that_hangs_times_out() -> None:
    never = asyncio.Event()

    class Hanging:
        async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
            await never.wait()
            return {}

    store = ManagedStore(Hanging(), StoreLimits(timeout_s=0.05, retries=1, backoff_s=0.001))
    with pytest.raises(PassageLookupError, match="after 2 attempt"):
        await store.lookup(["p-3310"])
    assert store.last_error == "timed out"


async def test_round_trips_in_flight_never_exceed_the_cap() -> None:
    release = asyncio.Event()
    full = asyncio.Event()
    inflight = peak = 0

    class Slow:
        async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
            nonlocal inflight, peak
            inflight += 1
            peak = max(peak, inflight)
            if inflight == 3:
                full.set()
            await release.wait()
            inflight -= 1
            return {i: "text" for i in ids}

    store = ManagedStore(Slow(), StoreLimits(concurrency=3, cache_size=0))
    tasks = [asyncio.create_task(store.lookup([f"id-{n}"])) for n in range(10)]
    await full.wait()
    await asyncio.sleep(0)  # let any task that could pass the cap try
    assert (inflight, peak) == (3, 3)
    release.set()
    assert [await t for t in tasks] == [{f"id-{n}": "text"} for n in range(10)]
    assert peak == 3


async def test_holding_through_an_outage_until_the_store_answers() -> None:
    """``run``: lookups wait while the store is down (``up`` false: /readyz 503), one probe at
    a time, and finish once it answers again."""
    probed = asyncio.Event()
    probing = peak = probes = 0

    class Down(Backend):
        async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
            nonlocal probing, peak, probes
            if store.up:
                return await super().lookup(ids)
            probing += 1
            probes += 1
            peak = max(peak, probing)
            try:
                await asyncio.sleep(0.001)  # a round trip's latency, so probes could overlap
                return await super().lookup(ids)
            finally:
                probing -= 1
                if probes == 5:
                    probed.set()  # probed again and again while down

    backend = Down(failures=10_000)
    limits = StoreLimits(retries=0, backoff_s=0.001, backoff_max_s=0.004, hold_s=60)
    store = ManagedStore(backend, limits)
    tasks = [asyncio.create_task(store.lookup(["p-3310"])) for _ in range(5)]
    await probed.wait()
    assert not store.up and not any(t.done() for t in tasks)
    assert peak == 1  # the five waiting answers share one probe at a time
    backend.failures = 0
    results = await asyncio.gather(*tasks)
    assert results == [{"p-3310": PASSAGES["p-3310"]}] * 5
    assert store.up and store.stats.failed == 0


async def test_the_hold_is_bounded() -> None:
    store = ManagedStore(
        Backend(failures=10_000), StoreLimits(retries=0, backoff_s=0.001, hold_s=0.05)
    )
    with pytest.raises(PassageLookupError, match=r"down for .* \(held 0 s\)"):
        await store.lookup(["p-3310"])
    assert not store.up and store.stats.failed == 1


async def test_versioned_chunks_use_store_text_only_when_its_hash_matches() -> None:
    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    record = AnswerRecord(
        answer=ANSWER,
        passages=[
            Passage(id="p-3310", metadata={"content_sha256": sha(PASSAGES["p-3310"])}),
            Passage(id="p-3311", metadata={"content_sha256": sha("the text as it was")}),
        ],
    )
    filled, fill = await fill_from_store(record, ManagedStore(Backend()))
    assert [p.text for p in filled.passages] == [PASSAGES["p-3310"], ""]
    assert (fill.filled, fill.stale) == (("p-3310",), ("p-3311",))
    assert filled.from_store == {"p-3310": "store"}
    again, second = await fill_from_store(filled, ManagedStore(Backend()))
    assert second.asked == () and again is filled  # asked once per record, whatever came


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_passage_store_arguments(parser, hold=True)
    return parser.parse_args(list(argv))


def test_a_password_in_the_url_is_refused_and_never_echoed() -> None:
    with pytest.raises(ConfigError, match="CITEMON_PASSAGE_STORE_PASSWORD") as info:
        open_backend("postgresql://kb:s3cret@db.internal:5432/kb")
    assert "s3cret" not in str(info.value)
    with pytest.raises(ConfigError, match="must not carry a password"):
        open_backend("postgresql://kb@db.internal/kb?password=s3cret")
    assert redacted("https://u:s3cret@kb.internal/x?token=abc") == "https://u@kb.internal/x"


def test_urls_name_their_backends_and_bad_ones_say_what_to_use(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use postgresql://, chroma://"):
        open_backend("ftp://kb.internal/x")
    with pytest.raises(ConfigError, match="no SQLite file"):
        open_backend("sqlite:///nowhere/kb.db")
    with pytest.raises(ConfigError, match="cannot load passage store factory"):
        open_backend("no_such_module:factory")
    with pytest.raises(ConfigError, match="must take the IDs as"):
        open_backend("postgresql://kb@127.0.0.1/kb", query="SELECT id, text FROM t")
    plugin = open_backend("tests.passage_plugin:specimen_store")
    assert type(plugin).__name__ == "SpecimenStore"


def test_flags_and_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_PASSAGE_STORE", "tests.passage_plugin:specimen_store")
    monkeypatch.setenv("CITEMON_PASSAGE_STORE_CACHE_TTL", "2m")
    args = parse("--passage-store-concurrency", "3", "--passage-store-hold", "90s")
    store = open_store(args, hold=True)
    assert store is not None
    assert (store.limits.cache_ttl_s, store.limits.concurrency, store.limits.hold_s) == (
        120.0,
        3,
        90.0,
    )
    plain = open_store(args)  # score, calibrate: no hold, whatever the flag says
    assert plain is not None and plain.limits.hold_s == 0
    with pytest.raises(SystemExit):  # argparse: "is not a whole number >= 1 (from the flag …)"
        parse("--passage-store-concurrency", "0")
    monkeypatch.setenv("CITEMON_PASSAGE_STORE_RETRIES", "-1")
    with pytest.raises(SystemExit):
        parse()
    monkeypatch.delenv("CITEMON_PASSAGE_STORE_RETRIES")
    monkeypatch.delenv("CITEMON_PASSAGE_STORE")
    assert open_store(parse()) is None


async def test_the_metrics_count_each_id_by_outcome_and_each_round_trip() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    backend = Backend({"p-3310": PASSAGES["p-3310"]})
    store = ManagedStore(backend, StoreLimits(retries=0), observer=metrics.passages)
    await store.lookup(["p-3310", "p-3311"])
    await store.lookup(["p-3310"])
    backend.failures = 1
    with pytest.raises(PassageLookupError):
        await store.lookup(["p-3312"])

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    counts = {
        o: value("citemon_passage_lookups_total", outcome=o)
        for o in ("cached", "fetched", "not_found", "failed")
    }
    assert counts == {"cached": 1.0, "fetched": 1.0, "not_found": 1.0, "failed": 1.0}
    assert value("citemon_passage_lookup_seconds_count") == 2.0


def test_the_offline_demo_with_ids_only_prints_what_the_demo_with_text_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from citemon.cli import main

    assert main(["demo", "--offline"]) == 0
    with_text = capsys.readouterr().out
    assert main(["demo", "--offline", "--ids-only"]) == 0
    assert capsys.readouterr().out == with_text
    assert "unjudged 0" in with_text


async def test_a_passage_cut_short_in_a_truncated_answer_gets_its_whole_text() -> None:
    whole = PASSAGES["p-3311"]
    record = AnswerRecord(
        answer=ANSWER,
        truncated=True,
        passages=[
            Passage(id="p-3310", text=PASSAGES["p-3310"]),  # whole: kept as traced
            Passage(id="p-3311", text=whole[:20]),  # cut short by the producer
            Passage(id="p-3312", text="something else entirely"),  # not a cut of the store's
        ],
    )
    backend = Backend()
    filled, fill = await fill_from_store(record, ManagedStore(backend))
    assert fill.filled == ("p-3311",)
    assert backend.asked == [list(PASSAGES)]  # one lookup, every passage of the answer
    assert [p.text for p in filled.passages] == [
        PASSAGES["p-3310"],
        whole,
        "something else entirely",
    ]
    assert filled.from_store == {"p-3311": "store"} and filled.truncated
    untouched, _ = await fill_from_store(
        record.model_copy(update={"truncated": False}), ManagedStore(backend)
    )
    assert len(backend.asked) == 1  # an answer not truncated asks only for text-less passages
    assert untouched.passages[1].text == whole[:20]


def test_calibrate_reads_labelled_answers_whose_passages_came_without_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Labelled production answers traced by ID alone: with --passage-store their pairs are
    judged (one lookup per answer); without it they are skipped, as before."""
    import json

    from citemon.cli import main

    labels = tmp_path / "labels.jsonl"
    row = {
        "answer": "The sky is blue [1]. Grass is red [2].",
        "passages": [{"id": "1"}, {"id": "2"}],
        "labels": [{"claim": "The sky is blue.", "cited_ids": ["1"], "support": "Complete"},
                   {"claim": "Grass is red.", "cited_ids": ["2"], "support": "Incomplete"}],
    }  # fmt: skip
    labels.write_text(json.dumps(row) + "\n", encoding="utf-8")
    store = tmp_path / "kb.jsonl"
    store.write_text(
        json.dumps({"id": "1", "text": "The sky is blue on clear days."})
        + "\n"
        + json.dumps({"id": "2", "text": "Grass is green."})
        + "\n",
        encoding="utf-8",
    )
    argv = ["calibrate", "--format", "json", "--labels", str(labels), "--judge", "lexical"]
    assert main(argv) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["pairs"], report["skipped"]) == (0, {"cited passage has no text": 2})
    assert main([*argv, "--passage-store", str(store)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["pairs"], report["skipped"]) == (2, {})
    assert report["confusion"] == {"tp": 1, "fn": 0, "tn": 1, "fp": 0}


def test_a_libpq_keyword_conninfo_with_a_password_is_refused_and_never_echoed() -> None:
    # What a PostgreSQL user pastes from psql: not a URL, so nothing to redact; the error
    # that said which URLs to use echoed the password in full.
    with pytest.raises(ConfigError, match="must not carry a password") as info:
        open_backend("host=db.internal dbname=kb user=kb password=s3cret")
    assert "s3cret" not in str(info.value)
    with pytest.raises(ConfigError, match="must not carry a password") as info:
        open_backend("kb.internal/x?sslpassword=s3cret&user=kb")
    assert "s3cret" not in str(info.value)


async def test_passage_hash_key_reaches_the_scorer(tmp_path: Path) -> None:
    # --passage-hash-key names the metadata key of the content hash; the store the flags open
    # must carry it to the scorer, or a chunk edited since the answer is judged on its new text.
    kb = tmp_path / "kb.jsonl"
    kb.write_text('{"id": "p-1", "text": "The tower is 330 metres tall, as edited."}\n')
    store = open_store(parse("--passage-store", str(kb), "--passage-hash-key", "chunk_sha"))
    assert store is not None
    scorer = Scorer(LexicalJudge(), passages=store)
    assert scorer.passage_hash_key == "chunk_sha"
    old = hashlib.sha256(b"The tower is 330 metres tall.").hexdigest()
    record = AnswerRecord(
        answer="The tower is 330 metres tall [p-1].",
        passages=[Passage(id="p-1", text="", metadata={"chunk_sha": old})],
    )
    filled, fill = await fill_from_store(record, store, hash_key=scorer.passage_hash_key)
    assert fill.stale == ("p-1",) and filled.passages[0].text == ""


async def test_store_text_that_is_not_utf8_is_not_used_and_crashes_nothing(
    tmp_path: Path,
) -> None:
    # A JSON "\ud800" escape (an HTTP service's reply, a JSONL line) decodes to a lone
    # surrogate: no UTF-8 encodes it, so hashing it (or writing a results record of it) raised
    # UnicodeEncodeError out of the scorer. Traced text like it is refused (invalid_utf8); the
    # store's is not used: the claim is unjudged (no_passage_text), counted, not a crash.
    kb = tmp_path / "kb.jsonl"
    kb.write_text('{"id": "p-1", "text": "The tower is 330 metres tall. \\ud800"}\n')
    store = ManagedStore(open_backend(str(kb)))
    for metadata in ({"content_sha256": "00" * 32}, None):
        record = AnswerRecord(
            answer="The tower is 330 metres tall [p-1].",
            passages=[Passage(id="p-1", text="", metadata=metadata)],
        )
        filled, fill = await fill_from_store(record, store)
        assert filled.passages[0].text == "" and fill.filled == ()
        score = await Scorer(LexicalJudge(), passages=store).score(record)
        assert [c.unjudged_cause for c in score.claims] == ["no_passage_text"]
        score.model_dump_json().encode()


def test_a_token_an_http_header_cannot_carry_is_refused_never_shown(tmp_path: Path) -> None:
    """A token with a line end or space (a Kubernetes secret made with `echo`, a file saved with
    a trailing space) made httpx refuse the header with the token in its message, which the
    store logged as its last error on every lookup. The line end is dropped; a space or control
    character inside is a usage error that does not show the token."""
    from pydantic import SecretStr

    from citemon._passages.settings import PassageStoreSettings

    settings = PassageStoreSettings(passage_store_token=SecretStr("sk-SECRET-123\n"))
    assert settings.secret("token") == "sk-SECRET-123"
    key_file = tmp_path / "token"
    key_file.write_text("sk-SECRET-123 \n")
    settings = PassageStoreSettings(passage_store_token_file=key_file)
    assert settings.secret("token") == "sk-SECRET-123"
    for bad in ("sk-SECRET 123", "sk-SECRET\x00123", "sk-SECRÉT"):
        settings = PassageStoreSettings(passage_store_token=SecretStr(bad))
        with pytest.raises(ConfigError, match="cannot carry") as info:
            settings.secret("token")
        assert "SECRET" not in str(info.value)
