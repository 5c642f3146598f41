"""The pipeline's bookkeeping on a revoke, without a broker: what a revoked partition leaves
behind (traces held for assembly, answers in flight) is never scored or counted here, and the
transactional IDs every replica derives for a partition are the same."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from citemon._otlp.decoding import decode_otlp
from citemon._service import intake
from citemon._service.held import decode_held
from citemon._service.kafka import BadBatch, KafkaClients, RecordLimits, Scan
from citemon._service.outputs import Commit
from citemon._service.pipeline import Pipeline, PipelineStats
from citemon._service.settings import Settings
from tests.built import Build
from tests.kafka_faults import RereadClients, Rereads

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rec:
    """The fields of a consumed record the pipeline reads (a ConsumerRecord's)."""

    offset: int
    value: bytes
    key: bytes | None = None
    timestamp: int = -1


def _trace_spans() -> tuple[ReadableSpan, ReadableSpan, ReadableSpan]:
    """One trace: a RETRIEVER span, an LLM span, and their root (a "POST /chat" span)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("oi")
    with tracer.start_as_current_span("POST /chat"):
        tracer.start_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": "n-1",
                "retrieval.documents.0.document.content": "Logs are kept 90 days.",
            },
        ).end()
        tracer.start_span(
            "synthesize",
            attributes={"openinference.span.kind": "LLM", "output.value": "Kept 90 days [n-1]."},
        ).end()
    retriever, llm, root = exporter.get_finished_spans()
    return retriever, llm, root


def rootless_parts() -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """A RETRIEVER span and an LLM span whose root lives in another service."""
    retriever, llm, _root = _trace_spans()
    return [retriever], [llm]


def trace_key(spans: list[ReadableSpan]) -> bytes:
    """The held-parts store's key of the spans' trace: its ID in hex."""
    context = spans[0].context
    assert context is not None
    return f"{context.trace_id:032x}".encode()


async def pipeline(build: Build, clock: Clock) -> tuple[Pipeline, CollectorRegistry]:
    """A pipeline without a broker, owning TP0 and TP1 (no delivery: nothing opens)."""
    registry = CollectorRegistry()
    settings = Settings(trace_window_s=5.0, revoke_timeout_s=0.0)
    p = build(settings, registry=registry, clock=clock)
    await p.on_partitions_assigned([TP0, TP1])
    return p, registry


def answers(registry: CollectorRegistry) -> float:
    return sum(
        s.value for m in registry.collect() for s in m.samples if s.name == "citemon_answers_total"
    )


async def test_a_revoked_partitions_held_trace_is_discarded_never_scored_or_counted(
    build: Build,
) -> None:
    clock = Clock()
    p, registry = await pipeline(build, clock)
    retriever, llm = rootless_parts()
    p.intake.take(TP0, Rec(0, encode_spans(retriever).SerializeToString()))
    p.intake.take(TP0, Rec(1, encode_spans(llm).SerializeToString()))
    # Held, but not by its records: each writes the trace's parts so far to the held-parts
    # store with its own commit, and is finished.
    assert len(p.assembler) == 1 and p.offsets.unfinished([TP0]) == 0
    (ready,) = p.offsets.ready([TP0])
    assert ready.offset == 2
    key = trace_key(retriever)
    assert [
        (m.topic, m.partition, m.key, len(decode_held(m.value or b"").parts))
        for e in ready.entries
        for m in e.held
    ] == [("citemon.held-spans", 0, key, 1), ("citemon.held-spans", 0, key, 2)]
    await p.on_partitions_revoked([TP0])
    assert len(p.assembler) == 0 and p.assembler.discarded == 1
    clock.now = 60.0  # far past the window: nothing is left to settle
    p.intake.tick()
    assert p.stats.answers_started == 0 and p.inflight == 0
    assert answers(registry) == 0
    assert p.offsets.partitions == [TP1]  # TP0's records dropped, uncommitted: re-read there


async def test_a_kept_partitions_held_trace_is_settled_with_its_records(build: Build) -> None:
    clock = Clock()
    p, _ = await pipeline(build, clock)
    retriever, llm = rootless_parts()
    p.intake.take(TP1, Rec(7, encode_spans(retriever).SerializeToString()))
    p.intake.take(TP1, Rec(8, encode_spans(llm).SerializeToString()))
    await p.on_partitions_revoked([TP0])  # another partition: the trace stays held
    assert len(p.assembler) == 1
    clock.now = 5.0
    p.intake.tick()
    assert p.stats.answers_started == 1
    (job,) = list(p.jobs)
    assert p.jobs[job] == frozenset({TP1})
    await job
    (ready,) = p.offsets.ready()
    assert (ready.tp, ready.offset) == (TP1, 9)
    # The window settled it with an anchor at TP1's position (offset 8 again, committing 9):
    # the answer and the store's tombstone go out in one commit, after the parts' upserts.
    assert [(e.offset, len(e.answers)) for e in ready.entries] == [(7, 0), (8, 0), (8, 1)]
    assert [[m.value is None for m in e.held] for e in ready.entries] == [[False], [False], [True]]


async def test_a_held_part_never_holds_its_offset_back_and_its_tombstone_follows_the_window(
    build: Build,
) -> None:
    clock = Clock()
    p, _ = await pipeline(build, clock)
    retriever, _ = rootless_parts()  # documents but never an answer
    p.intake.take(TP1, Rec(3, encode_spans(retriever).SerializeToString()))
    clock.now = 4.9
    p.intake.tick()
    (ready,) = p.offsets.ready()  # held in the store, not by its record: it commits at once
    assert ready.offset == 4 and [m.value is None for m in ready.entries[0].held] == [False]
    p.offsets.confirm(ready)
    clock.now = 5.0
    p.intake.tick()  # dropped incomplete by the window: a tombstone commits at the same offset
    (ready,) = p.offsets.ready()
    assert (ready.offset, p.assembler.dropped_incomplete) == (4, 1)
    assert [(m.key, m.value, m.partition) for m in ready.entries[0].held] == [
        (trace_key(retriever), None, 1)
    ]


async def test_an_assembled_trace_with_no_record_behind_it_is_not_counted(build: Build) -> None:
    clock = Clock()
    p, registry = await pipeline(build, clock)
    retriever, llm = rootless_parts()
    p.assembler.add(decode_otlp(encode_spans(retriever + llm).SerializeToString()).spans)
    clock.now = 5.0
    p.intake.tick()  # no Kafka record holds it (the pre-fix "count at once" path)
    assert p.stats.answers_started == 0 and answers(registry) == 0


def test_every_replica_derives_the_same_transactional_id_per_partition() -> None:
    a, b = Settings(group="citemon"), Settings(group="citemon")
    assert a.transactional_id_for("otlp_spans", 3) == "citemon-citemon-otlp_spans-3"
    assert a.transactional_id_for("otlp_spans", 3) == b.transactional_id_for("otlp_spans", 3)
    assert a.transactional_id_for("otlp_spans", 3) != a.transactional_id_for("otlp_spans", 4)
    assert Settings(group="other").transactional_id_for("otlp_spans", 3) != (
        a.transactional_id_for("otlp_spans", 3)
    )
    # Spelling out the derived prefix is accepted; nothing else can be set (test_settings.py).
    spelled = Settings(group="citemon", transactional_id="citemon-citemon")
    assert spelled.transactional_id_for("otlp_spans", 3) == a.transactional_id_for("otlp_spans", 3)


async def test_a_lost_partition_is_dropped_uncounted_and_read_no_more(build: Build) -> None:
    """What a fenced (or broken) producer's partition leaves: nothing to count, nothing taken."""
    clock = Clock()
    p, registry = await pipeline(build, clock)
    retriever, llm = rootless_parts()
    other, _ = rootless_parts()
    p.intake.take(TP0, Rec(0, encode_spans(retriever).SerializeToString()))
    p.intake.take(TP1, Rec(0, encode_spans(other).SerializeToString()))  # another trace, on TP1
    p.lose({TP0}, "have a new owner")
    assert len(p.assembler) == 1 and p.assembler.discarded == 1  # TP1's part is still held
    assert p.offsets.partitions == [TP1] and p.stats.partitions_lost == 1
    p.intake.take(TP0, Rec(1, encode_spans(llm).SerializeToString()))
    assert p.stats.records == 2  # TP0's records are no longer taken
    clock.now = 60.0
    p.intake.tick()
    assert p.stats.answers_started == 0 and answers(registry) == 0


async def test_a_trace_split_over_partitions_is_discarded_whole_and_the_kept_part_released(
    build: Build,
) -> None:
    clock = Clock()
    p, _ = await pipeline(build, clock)
    retriever, llm = rootless_parts()  # one trace, spread over two partitions (not keyed by ID)
    p.intake.take(TP0, Rec(0, encode_spans(retriever).SerializeToString()))
    p.intake.take(TP1, Rec(5, encode_spans(llm).SerializeToString()))
    await p.on_partitions_revoked([TP0])
    assert len(p.assembler) == 0
    (ready,) = p.offsets.ready()  # TP1's part no longer holds its offset back
    assert (ready.tp, ready.offset) == (TP1, 6)


def rooted_parts() -> tuple[bytes, bytes]:
    """A trace in two records: its RETRIEVER span, then its LLM span with the root (the
    assembler completes it, and remembers it as answered, when the second one is read)."""
    retriever, llm, root = _trace_spans()
    return (
        encode_spans([retriever]).SerializeToString(),
        encode_spans([llm, root]).SerializeToString(),
    )


def take_trace(p: Pipeline, first: bytes, second: bytes) -> None:
    p.intake.take(TP0, Rec(0, first))
    p.intake.take(TP0, Rec(1, second))


async def test_a_trace_cancelled_at_revoke_is_scored_when_its_partition_comes_back(
    build: Build,
) -> None:
    clock = Clock()
    p, _ = await pipeline(build, clock)
    first, second = rooted_parts()
    take_trace(p, first, second)
    assert p.assembler.completed == 1 and p.stats.answers_started == 1
    (cancelled,) = list(p.jobs)
    await p.on_partitions_revoked([TP0])  # revoke_timeout_s=0: the job is cancelled, unscored
    await asyncio.gather(cancelled, return_exceptions=True)
    assert cancelled.cancelled() and p.stats.cancelled_at_revoke == 1 and p.inflight == 0
    await p.on_partitions_assigned([TP0])  # the eager rebalance hands TP0 back to this replica
    take_trace(p, first, second)  # re-read from the committed offset
    p.intake.tick()
    assert p.assembler.completed == 2 and p.stats.answers_started == 2
    (job,) = list(p.jobs)
    await job
    (ready,) = p.offsets.ready()
    assert (ready.tp, ready.offset) == (TP0, 2)
    assert [len(e.answers) for e in ready.entries] == [0, 1]


async def test_a_scored_uncommitted_trace_is_scored_again_when_its_partition_comes_back(
    build: Build,
) -> None:
    clock = Clock()
    p, _ = await pipeline(build, clock)
    first, second = rooted_parts()
    take_trace(p, first, second)
    (job,) = list(p.jobs)
    await job  # finished: its score sits in offset 1's entry, not committed (no delivery)
    (ready,) = p.offsets.ready()
    assert [len(e.answers) for e in ready.entries] == [0, 1]
    p.lose({TP0}, "fenced in this test")  # its score is dropped, uncounted
    await p.on_partitions_revoked([TP0])
    await p.on_partitions_assigned([TP0])
    take_trace(p, first, second)
    p.intake.tick()
    assert p.stats.answers_started == 2
    (job,) = list(p.jobs)
    await job
    (ready,) = p.offsets.ready()
    assert (ready.tp, ready.offset) == (TP0, 2)
    assert [len(e.answers) for e in ready.entries] == [0, 1]


class Consumer:
    """The calls the bad-batch recovery and the opening of a partition make of a consumer."""

    def __init__(self, committed: int) -> None:
        self._committed = committed
        self.positions: dict[TopicPartition, int] = {}
        self.seeks: list[tuple[TopicPartition, int]] = []

    async def committed(self, tp: TopicPartition) -> int:
        return self._committed

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions.get(tp, self._committed)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.positions[tp] = offset


async def test_a_bad_batch_met_while_a_partition_opens_is_left_for_after_its_seek(
    build: Build,
) -> None:
    bad = BadBatch("t", 0, 1, 4, "zstd", "unsupported_codec", "no zstd", b"raw")
    rereads = Rereads({TP0: Scan(bad=bad)})
    # No broker: ``rereads`` answers intake's re-read.
    p = build(Settings(topic="t"), clients=RereadClients(rereads))
    ledger = p.offsets
    ledger.assign([TP0], opening=True)  # its producer is not open yet
    consumer = Consumer(committed=0)
    assert await p.intake.recover(consumer, ValueError("undecodable")) is False
    assert rereads.read == [] and consumer.seeks == [] and len(ledger) == 0
    # The pipeline then seeks TP0 to its committed offset 0 and takes it from there...
    ledger.opened(TP0, 0)
    p.intake.take(TP0, Rec(0, b""))  # no spans: skipped, finished at once
    # ...and meets the bad batch after it: now it is skipped, from where intake stands.
    consumer.positions[TP0] = 1
    assert await p.intake.recover(consumer, ValueError("undecodable")) is True
    assert rereads.read == [(TP0, 1)] and consumer.seeks == [(TP0, 4)]
    assert p.stats.undecodable_batches == 1 and p.stats.rewound_partitions == 0
    # One finished entry at the batch's last offset carries the dead letter: the commit
    # moves past the whole batch.
    (ready,) = ledger.ready()
    assert (ready.offset, [e.offset for e in ready.entries]) == (4, [0, 3])
    assert ready.entries[1].dead_letters == ["unsupported_codec"]
    # A fetch that fails again with nothing left to find there: not located, so the loop waits
    # before fetching again (UNLOCATED_BACKOFF_S), and nothing is sought.
    del rereads.scans[TP0]
    assert await p.intake.recover(consumer, ValueError("undecodable")) is False
    assert rereads.read[-1] == (TP0, 4) and consumer.seeks == [(TP0, 4)]
    assert p.stats.undecodable_batches == 1


async def test_a_partition_reassigned_during_the_re_read_is_left_to_its_new_seek(
    build: Build,
) -> None:
    # TP0 taken up to 4 (intake stands at 5); the failed fetch drained it to 7.
    bad = BadBatch("t", 0, 7, 10, "zstd", "unsupported_codec", "no zstd", b"raw")
    rereads = Rereads({TP0: Scan([Rec(5, b""), Rec(6, b"")], bad)})
    p = build(Settings(topic="t"), clients=RereadClients(rereads))
    ledger = p.offsets
    ledger.assign([TP0], opening=True)
    ledger.opened(TP0, 0)
    for offset in range(5):
        p.intake.take(TP0, Rec(offset, b""))
    consumer = Consumer(committed=0)
    consumer.positions[TP0] = 7

    def reassign() -> None:
        # While the fetch is out, a rebalance revokes TP0 (0-1 committed, 2-4 dropped
        # uncommitted), gives it back and opens it: sought to its commit, 2, from where its
        # records are read again.
        ledger.rebalance()
        ledger.start_revoking({TP0})
        ledger.drop({TP0})
        ledger.remove({TP0})
        ledger.assign([TP0], opening=True)
        consumer.seek(TP0, 2)
        ledger.sought(TP0)
        ledger.opened(TP0, 2)

    rereads.meanwhile = reassign
    # What the re-read found starts at 5, where intake stood before the rebalance: taking it
    # and seeking past the batch would commit past 2-4, never read again. Left to the new
    # seek: the next fetch reads from 2 and meets the batch again.
    assert await p.intake.recover(consumer, ValueError("undecodable")) is False
    assert rereads.read == [(TP0, 5)]
    assert consumer.seeks == [(TP0, 5), (TP0, 2)]
    assert len(ledger) == 0 and ledger.ready() == []
    assert p.stats.undecodable_batches == 0


class Producer:
    """The calls a transactional KafkaDelivery makes of an AIOKafkaProducer; ``opens`` gates
    its start (``init_transactions``: where a new owner waits for the previous one)."""

    def __init__(self, committed: dict[TopicPartition, int], opens: asyncio.Event) -> None:
        self.committed, self.opens = committed, opens

    async def start(self) -> None:
        await self.opens.wait()

    async def stop(self) -> None:
        return None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        yield

    async def send(self, *_: object, **__: object) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any], _: str) -> None:
        self.committed.update({tp: o.offset for tp, o in offsets.items()})


class Fetching(Consumer):
    """A group consumer that assigns TP1 (its log read from the start), then TP0 (committed at
    2) in a callback of its own, as aiokafka's coordinator does. Its first fetch (if
    ``stale``) predates TP0's seek to its committed offset, and TP0's producer opens only once
    that fetch is handed out, so the seek lands while intake takes it; the next fetch waits
    for the seek and delivers from there; the one after stops the intake."""

    def __init__(self, stale: list[Rec], end: int, stop: asyncio.Event) -> None:
        super().__init__(committed=2)
        self.fetches = [{TP0: stale, TP1: [Rec(i, b"") for i in range(3)]}] if stale else []
        self.end, self.done = end, stop
        self.handed_out = asyncio.Event()  # the stale fetch (TP0's producer opens after it)
        self.sought = asyncio.Event()  # TP0 sought to its committed offset
        self.listener: Any = None
        self.assigning: asyncio.Task[None] | None = None

    def subscribe(self, topics: list[str], *, listener: Any) -> None:
        self.listener = listener

    async def start(self) -> None:
        await self.listener.on_partitions_assigned([TP1])
        self.assigning = asyncio.create_task(self.listener.on_partitions_assigned([TP0]))

    async def stop(self) -> None:
        return None

    async def committed(self, tp: TopicPartition) -> int | None:
        return self._committed if tp == TP0 else None

    async def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.seek(tp, 0)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        super().seek(tp, offset)
        if tp == TP0:
            self.sought.set()

    def pause(self, *_: TopicPartition) -> None:
        return None

    def paused(self) -> set[TopicPartition]:
        return set()

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.end for tp in tps}

    async def getmany(self, **_: object) -> dict[TopicPartition, list[Rec]]:
        if self.fetches:
            self.handed_out.set()
            return self.fetches.pop()
        self.handed_out.set()
        await self.sought.wait()
        if self.done.is_set():
            return {}
        self.done.set()
        return {TP0: [Rec(i, b"") for i in range(self.positions[TP0], self.end)]}


class Clients(KafkaClients):
    """Hands the pipeline the fake consumer and producers (no broker)."""

    def __init__(self, consumer: Fetching) -> None:
        self.fake = consumer
        self.committed: dict[TopicPartition, int] = {}
        self.opening: dict[str, asyncio.Event] = {}

    def consumer(self, **_: Any) -> Fetching:
        return self.fake

    async def read_compacted(
        self,
        settings: Settings,
        topic: str,
        partitions: list[int],
        *,
        client_id: str,
        timeout_s: float,
    ) -> dict[int, dict[str, bytes]]:
        return {}  # no broker: nothing was held before

    async def check_topics(self, settings: Settings) -> RecordLimits:
        return RecordLimits()  # no broker to ask: the default limits

    async def watch_topics(self, settings: Settings, *, interval_s: float) -> None:
        await asyncio.Event().wait()  # nothing to watch; cancelled at shutdown

    def producer(self, **options: Any) -> Producer:
        is_tp0 = str(options["transactional_id"]).endswith("-t-0")
        opens = self.fake.handed_out if is_tp0 else asyncio.Event()
        if not is_tp0:
            opens.set()
        return Producer(self.committed, opens)


async def _run(
    build: Build, stale: list[Rec]
) -> tuple[PipelineStats, Fetching, dict[TopicPartition, int]]:
    """A transactional pipeline run on the fakes until the consumer stops it; what it took,
    and the offsets its final commit delivered."""
    stop = asyncio.Event()
    consumer = Fetching(stale, end=10, stop=stop)
    clients = Clients(consumer)
    settings = Settings(topic="t", results_topic="r", commit_interval_s=3600.0)
    p = build(settings, clients=clients)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(intake, "DECODE_SLICE_S", 0.0)  # intake yields before every record
        stats = await p.run(stop)
    assert consumer.assigning is not None and consumer.assigning.done()
    return stats, consumer, clients.committed


async def test_records_fetched_before_an_opening_partitions_seek_are_not_taken_twice(
    build: Build,
) -> None:
    stats, consumer, committed = await _run(build, stale=[Rec(i, b"") for i in range(10)])
    assert consumer.seeks == [(TP1, 0), (TP0, 2)]
    # TP0's offsets 2-9, each once (the stale fetch's rest was dropped: taking it again would
    # have raised "not in order"); TP1's, fetched with it, are kept.
    assert stats.records == 8 + 3
    assert committed == {TP0: 10, TP1: 3}


async def test_records_fetched_after_a_seek_made_during_the_fetch_are_all_taken(
    build: Build,
) -> None:
    # getmany waits while the partition opens and seeks; what it returns is from the new
    # position (aiokafka drops what it fetched before the seek): none of it is stale.
    stats, consumer, committed = await _run(build, stale=[])
    assert consumer.seeks == [(TP1, 0), (TP0, 2)] and stats.records == 8
    assert committed == {TP0: 10}


class Recording:
    """An at-least-once KafkaDelivery that records what each commit delivered."""

    transactional = False

    def __init__(self) -> None:
        self.committed: list[tuple[TopicPartition, int]] = []

    def is_open(self, tp: TopicPartition) -> bool:
        return True

    def broken(self, tp: TopicPartition) -> bool:
        return False

    async def deliver(self, commits: list[Commit]) -> dict[TopicPartition, None]:
        self.committed += [(c.tp, c.offset) for c in commits]
        return {c.tp: None for c in commits}

    async def close(self, tps: object) -> None:
        return None


async def test_a_revoked_partitions_finished_answers_commit_and_count_before_it_goes(
    build: Build,
) -> None:
    clock = Clock()
    p, registry = await pipeline(build, clock)
    delivery = Recording()
    p._delivery = delivery  # type: ignore[assignment]  # no broker: what run() would set
    first, second = rooted_parts()
    take_trace(p, first, second)
    (job,) = list(p.jobs)
    await job  # scored, not yet committed
    await p.on_partitions_revoked([TP0])
    assert delivery.committed == [(TP0, 2)]  # committed at the revoke, not left to the next owner
    assert answers(registry) == 1 and p.stats.answers_committed == 1
