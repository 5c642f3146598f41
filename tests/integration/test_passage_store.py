"""The passage store against real servers: the GenAI-convention trace of the specimen whose typed
documents carry an ID and no text (made by ``opentelemetry-util-genai``) scores 0.33 / 1.00, 2
misattributed, 0 unjudged through every backend, offline and through Kafka; a stopped store
leaves its claims ``unjudged`` / ``passage_lookup_failed`` and says why; IDs holding SQL and URL
metacharacters are only ever bound as parameters.

PostgreSQL (Debian's server) and Chroma (``chroma run``) are started once per session
(``postgres_server``, ``chroma_server`` in conftest.py); the HTTP contract is served by a real
HTTP server on loopback.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from citemon.cli import main
from tests.conftest import REPO
from tests.integration.conftest import TopicFactory
from tests.integration.dialect_traces import PASSAGES
from tests.integration.monitor_support import (
    metric_sum,
    read_topic,
    run_monitor,
    settings_for,
    wait_for,
)
from tests.integration.store_servers import Postgres, free_port
from tests.otlp_json import otlp_json

JUDGE = "tests.oracles:specimen_text_judge"
QUERY = "SELECT chunk_id, body FROM kb_chunks WHERE chunk_id = ANY(%(ids)s)"
#: IDs a hostile or careless trace may carry: SQL, URL and format-string metacharacters.
NASTY = [
    "x'); DROP TABLE kb_chunks; --",
    "../../admin?drop=1&x=%2F#frag",
    "%(ids)s' OR '1'='1",
    'a"b\\c; DELETE FROM kb_chunks',
]
STORED_NASTY = NASTY[0]  # the one the stores hold (its text is found by exact ID)
NASTY_TEXT = "Audit logs are kept for 90 days on the Business plan."


@pytest.fixture(scope="module")
def typed_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    """The specimen's GenAI trace with typed, ID-only documents: protobuf, and OTLP JSON."""
    out = tmp_path_factory.mktemp("typed-trace")
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.dialect_traces", str(out), "genai-typed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payload = (out / "genai-typed.pb").read_bytes()
    src = out / "trace.jsonl"
    src.write_text(otlp_json(payload) + "\n", encoding="utf-8")
    return payload, src


# -- the stores, each filled with the specimen's passages ----------------------------------------


@pytest.fixture(scope="module")
def pg(postgres_server: Postgres) -> Postgres:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS kb_chunks")
        conn.execute("CREATE TABLE kb_chunks (chunk_id text PRIMARY KEY, body text NOT NULL)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_chunks VALUES (%s, %s)",
                [*PASSAGES.items(), (STORED_NASTY, NASTY_TEXT)],
            )
    return postgres_server


def pg_rows(server: Postgres) -> list[tuple[str, str]]:
    with psycopg.connect(server.url) as conn:
        return list(conn.execute("SELECT chunk_id, body FROM kb_chunks ORDER BY chunk_id"))


@pytest.fixture(scope="module")
def chroma_url(chroma_server: Any) -> str:
    import chromadb

    async def fill() -> None:
        client = await chromadb.AsyncHttpClient(host="127.0.0.1", port=chroma_server.port)
        collection = await client.get_or_create_collection("kb_chunks", embedding_function=None)
        items = [*PASSAGES.items(), (STORED_NASTY, NASTY_TEXT)]
        await collection.upsert(
            ids=[i for i, _ in items],
            documents=[t for _, t in items],
            embeddings=[[float(n), 1.0] for n in range(len(items))],
        )

    asyncio.run(fill())
    return f"{chroma_server.url}/kb_chunks"


def chroma_count(chroma_server: Any) -> int:
    import chromadb

    async def count() -> int:
        client = await chromadb.AsyncHttpClient(host="127.0.0.1", port=chroma_server.port)
        n: int = await (await client.get_collection("kb_chunks")).count()
        return n

    return asyncio.run(count())


class PassageService:
    """The documented HTTP contract on a real server: POST {"ids": [...]} → {"passages": …}."""

    def __init__(self, passages: dict[str, str]) -> None:
        self.passages = passages
        self.requests: list[tuple[str, str, Any]] = []  # method, path, JSON body
        self.authorizations: list[str | None] = []  # each POST's Authorization header
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                service.requests.append(("POST", self.path, body))
                service.authorizations.append(self.headers.get("authorization"))
                if self.path != "/v1/passages":
                    self.send_error(404)
                    return
                found = {i: service.passages[i] for i in body["ids"] if i in service.passages}
                reply = json.dumps({"passages": found}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def do_GET(self) -> None:
                service.requests.append(("GET", self.path, None))
                self.send_error(405)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/passages"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def http_service() -> Iterator[PassageService]:
    service = PassageService({**PASSAGES, STORED_NASTY: NASTY_TEXT})
    yield service
    service.close()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("embedded-store")
    items = [*PASSAGES.items(), (STORED_NASTY, NASTY_TEXT)]
    with sqlite3.connect(root / "kb.db") as db:
        db.execute("CREATE TABLE passages (id TEXT PRIMARY KEY, text TEXT NOT NULL)")
        db.executemany("INSERT INTO passages VALUES (?, ?)", items)
    (root / "kb.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in items), encoding="utf-8"
    )
    return {"sqlite": f"sqlite:///{root / 'kb.db'}", "jsonl": str(root / "kb.jsonl")}


BACKENDS = ("postgresql", "chroma", "http", "sqlite", "jsonl", "plugin")


@pytest.fixture
def store_flags(request: pytest.FixtureRequest) -> list[str]:
    """``--passage-store …`` flags for the backend named by the test's ``backend`` parameter."""
    backend = request.param
    if backend == "postgresql":
        server: Postgres = request.getfixturevalue("pg")
        return ["--passage-store", server.url, "--passage-store-query", QUERY]
    if backend == "chroma":
        return ["--passage-store", request.getfixturevalue("chroma_url")]
    if backend == "http":
        return ["--passage-store", request.getfixturevalue("http_service").url]
    if backend in ("sqlite", "jsonl"):
        return ["--passage-store", request.getfixturevalue("embedded")[backend]]
    return ["--passage-store", "tests.passage_plugin:specimen_store"]


def score(
    capsys: pytest.CaptureFixture[str], src: Path, *flags: str, fmt: str = "otlp-json"
) -> tuple[int, Any, str]:
    code = main(["score", str(src), "--input-format", fmt, "--judge", JUDGE, *flags])
    captured = capsys.readouterr()
    out = json.loads(captured.out) if "json" in flags else captured.out
    return code, out, captured.err


SPECIMEN_VERDICTS = {
    "correct": 1, "misattributed": 2, "multi_hop": 0, "unsupported": 0,
    "dangling": 0, "unjudged": 0, "uncited": 0,
}  # fmt: skip


@pytest.mark.parametrize("store_flags", BACKENDS, indirect=True)
def test_every_backend_scores_the_typed_genai_trace(
    typed_trace: tuple[bytes, Path],
    store_flags: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without a store the trace is 3 of 3 unjudged (test_dialects); with one, the specimen."""
    review = tmp_path / "review.jsonl"
    code, out, err = score(
        capsys, typed_trace[1], *store_flags, "--format", "json", "--review-output", str(review)
    )
    assert code == 0, err
    summary = out["summary"]
    assert (summary["citation_accuracy"], summary["faithfulness"]) == (0.3333, 1.0)
    assert summary["verdicts"] == SPECIMEN_VERDICTS
    (answer,) = out["answers"]
    assert answer["text_source"] == {"p-3310": "store", "p-3311": "store", "p-3312": "store"}
    (record,) = [json.loads(line) for line in review.read_text().splitlines()]
    assert record["text_source"] == {"p-3310": "store", "p-3311": "store", "p-3312": "store"}
    assert record["passages"]["p-3312"] == PASSAGES["p-3312"]


def test_explain_input_names_the_passages_from_the_store(
    typed_trace: tuple[bytes, Path], embedded: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = score(
        capsys, typed_trace[1], "--passage-store", embedded["sqlite"], "--explain-input"
    )
    shown = [line for line in out.splitlines() if line.startswith("  [")]
    assert len(shown) == 3
    assert all(line.endswith("[text from the passage store]") for line in shown)
    assert shown[0].startswith("  [1] p-3310: Audit log retention is 90 days")


def test_a_stopped_postgres_leaves_the_claims_unjudged_and_says_why(
    typed_trace: tuple[bytes, Path], pg: Postgres, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--passage-store", pg.url, "--passage-store-query", QUERY, "--format", "json"]
    pg.stop()
    try:
        code, out, err = score(
            capsys,
            typed_trace[1],
            *flags,
            "--passage-store-retries",
            "1",
            "--passage-store-timeout",
            "1s",
        )
    finally:
        pg.start()
    causes = [(c["verdict"], c["unjudged_cause"]) for c in out["answers"][0]["claims"]]
    assert causes == [("unjudged", "passage_lookup_failed")] * 3
    assert out["summary"]["citation_accuracy"] is None
    assert code == 1
    assert "the passage store failed on 3 of 3 claim(s)" in err
    assert "(passage_lookup_failed): timed out" in err  # the pool found no server in time
    # Started again: the next run is the specimen (nothing was cached as missing).
    code, out, err = score(capsys, typed_trace[1], *flags)
    assert (code, out["summary"]["verdicts"]) == (0, SPECIMEN_VERDICTS), err


@pytest.mark.parametrize("scheme", ["chroma", "http"])
def test_a_store_that_does_not_answer_is_passage_lookup_failed(
    typed_trace: tuple[bytes, Path], scheme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = {"chroma": "chroma://127.0.0.1:{}/kb_chunks", "http": "http://127.0.0.1:{}/v1/p"}
    flags = ["--passage-store", url[scheme].format(free_port()), "--passage-store-retries", "0"]
    code, out, err = score(capsys, typed_trace[1], *flags, "--format", "json")
    causes = {(c["verdict"], c["unjudged_cause"]) for c in out["answers"][0]["claims"]}
    assert causes == {("unjudged", "passage_lookup_failed")}
    assert code == 1 and "the passage store failed on 3 of 3 claim(s)" in err


def nasty_answers(path: Path) -> Path:
    """A citemon JSONL answer whose text-less passages have hostile IDs, cited by position."""
    record = {
        "id": "nasty",
        "question": "How long are audit logs kept?",
        "answer": "Audit logs are kept for 90 days on the Business plan. [1] "
        "Nothing else is known. [2, 3, 4]",
        "passages": [{"id": pid} for pid in NASTY],
    }
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("store_flags", ["postgresql", "chroma", "http", "sqlite"], indirect=True)
def test_ids_are_bound_as_parameters_never_pasted(
    store_flags: list[str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = request.node.callspec.params["store_flags"]
    src = nasty_answers(tmp_path / "nasty.jsonl")
    before: Any = None
    if backend == "postgresql":
        before = pg_rows(request.getfixturevalue("pg"))
    elif backend == "chroma":
        before = chroma_count(request.getfixturevalue("chroma_server"))
    code, out, err = score(
        capsys, src, *store_flags, "--format", "json", "--judge", "lexical", fmt="jsonl"
    )
    assert code == 0, err
    (answer,) = out["answers"]
    # The stored hostile ID's text was found by exact match; the others are simply absent.
    assert answer["text_source"] == {STORED_NASTY: "store"}, err
    claims = answer["claims"]
    assert claims[0]["verdict"] == "correct"
    assert claims[1]["unjudged_cause"] == "no_passage_text"
    if backend == "postgresql":
        assert pg_rows(request.getfixturevalue("pg")) == before
    elif backend == "chroma":
        assert chroma_count(request.getfixturevalue("chroma_server")) == before
    elif backend == "http":
        service: PassageService = request.getfixturevalue("http_service")
        asked = [r for r in service.requests if r[2] and set(r[2]["ids"]) == set(NASTY)]
        assert asked == [("POST", "/v1/passages", {"ids": NASTY})]  # one lookup, IDs in the body
        assert {(m, p) for m, p, _ in service.requests} == {("POST", "/v1/passages")}
    else:
        db = store_flags[1].removeprefix("sqlite:///")
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM passages").fetchone() == (4,)


def test_a_password_in_the_url_is_refused(
    typed_trace: tuple[bytes, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["score", str(typed_trace[1]), "--passage-store", "postgresql://u:s3cret@127.0.0.1/db"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "CITEMON_PASSAGE_STORE_PASSWORD" in err and "s3cret" not in err


def test_the_password_comes_from_the_environment(
    postgres_server: Postgres,
    pg: Postgres,
    typed_trace: tuple[bytes, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A role that must give its password (SCRAM on loopback): without
    CITEMON_PASSAGE_STORE_PASSWORD the lookup fails (said, never guessed); with it, the
    specimen; the secret is printed nowhere."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS kb_reader")
        conn.execute("CREATE ROLE kb_reader LOGIN PASSWORD 'pw-from-env'")
        conn.execute("GRANT SELECT ON kb_chunks TO kb_reader")
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(row[0])
        rule = "host all kb_reader 127.0.0.1/32 scram-sha-256\n"
        if rule not in hba.read_text():
            hba.write_text(rule + hba.read_text())  # first match wins
        conn.execute("SELECT pg_reload_conf()")
    url = postgres_server.url.replace("postgres@", "kb_reader@")
    flags = ["--passage-store", url, "--passage-store-query", QUERY, "--format", "json"]
    code, out, err = score(
        capsys,
        typed_trace[1],
        *flags,
        "--passage-store-retries",
        "0",
        "--passage-store-timeout",
        "1",
    )
    assert code == 1 and "the passage store failed on 3 of 3 claim(s)" in err
    monkeypatch.setenv("CITEMON_PASSAGE_STORE_PASSWORD", "pw-from-env")
    code, out, err = score(capsys, typed_trace[1], *flags)
    assert (code, out["summary"]["verdicts"]) == (0, SPECIMEN_VERDICTS), err
    assert "pw-from-env" not in err + json.dumps(out)
    # The same password from a file (a mounted secret), by the one rule for secrets.
    monkeypatch.delenv("CITEMON_PASSAGE_STORE_PASSWORD")
    secret = tmp_path / "pg-password"
    secret.write_text("pw-from-env\n")
    code, out, err = score(
        capsys, typed_trace[1], *flags, "--passage-store-password-file", str(secret)
    )
    assert (code, out["summary"]["verdicts"]) == (0, SPECIMEN_VERDICTS), err
    assert "pw-from-env" not in err + json.dumps(out)


def test_the_token_comes_from_its_variable_or_its_file(
    http_service: PassageService,
    typed_trace: tuple[bytes, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The HTTP store sends the settings' token (its variable, or the file of
    ``--passage-store-token-file``) as a bearer token, and nothing without one; both at once is a
    usage error. The token is printed nowhere."""
    flags = ["--passage-store", http_service.url, "--format", "json"]
    seen = len(http_service.authorizations)
    code, out, err = score(capsys, typed_trace[1], *flags)
    assert (code, out["summary"]["verdicts"]) == (0, SPECIMEN_VERDICTS), err
    monkeypatch.setenv("CITEMON_PASSAGE_STORE_TOKEN", "tok-from-env")
    code, out, err = score(capsys, typed_trace[1], *flags)
    assert code == 0 and "tok-from-env" not in err + json.dumps(out)
    token_file = tmp_path / "store-token"
    token_file.write_text("tok-from-file\n")
    argv = ["score", str(typed_trace[1]), "--input-format", "otlp-json", "--judge", JUDGE]
    code = main([*argv, *flags, "--passage-store-token-file", str(token_file)])
    err = capsys.readouterr().err
    assert code == 2 and "passage store token by env or by file, not both" in err
    assert "tok-from" not in err
    monkeypatch.delenv("CITEMON_PASSAGE_STORE_TOKEN")
    code, out, err = score(
        capsys, typed_trace[1], *flags, "--passage-store-token-file", str(token_file)
    )
    assert code == 0 and "tok-from-file" not in err + json.dumps(out)
    assert http_service.authorizations[seen:] == [
        None,
        "Bearer tok-from-env",
        "Bearer tok-from-file",
    ]


# -- through Kafka ------------------------------------------------------------------------------


def with_trace_id(payload: bytes, trace_id: bytes) -> tuple[bytes, bytes]:
    req = ExportTraceServiceRequest.FromString(payload)
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.trace_id = trace_id
    return trace_id.hex().encode(), req.SerializeToString()


async def readyz(port: int) -> int:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code


async def until_readyz(port: int, status: int, timeout_s: float) -> None:
    """Poll ``/readyz`` (served on this loop) until it answers ``status``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if await readyz(port) == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"/readyz did not answer {status} within {timeout_s:.0f} s")


async def test_run_scores_the_typed_trace_and_holds_answers_through_a_store_outage(
    typed_trace: tuple[bytes, Path],
    pg: Postgres,
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``citemon run`` with the PostgreSQL store: the specimen from Kafka; with the server
    stopped, the next answer is held (``/readyz`` 503, not scored ``unjudged``) and scored
    exactly once the server is back."""
    topic = await kafka_topic(partitions=1)
    results = await kafka_topic(partitions=1)
    first = with_trace_id(typed_trace[0], bytes.fromhex("11" * 16))
    second = with_trace_id(typed_trace[0], bytes.fromhex("22" * 16))
    flags = ("--judge", JUDGE, "--passage-store", pg.url, "--passage-store-query", QUERY)
    settings = settings_for(
        kafka_bootstrap,
        topic,
        # No cache: the held answer asks for the very IDs the first one fetched.
        (
            *flags,
            *("--passage-store-retries", "0", "--passage-store-timeout", "2s"),
            *("--passage-store-cache-size", "0"),
        ),
        trace_window_s=0.5,
        results_topic=results,
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        async with run_monitor(settings) as mon:
            r = mon.registry
            await producer.send_and_wait(topic, first[1], key=first[0])
            await wait_for(
                lambda: metric_sum(r, "citemon_answers_total") == 1, 60, "the first answer"
            )
            assert metric_sum(r, "citemon_passage_lookups_total", outcome="fetched") == 3
            assert await readyz(mon.server.port) == 200
            await asyncio.to_thread(pg.stop)
            try:
                await producer.send_and_wait(topic, second[1], key=second[0])
                await until_readyz(mon.server.port, 503, 60)  # the store taken to be down
                down = [r.getMessage() for r in caplog.records if "failing every" in r.message]
                assert down and "holding answers and probing it" in down[0]
                assert "127.0.0.1" in down[0]  # the store named, without credentials
                assert metric_sum(r, "citemon_passage_lookup_seconds_count") >= 2
                assert metric_sum(r, "citemon_answers_total") == 1  # held, not scored
            finally:
                await asyncio.to_thread(pg.start)
            await wait_for(
                lambda: metric_sum(r, "citemon_answers_total") == 2, 60, "the held answer"
            )
            assert await readyz(mon.server.port) == 200
            assert any("answering again after" in rec.getMessage() for rec in caplog.records)
            assert metric_sum(r, "citemon_claims_total", verdict="correct") == 2
            assert metric_sum(r, "citemon_claims_total", verdict="misattributed") == 4
            assert metric_sum(r, "citemon_claims_total", verdict="unjudged") == 0
            assert metric_sum(r, "citemon_passage_lookups_total", outcome="failed") == 0
    finally:
        await producer.stop()
    bodies = [json.loads(rec.value) for rec in await read_topic(kafka_bootstrap, results)]
    assert len(bodies) == 2
    for body in bodies:
        assert [c["verdict"] for c in body["claims"]] == ["correct", *["misattributed"] * 2]
        assert body["text_source"] == {"p-3310": "store", "p-3311": "store", "p-3312": "store"}


@pytest.mark.parametrize(
    "store_flags", ["chroma", "http", "sqlite", "jsonl", "plugin"], indirect=True
)
async def test_run_scores_the_typed_trace_through_every_other_backend(
    typed_trace: tuple[bytes, Path],
    store_flags: list[str],
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
) -> None:
    """The specimen from Kafka with each backend (PostgreSQL: the outage test above)."""
    topic = await kafka_topic(partitions=1)
    results = await kafka_topic(partitions=1)
    key, value = with_trace_id(typed_trace[0], bytes.fromhex("33" * 16))
    settings = settings_for(
        kafka_bootstrap,
        topic,
        ("--judge", JUDGE, *store_flags),
        trace_window_s=0.5,
        results_topic=results,
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
    async with run_monitor(settings) as mon:
        r = mon.registry
        await wait_for(lambda: metric_sum(r, "citemon_answers_total") == 1, 60, "the answer")
        assert metric_sum(r, "citemon_claims_total", verdict="correct") == 1
        assert metric_sum(r, "citemon_claims_total", verdict="misattributed") == 2
        assert metric_sum(r, "citemon_claims_total", verdict="unjudged") == 0
        assert metric_sum(r, "citemon_faithful_claims_total") == 3
        assert metric_sum(r, "citemon_passage_lookups_total", outcome="fetched") == 3
    (body,) = [json.loads(rec.value) for rec in await read_topic(kafka_bootstrap, results)]
    assert body["text_source"] == {"p-3310": "store", "p-3311": "store", "p-3312": "store"}
