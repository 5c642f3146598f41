"""Every use of aiokafka's private or undocumented parts, in one place, each with its reason.

The rest of citemon talks to Kafka through aiokafka's public API (``AIOKafkaConsumer``,
``AIOKafkaProducer``, ``aiokafka.errors``, ``aiokafka.structs``). What follows has no public
equivalent in the aiokafka this is tested with (the pin in ``pyproject.toml``);
``tests/integration/test_kafka_internals.py`` checks each assumption on the installed version
(that the attributes exist, take these arguments and behave so), so an upgrade that breaks one
fails there, by name, rather than in production.

* :func:`request_rejoin` — ``consumer._coordinator.request_rejoin()``. A partition whose
  transactional producer was fenced has a new owner; the consumer must ask the group for a
  fresh assignment (the one place a new producer for it may be opened without fencing its real
  owner). aiokafka has no public "rejoin"; re-subscribing would reset every partition's state.
* :func:`producer_is_fatal` — ``producer._txn_manager.is_fatal_error()``. A transactional
  producer in the fatal state (fenced, or its sender died) can never commit again; aiokafka
  raises on the next call but does not say so beforehand, and the pipeline must tell "retry
  next tick" from "this partition is lost".
* :func:`cluster_metadata` — ``consumer._client.fetch_all_metadata()``. ``citemon inspect``
  needs a topic's partitions; the public ``consumer.topics()`` makes this very request and
  drops the partitions, and ``consumer.partitions_for_topic`` knows only subscribed topics.
  (``AIOKafkaAdminClient.describe_topics`` would open a second client with the same TLS/SASL
  options for one request.)
* :func:`new_client`, :func:`fetch_record_set`, :func:`partition_records`, :func:`first_batch`
  — ``aiokafka.client.AIOKafkaClient``, ``aiokafka.protocol.fetch.FetchRequest`` (and the
  positional fields of its response), ``aiokafka.consumer.fetcher.PartitionRecords`` and
  ``aiokafka.record.memory_records.MemoryRecords``. A record batch the consumer cannot decode
  makes ``getmany`` raise without saying which partition or offsets; re-reading the partition
  with a raw ``Fetch`` and the consumer's own unpacking, batch by batch, is the only way to
  find exactly the bad batch (:mod:`citemon._service.intake`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "add_partitions_probe",
    "cluster_metadata",
    "fetch_record_set",
    "first_batch",
    "new_client",
    "partition_records",
    "producer_is_fatal",
    "request_rejoin",
]


def request_rejoin(consumer: Any) -> bool:
    """Ask ``consumer``'s group coordinator to rejoin the group; False when it cannot."""
    coordinator = getattr(consumer, "_coordinator", None)
    rejoin = getattr(coordinator, "request_rejoin", None)
    if not callable(rejoin):
        return False
    rejoin()
    return True


def producer_is_fatal(producer: Any) -> bool:
    """Whether a transactional ``producer`` is in aiokafka's fatal state (never commits again)."""
    manager = getattr(producer, "_txn_manager", None)
    is_fatal = getattr(manager, "is_fatal_error", None)
    return bool(callable(is_fatal) and is_fatal())


async def cluster_metadata(consumer: Any) -> Any:
    """Fresh metadata of every topic (``ClusterMetadata``: ``topics()``,
    ``partitions_for_topic(name)``) through a started ``consumer``'s connection."""
    return await consumer._client.fetch_all_metadata()


async def new_client(options: dict[str, Any], client_id: str) -> Any:
    """A bootstrapped low-level client (``AIOKafkaClient``) with the consumer's connection
    options; the caller closes it (``await client.close()``)."""
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(**options, client_id=client_id)
    try:
        await client.bootstrap()
    except BaseException:
        await client.close()
        raise
    return client


async def fetch_record_set(
    client: Any, tp: Any, offset: int, *, max_bytes: int, isolation_level: int
) -> tuple[bytes, Any] | None:
    """One ``Fetch`` of ``tp`` from ``offset`` at its leader: the raw record set and the aborted
    transactions list (for ``read_committed``), or None when the response lacks ``tp``.
    Raises the ``KafkaError`` the broker answered with."""
    from aiokafka.errors import KafkaError, for_code
    from aiokafka.protocol.fetch import FetchRequest

    node = client.cluster.leader_for_partition(tp)
    if node is None or node < 0:
        client.add_topic(tp.topic)
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            raise KafkaError(f"no leader for {tp.topic}/{tp.partition}")
    request = FetchRequest(
        0, 1, max_bytes, isolation_level, [(tp.topic, [(tp.partition, offset, max_bytes)])]
    )
    response = await client.send(node, request)
    for topic, partitions in response.topics:
        for partition, error_code, _highwater, *part_data in partitions:
            if topic != tp.topic or partition != tp.partition:
                continue
            if error_code != 0:
                raise for_code(error_code)(f"fetching {topic}/{partition} at {offset}")
            if response.API_VERSION >= 11:
                aborted = part_data[2]
            elif response.API_VERSION >= 4:
                aborted = part_data[-2]
            else:
                aborted = None
            return bytes(part_data[-1] or b""), aborted
    return None


def partition_records(
    tp: Any, batches: Any, aborted: Any, offset: int, isolation_level: int
) -> Any:
    """The consumer's own unpacking of fetched ``batches`` (an object with ``has_next()`` and
    ``next_batch()``, as ``MemoryRecords``): an iterator of ``ConsumerRecord`` with the same
    CRC check and ``read_committed`` filtering of aborted transactions."""
    from aiokafka.consumer.fetcher import PartitionRecords

    return PartitionRecords(tp, batches, aborted, offset, None, None, True, isolation_level)


def first_batch(chunk: bytes) -> Any:
    """The first record batch of ``chunk`` (raw bytes of one or more batches)."""
    from aiokafka.record.memory_records import MemoryRecords

    return MemoryRecords(chunk).next_batch()


async def add_partitions_probe(
    producer: Any, transactional_id: str, topics: list[str]
) -> list[str]:
    """Add partition 0 of each of ``topics`` to a transaction of the started transactional
    ``producer`` (``AddPartitionsToTxn``, which checks WRITE on each topic), then abort it
    (``EndTxn``): nothing is written. Returns the topics the broker refused to let it write.

    Private parts: ``producer.client`` and ``producer._txn_manager``'s producer ID and epoch;
    aiokafka adds partitions only as a side effect of ``send``, which would write a record."""
    from aiokafka.client import CoordinationType
    from aiokafka.errors import TransactionalIdAuthorizationFailed, for_code
    from aiokafka.protocol.transaction import AddPartitionsToTxnRequest, EndTxnRequest

    if not topics:
        return []
    client = producer.client
    manager = producer._txn_manager
    node = await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id)
    pid, epoch = manager.producer_id, manager.producer_epoch
    response = await client.send(
        node, AddPartitionsToTxnRequest(transactional_id, pid, epoch, [(t, [0]) for t in topics])
    )
    refused: list[str] = []
    other: list[int] = []
    for topic, partitions in response.errors:
        for _partition, code in partitions:
            if code == 29:  # TOPIC_AUTHORIZATION_FAILED
                refused.append(topic)
            elif code == 53:  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                raise TransactionalIdAuthorizationFailed()
            elif code not in (0, 55):  # 55: not attempted because another partition failed
                other.append(code)
    if not refused and not other:
        await client.send(node, EndTxnRequest(transactional_id, pid, epoch, False))
    elif other:
        raise for_code(other[0])(f"adding partitions of {topics} to a probe transaction")
    return sorted(set(refused))
