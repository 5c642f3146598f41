"""The passage store (``--passage-store``) against a real PostgreSQL server, in one run:

1. **Lookups per answer and the cache.** The demo's 49 sample answers, traced by ID alone,
   scored 5 times over (repeated traffic) with the PostgreSQL store: lookups and round trips
   per answer, and the cache's hit ratio; the figures must equal the demo's with text.
2. **Throughput.** ``citemon run`` (the lexical judge, so the monitor itself is the bottleneck)
   on the real broker: the same answers with the passage text in the trace, and by ID alone
   with the PostgreSQL store, every answer with passage IDs of its own (so every answer is a
   round trip: the cache's worst case), runs interleaved text/store/text/store/…. The ratio of
   the medians, store / text, of answers per second (aim ≥ 0.9).

PostgreSQL is started here (Debian's binaries, ``make postgres``) on a loopback port, in a
directory of its own, and removed at the end.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from bench.monitor import (  # noqa: E402
    BOOTSTRAP,
    _delete,
    _free_port,
    _metrics,
    _start,
    _stop,
    _topics,
    _wait,
)
from citemon._core.records import AnswerRecord, Passage  # noqa: E402
from citemon._demo.data import sample_records  # noqa: E402
from citemon._demo.service import otlp_template  # noqa: E402
from citemon._demo.store import demo_passages, ids_only  # noqa: E402
from citemon._engine.scoring import Scorer  # noqa: E402
from citemon._engine.summary import summarize  # noqa: E402
from citemon._passages import ManagedStore  # noqa: E402
from citemon._passages.postgres import PostgresStore  # noqa: E402
from citemon.judges.lexical import LexicalJudge  # noqa: E402
from tests.integration.store_servers import Postgres, postgres_bin, running_postgres  # noqa: E402

ANSWERS: Final = int(os.environ.get("BENCH_STORE_ANSWERS", "2000"))
ROUNDS: Final = 5
RUNS: Final = int(os.environ.get("BENCH_STORE_RUNS", "6"))  # interleaved, half of each kind
QUERY: Final = "SELECT chunk_id, body FROM kb_chunks WHERE chunk_id = ANY(%(ids)s)"
_IDS: Final = ("kb-a00000000", "kb-b00000000", "kb-c00000000")
_TEXTS: Final = (
    "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
    "Retention cannot be configured from the dashboard. Contact your account manager.",
    "Enterprise agreements may include custom data retention terms negotiated at signing.",
)


def _fill(server: Postgres, rows: list[tuple[str, str]]) -> None:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS kb_chunks")
        conn.execute("CREATE TABLE kb_chunks (chunk_id text PRIMARY KEY, body text NOT NULL)")
        with conn.cursor() as cur, cur.copy("COPY kb_chunks (chunk_id, body) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def lookups(server: Postgres) -> None:
    records = sample_records()
    _fill(server, list(demo_passages().items()))

    async def score() -> None:
        store = ManagedStore(PostgresStore(server.url, query=QUERY))
        scorer = Scorer(LexicalJudge(), passages=store)
        try:
            with_text = summarize(await Scorer(LexicalJudge()).score_many(records))
            bare = [ids_only(r) for r in records]
            by_store = with_text
            for _ in range(ROUNDS):
                by_store = summarize(await scorer.score_many(bare))
                assert by_store.verdicts == with_text.verdicts, "the store changed a verdict"
        finally:
            await store.aclose()
        n = ROUNDS * len(records)
        s = store.stats
        hits = "n/a" if s.hit_ratio is None else f"{s.hit_ratio:.3f}"
        print(
            f"{len(records)} demo answers traced by ID, {ROUNDS} rounds ({n} answers): "
            f"{s.lookups / n:.2f} lookups and {s.round_trips / n:.3f} round trips per answer; "
            f"cache hit ratio {hits} ({s.cached} of "
            f"{s.cached + s.fetched + s.not_found} IDs); verdicts equal to the demo with text "
            f"({with_text.verdicts['correct']} correct, "
            f"{with_text.verdicts['misattributed']} misattributed, "
            f"{by_store.verdicts['unjudged']} unjudged)"
        )

    asyncio.run(score())


def _template(with_text: bool) -> tuple[bytes, bytes]:
    record = AnswerRecord(
        question="How long do we keep audit logs, and can I extend it?",
        answer=f"Audit logs are kept 90 days on the Business plan [{_IDS[0]}]. "
        f"Contact your account manager to change retention [{_IDS[1]}]. "
        f"Enterprise agreements may set custom retention terms [{_IDS[2]}].",
        passages=[
            Passage(id=pid, text=text if with_text else "")
            for pid, text in zip(_IDS, _TEXTS, strict=True)
        ],
    )
    return otlp_template(record)


def _messages(template: tuple[bytes, bytes], n: int, run: int) -> list[tuple[bytes, bytes]]:
    payload, old_tid = template
    out = []
    for i in range(n):
        tid = uuid.uuid4().bytes
        value = payload.replace(old_tid, tid, 1)
        for pid in _IDS:  # IDs of its own: the marker and the document, same length
            value = value.replace(pid.encode(), f"{pid[:4]}{run}{i:07d}".encode())
        out.append((tid.hex().encode(), value))
    return out


async def _produce(topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, linger_ms=50, acks=1)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k) for k, v in messages]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _one_run(run: int, store: Postgres | None) -> float:
    """Answers per second of one ``citemon run`` over a backlog of ``ANSWERS`` answers."""
    topic = f"bench.store.{uuid.uuid4().hex[:8]}"
    asyncio.run(_topics(topic, f"{topic}.dlq"))
    port = _free_port()
    extra = ["--judge", "lexical"]
    if store is not None:
        extra += ["--passage-store", store.url, "--passage-store-query", QUERY]
    try:
        # The backlog first, then the monitor: it reads as fast as it can score.
        asyncio.run(_produce(topic, _messages(_template(store is None), ANSWERS, run)))
        proc = _start(topic, "http://127.0.0.1:9", port, *extra)
        try:
            _wait(lambda: bool(_metrics(port)), 30)
            _wait(lambda: _metrics(port).get("citemon_answers_total", 0) >= 1, 60, 0.01)
            t0 = time.perf_counter()
            _wait(lambda: _metrics(port).get("citemon_answers_total", 0) >= ANSWERS, 600, 0.05)
            elapsed = time.perf_counter() - t0
            m = _metrics(port)
        finally:
            _stop(proc)
    finally:
        asyncio.run(_delete(topic, f"{topic}.dlq"))
    if store is not None:
        assert m.get("citemon_passage_lookups_total", 0) >= ANSWERS * 3 - 3
    assert m.get("citemon_claims_total", 0) == 3 * ANSWERS
    return (ANSWERS - 1) / elapsed


def throughput(server: Postgres) -> None:
    rows = [
        (f"{pid[:4]}{run}{i:07d}", text)
        for run in range(RUNS)
        for i in range(ANSWERS)
        for pid, text in zip(_IDS, _TEXTS, strict=True)
    ]
    _fill(server, rows)
    rates: dict[str, list[float]] = {"text": [], "store": []}
    for run in range(RUNS):  # interleaved: text, store, text, store, …
        kind = "store" if run % 2 else "text"
        rates[kind].append(_one_run(run, server if kind == "store" else None))
    text, store = (statistics.median(rates[k]) for k in ("text", "store"))
    print(
        f"citemon run, lexical judge, {ANSWERS} answers a run, interleaved: text in the trace "
        f"median {text:.0f} answers/s ({', '.join(f'{r:.0f}' for r in rates['text'])}); by ID "
        f"with the PostgreSQL store, a round trip per answer, median {store:.0f} answers/s "
        f"({', '.join(f'{r:.0f}' for r in rates['store'])}) → ratio {store / text:.2f} "
        "(aim ≥ 0.9)"
    )


def run() -> None:
    bin_dir = postgres_bin()
    if bin_dir is None:
        print("skipped: no PostgreSQL server binaries (make postgres)")
        return
    with running_postgres(bin_dir) as server:
        lookups(server)
        throughput(server)


if __name__ == "__main__":
    run()
