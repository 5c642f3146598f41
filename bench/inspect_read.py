"""``citemon inspect`` on a busy results topic: how long the on-call waits, and its memory.

Writes 30,000 results records (the bundled sample's answers scored by the lexical judge, with
240-character excerpts, about 1.3 KB each) to a fresh 3-partition topic on the local broker in
transactions of 500, as ``citemon run`` commits them, then times the real CLI in a subprocess
(three runs each): the default view (``--since 1h``, the 20 worst failed claims), a filtered
one, and ``--last 100``, against the interpreter's own start-up (``citemon inspect --help``).
Peak RSS is the child's ``ru_maxrss``: the :class:`~citemon._commands._inspection.Worst` heap keeps
``--limit`` findings, not the hour.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = os.environ.get("CITEMON_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
RECORDS = 30_000
PER_TRANSACTION = 500


async def _bodies() -> list[bytes]:
    from citemon._demo.data import sample_records
    from citemon._engine.excerpts import recut
    from citemon._engine.scoring import Scorer
    from citemon.judges.lexical import LexicalJudge

    records = list(sample_records())
    scores = await Scorer(LexicalJudge()).score_many(records)
    out: list[bytes] = []
    for i in range(RECORDS):
        score = scores[i % len(scores)]
        body = score.model_dump(mode="json")
        body.update(
            trace_id=f"{i:032x}",
            span_id=f"{i:016x}",
            service="support-bot",
            version=("v1", "v2")[i % 2],
            environment="prod",
            excerpts=recut(score.evidence, 240),
        )
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


async def _fill(topic: str) -> float:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()
    bodies = await _bodies()
    producer = AIOKafkaProducer(
        bootstrap_servers=BOOTSTRAP, transactional_id=f"tx.{topic}", linger_ms=5
    )
    await producer.start()
    try:
        for start in range(0, len(bodies), PER_TRANSACTION):
            async with producer.transaction():
                for body in bodies[start : start + PER_TRANSACTION]:
                    await producer.send(topic, body)
    finally:
        await producer.stop()
    return sum(map(len, bodies)) / len(bodies)


async def _drop(topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


def _time(flags: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "citemon.cli", "inspect", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"inspect {flags} exited {done.returncode}: {done.stderr}")
    return elapsed, (done.stderr.strip().splitlines() or ["(no summary)"])[-1]


def run() -> None:
    topic = f"bench.inspect.{uuid.uuid4().hex[:8]}"
    size = asyncio.run(_fill(topic))
    print(f"{RECORDS} results records, {size:.0f} bytes each on average, in {topic}")
    base = ["--bootstrap-servers", BOOTSTRAP, "--results-topic", topic]
    cases = {
        "start-up (--help)": ["--help"],
        "default (--since 1h, 20 worst)": base,
        "--version v2 --verdict misattributed --limit 5": [
            *base,
            "--version",
            "v2",
            "--verdict",
            "misattributed",
            "--limit",
            "5",
        ],
        "--last 100 (per partition)": [*base, "--last", "100"],
    }
    try:
        for name, flags in cases.items():
            times = []
            line = ""
            for _ in range(3):
                elapsed, line = _time(flags)
                times.append(elapsed)
            print(f"{name}: {min(times):.2f}–{max(times):.2f} s  [{line[:150]}]")
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak RSS of an inspect process: {peak_mb:.0f} MB")
    finally:
        asyncio.run(_drop(topic))
