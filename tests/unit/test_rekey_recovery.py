"""The re-key stage getting past a batch it cannot decode, without a broker: what it forwards,
dead-letters, commits and seeks on each path (a bad batch found, none found, the partition
re-assigned during the re-read, a commit that fails, a letter too large for the DLQ)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from citemon._metrics import Metrics
from citemon._service import rekey
from citemon._service.kafka import BadBatch, RecordLimits, Scan
from citemon._service.outputs import Commit
from citemon._service.rekey import RekeyStage
from citemon._service.settings import Settings
from tests.kafka_faults import RereadClients, Rereads

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)


@dataclass
class Rec:
    offset: int
    value: bytes = b"not a trace request"  # forwarded as it is
    key: bytes | None = b"k"
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class Consumer:
    seeks: list[tuple[TopicPartition, int]] = field(default_factory=list)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


@dataclass
class Delivery:
    fail: bool = False
    delivered: list[Commit] = field(default_factory=list)

    async def deliver(self, commits: list[Commit]) -> dict[Any, Any]:
        if self.fail:
            return {c.tp: RuntimeError("commit failed") for c in commits}
        self.delivered += commits
        return {c.tp: None for c in commits}

    def broken(self, tp: TopicPartition) -> bool:
        return False


def bad(tp: TopicPartition, base: int, n: int, raw: bytes = b"raw batch") -> BadBatch:
    return BadBatch(tp.topic, tp.partition, base, base + n, "lz4", "unsupported_codec", "E", raw)


def stage(
    scans: dict[TopicPartition, Scan], *, limits: RecordLimits | None = None
) -> tuple[RekeyStage, Consumer, Delivery, CollectorRegistry, Rereads]:
    """A stage owning TP0 (committed at 5) and TP1 (at 7), re-reading with ``scans``."""
    registry = CollectorRegistry()
    rereads = Rereads(scans)
    settings = Settings(topic="in", rekey_topic="keyed", dlq_topic="in.dlq")
    s = RekeyStage(
        settings, RereadClients(rereads), metrics=Metrics(registry), limits=limits or RecordLimits()
    )
    consumer, delivery = Consumer(), Delivery()
    s._consumer, s._delivery = consumer, delivery  # type: ignore[assignment]
    for tp, committed in ((TP0, 5), (TP1, 7)):
        s._open.add(tp)
        s._epochs[tp] = 1
        s._committed[tp] = committed
    return s, consumer, delivery, registry, rereads


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rekey, "_RETRY_S", 0.0)


async def test_the_records_before_a_bad_batch_go_with_its_letter_in_one_commit_past_it() -> None:
    s, consumer, delivery, registry, rereads = stage({TP0: Scan([Rec(5), Rec(6)], bad(TP0, 7, 3))})
    await s._recover(RuntimeError("undecodable"))
    assert rereads.read == [(TP0, 5), (TP1, 7)]  # each from its commit
    (commit,) = delivery.delivered
    assert (commit.tp, commit.offset) == (TP0, 10)
    messages = commit.messages
    assert [m.topic for m in messages] == ["keyed", "keyed", "in.dlq"]
    assert messages[-1].value == b"raw batch"
    assert dict(messages[-1].headers)["citemon.batch.offsets"] == b"7-9"
    # Both partitions back at their commits (the failed fetch dropped what it drained), then
    # TP0 past the batch.
    assert consumer.seeks == [(TP0, 5), (TP0, 10), (TP1, 7)]
    assert s._committed == {TP0: 10, TP1: 7}
    assert (s.records, s.produced, s.undecodable_batches) == (2, 2, 1)
    assert value(registry, "citemon_dead_letters_total", reason="unsupported_codec") == 1


async def test_no_bad_batch_found_rewinds_and_forwards_nothing() -> None:
    s, consumer, delivery, registry, rereads = stage({})
    await s._recover(RuntimeError("undecodable"))
    assert rereads.read == [(TP0, 5), (TP1, 7)]
    assert delivery.delivered == [] and consumer.seeks == [(TP0, 5), (TP1, 7)]
    assert s.undecodable_batches == 0
    assert value(registry, "citemon_dead_letters_total", reason="unsupported_codec") == 0


async def test_a_partition_assigned_afresh_during_the_re_read_is_left_to_its_new_seek() -> None:
    s, consumer, delivery, _, rereads = stage({TP0: Scan([Rec(5)], bad(TP0, 6, 1))})

    def reassign() -> None:  # revoked and assigned again while the fetch was out
        s._epochs[TP0] += 1

    rereads.meanwhile = reassign
    await s._recover(RuntimeError("undecodable"))
    assert delivery.delivered == [] and (TP0, 7) not in consumer.seeks
    assert s._committed[TP0] == 5 and s.undecodable_batches == 0


async def test_a_failed_commit_counts_nothing_and_reads_again_from_the_commit() -> None:
    s, consumer, delivery, registry, _ = stage({TP1: Scan([], bad(TP1, 7, 2))})
    delivery.fail = True
    await s._recover(RuntimeError("undecodable"))
    assert consumer.seeks == [(TP0, 5), (TP1, 7), (TP1, 7)]  # rewound, then back to the commit
    assert s._committed == {TP0: 5, TP1: 7} and s.undecodable_batches == 0
    assert value(registry, "citemon_dead_letters_total", reason="unsupported_codec") == 0


async def test_a_letter_too_large_for_the_dlq_goes_without_its_value_and_is_counted_cut() -> None:
    limits = RecordLimits({"in.dlq": 8192})
    s, _, delivery, registry, _ = stage(
        {TP0: Scan([], bad(TP0, 5, 1, raw=b"x" * 9000))}, limits=limits
    )
    await s._recover(RuntimeError("undecodable"))
    ((letter,),) = [c.messages for c in delivery.delivered]
    assert letter.value == b"" and dict(letter.headers)["citemon.cut.omitted_bytes"] == b"9000"
    assert value(registry, "citemon_records_cut_total", record="dead_letter", reason="value") == 1
