"""The monitor's Kafka: the clients it makes, the topics it checks before consuming, every use
of aiokafka's private parts, and the re-read past a batch the consumer cannot decode, each in a
section of its own below (clients, topics, internals, re-reading).

Production uses :class:`KafkaClients` as it is; a test hands in a subclass (the way arq takes its
Redis pool). :func:`check_topics` asks the broker about every topic ``run`` uses before it
consumes anything. The internals are the only calls into aiokafka's private parts, each with its
reason and a test of its assumption (``tests/integration/test_kafka_internals.py``).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import cramjam
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError

from citemon._core.errors import KafkaUnavailable, TopicsUnusable
from citemon._service.settings import Settings

__all__ = [
    "CODECS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MIN_RECORD_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "UNDECODABLE",
    "BadBatch",
    "KafkaClients",
    "RecordLimits",
    "Rereader",
    "Scan",
    "TopicUse",
    "TopicWatch",
    "add_partitions_probe",
    "check_topics",
    "cluster_metadata",
    "describe",
    "fetch_record_set",
    "first_batch",
    "new_client",
    "partition_records",
    "producer_is_fatal",
    "request_rejoin",
    "scan_partition",
    "split_batches",
    "topic_uses",
    "unpack_batches",
]

log = logging.getLogger(__name__)


# -- clients ----------------------------------------------------------------------------------
# The Kafka clients of one monitor, made by one object that the builder takes.
#
# Production uses :class:`KafkaClients` as it is; a test hands in a subclass whose clients wrap
# aiokafka's (a consumer that fails on cue, say), the way arq takes its Redis pool: the runtime
# code has no test hooks of its own. The start-up check of the topics, the watch on them and the
# re-read past a batch that does not decode (:class:`Rereader`) go through it too, so a test
# without a broker replaces them.


def _reading(settings: Settings) -> dict[str, Any]:
    """How every citemon consumer reads: the connection of ``settings``, committed records only
    (an aborted transaction is never seen), from the start when nothing is committed, with the
    fetch bounds of ``settings``, offsets committed by hand or not at all."""
    return {
        **settings.kafka_options(),
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "earliest",
        "fetch_max_bytes": settings.fetch_max_bytes,
        "max_partition_fetch_bytes": settings.max_partition_fetch_bytes,
    }


class KafkaClients:
    """Makes the consumer, the producers and the low-level client the monitor uses."""

    def group_consumer(self, settings: Settings, *, group_id: str, client_id: str) -> Any:
        """A consumer of ``group_id`` as the monitor reads its input: committed by hand,
        ``read_committed``, with the fetch and session bounds of ``settings``; not started."""
        s = settings
        return self.consumer(
            **_reading(s),
            group_id=group_id,
            client_id=client_id,
            max_poll_records=s.max_poll_records,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(100, s.session_timeout_ms // 4),
        )

    def consumer(self, **options: Any) -> Any:
        """The group consumer (an ``AIOKafkaConsumer``), not started."""
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(**options)

    def producer(self, **options: Any) -> Any:
        """A producer (an ``AIOKafkaProducer``), not started: the dead-letter one, or an input
        partition's transactional one."""
        from aiokafka import AIOKafkaProducer

        return AIOKafkaProducer(**options)

    def rereader(self, settings: Settings, *, client_id: str) -> Rereader:
        """What re-reads a partition past a batch the consumer cannot decode (intake's and the
        re-key stage's), with a client of its own made on first use."""
        return Rereader(
            settings.kafka_options(), client_id, max_bytes=settings.max_partition_fetch_bytes
        )

    def reader(self, settings: Settings, *, client_id: str) -> Any:
        """A consumer of no group that reads what it is assigned as the monitor reads
        (``read_committed``, with the fetch bounds of ``settings``), never moving anyone's
        offsets: the held parts read back, ``citemon inspect`` on the results topic. Not
        started."""
        return self.consumer(**_reading(settings), client_id=client_id, group_id=None)

    async def read_compacted(
        self,
        settings: Settings,
        topic: str,
        partitions: list[int],
        *,
        client_id: str,
        timeout_s: float,
    ) -> dict[int, dict[str, bytes]]:
        """Read ``partitions`` of the compacted ``topic`` from the start to their ends
        (``read_committed``, with a consumer of no group, within ``timeout_s``): per partition,
        key → its last value; a tombstone removes its key. The held-parts store is read back so
        (:mod:`citemon._service.held`)."""
        from aiokafka.structs import TopicPartition

        if not partitions:
            return {}
        consumer = self.reader(settings, client_id=client_id)
        values: dict[int, dict[str, bytes]] = {p: {} for p in partitions}
        await consumer.start()
        try:
            async with asyncio.timeout(timeout_s):
                tps = [TopicPartition(topic, p) for p in partitions]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                ends = await consumer.end_offsets(tps)
                left = {tp for tp in tps if ends[tp] > 0}
                while left:
                    batches = await consumer.getmany(*left, timeout_ms=200, max_records=10_000)
                    for tp, records in batches.items():
                        state = values[tp.partition]
                        for rec in records:
                            key = (rec.key or b"").decode("ascii", "replace")
                            if rec.value is None:
                                state.pop(key, None)
                            else:
                                state[key] = rec.value
                    for tp in list(left):
                        if await consumer.position(tp) >= ends[tp]:
                            left.discard(tp)
        finally:
            await consumer.stop()
        return values

    async def check_topics(self, settings: Settings) -> RecordLimits:
        """Every topic ``run`` uses exists and may be used (or is created), before consuming;
        their record limits (:func:`citemon._service.kafka.check_topics`)."""
        return await check_topics(settings)

    async def watch_topics(self, settings: Settings, *, interval_s: float) -> None:
        """Until cancelled, or until a topic ``run`` uses is gone
        (:class:`citemon._service.kafka.TopicWatch`)."""
        await TopicWatch(settings, interval_s=interval_s).run()


# -- topics -----------------------------------------------------------------------------------
# The topics ``citemon run`` reads and writes, checked before it consumes anything.
#
# A broker that does not create topics on first use (``auto.create.topics.enable=false``, most
# production clusters) or an ACL that refuses one use would otherwise show up as a client error
# logged several times a second and a partition that never moves. :func:`check_topics` asks the
# broker, with the admin client, before the consumer starts:
#
# * that every topic exists (input, dead letters, results, review, the re-key topic) — or, with
#   ``--create-topics``, creates the missing ones (``--topic-partitions``,
#   ``--topic-replication-factor``; ``-1`` takes the broker's defaults);
# * that the held-parts store (``--held-topic``, :mod:`citemon._service.held`) is compacted and has
#   at least the input's partitions — it is citemon's own state, as Kafka Streams' changelogs are
#   its own, so it is created when missing (compacted, with the input's partition count) unless
#   the ACL CREATE is refused;
# * that this user may describe each topic and the consumer group;
# * with transactions (a results topic or a review sample), that the transactional-ID prefix may
#   be used and each output topic written in a transaction: a probe transactional ID of the
#   prefix (``<prefix>-startup-check``, never a partition's own, which would fence its owner) is
#   initialised and its partitions added to a transaction that is then aborted — nothing is
#   written;
# * each topic's ``max.message.bytes`` (:class:`~citemon._service.kafka.RecordLimits`: what
#   every produced record is cut to fit).
#
# Every problem found is named in one :class:`TopicsUnusable` (exit status 1), each with the
# setting or ACL that fixes it. :class:`TopicWatch` repeats the existence check while running:
# a topic deleted under a running monitor turns ``/healthz`` red and stops it with the same
# message, instead of a loop of client errors.

_UNKNOWN_TOPIC: Final = 3
_TOPIC_AUTHORIZATION_FAILED: Final = 29
_CLUSTER_AUTHORIZATION_FAILED: Final = 31
_TOPIC_ALREADY_EXISTS: Final = 36
_READY_TIMEOUT_S: Final = 30.0
_REQUEST_TIMEOUT_MS: Final = 15_000


@dataclass(frozen=True, slots=True)
class TopicUse:
    """One topic ``run`` uses: its name, what for, the flag that names it, and whether it is
    read (consumed by the group) and written (produced, in transactions when ``transactional``)."""

    name: str
    role: str
    flag: str
    read: bool = False
    write: bool = False


def topic_uses(settings: Settings) -> list[TopicUse]:
    """The topics ``settings`` make ``run`` read or write, input first."""
    s = settings
    uses = [TopicUse(s.topic, "input", "--topic", read=True)]
    if s.rekey_topic is not None:
        uses.append(TopicUse(s.rekey_topic, "re-keyed input", "--rekey-topic", True, True))
    uses.append(TopicUse(s.dlq_topic, "dead letters", "--dlq-topic", write=True))
    if s.results_topic is not None:
        uses.append(TopicUse(s.results_topic, "results", "--results-topic", write=True))
    if s.review_rate > 0:
        uses.append(TopicUse(s.review_topic, "review sample", "--review-topic", write=True))
    uses.append(TopicUse(s.held_topic_name, "held trace parts", "--held-topic", True, True))
    seen: set[str] = set()
    return [u for u in uses if not (u.name in seen or seen.add(u.name))]  # type: ignore[func-returns-value]


def _who(settings: Settings) -> str:
    name = settings.kafka_username
    return f"User:{name}" if name else "this client's principal"


async def _admin(settings: Settings) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError

    admin = AIOKafkaAdminClient(
        **settings.kafka_options(),
        client_id=f"{settings.client_id}-topics",
        request_timeout_ms=_REQUEST_TIMEOUT_MS,
    )
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        await admin.close()
        raise KafkaUnavailable.connecting(settings.bootstrap_servers, exc) from exc
    except BaseException:
        await admin.close()
        raise
    return admin


async def check_topics(settings: Settings) -> RecordLimits:
    """Check (or, with ``settings.create_topics``, create) every topic ``run`` uses; return
    their record limits. Raises :class:`TopicsUnusable` naming every problem and its fix."""
    uses = topic_uses(settings)
    admin = await _admin(settings)
    try:
        problems: list[str] = []
        # Before any describe: on a broker that creates topics on first use, describing the
        # held topic would create it uncompacted (listing all topics creates none).
        if settings.held_topic_name not in await admin.list_topics():
            problems += await _create_held(admin, settings)
        found = await _describe(admin, [u.name for u in uses])
        missing = [u for u in uses if found.get(u.name) == _UNKNOWN_TOPIC]
        if missing and settings.create_topics:
            problems += await _create(admin, settings, missing)
            found = await _describe(admin, [u.name for u in uses])
            missing = [u for u in uses if found.get(u.name) == _UNKNOWN_TOPIC]
        auto = bool(missing) and await _auto_creates(admin)
        for u in uses:
            code = found.get(u.name, _UNKNOWN_TOPIC)
            if code == _UNKNOWN_TOPIC and auto:
                log.info(
                    "topic %s (%s) does not exist yet: the broker creates it on first use "
                    "(auto.create.topics.enable=true)",
                    u.name,
                    u.role,
                )
            elif code == _UNKNOWN_TOPIC:
                problems.append(
                    f"topic {u.name!r} ({u.role}, {u.flag}) does not exist and this broker does "
                    "not create it on first use: create it (kafka-topics.sh --create --topic "
                    f"{u.name} ...) or run with --create-topics"
                )
            elif code == _TOPIC_AUTHORIZATION_FAILED:
                problems.append(
                    f"topic {u.name!r} ({u.role}, {u.flag}): not authorized to describe it; "
                    f"grant {_who(settings)} the ACL DESCRIBE"
                    f"{', READ' if u.read else ''}{', WRITE' if u.write else ''} on Topic:{u.name}"
                )
            elif code:
                problems.append(f"topic {u.name!r} ({u.role}, {u.flag}): broker error {code}")
        problems += await _check_group(admin, settings)
        if found.get(settings.held_topic_name) == 0:
            problems += await _check_held(admin, settings)
        usable = [u for u in uses if found.get(u.name) == 0]
        limits = await _limits(admin, usable)
    finally:
        await admin.close()
    for u in usable:
        if u.write and limits.max_bytes(u.name) < MIN_RECORD_BYTES:
            problems.append(
                f"topic {u.name!r} ({u.role}) accepts records of at most "
                f"{limits.max_bytes(u.name)} bytes, too small for citemon's records: raise its "
                f"max.message.bytes to at least {MIN_RECORD_BYTES}"
            )
    if settings.rekey_topic is not None and settings.rekey_topic in {u.name for u in usable}:
        inbound, outbound = limits.max_bytes(settings.topic), limits.max_bytes(settings.rekey_topic)
        if outbound < inbound:
            problems.append(
                f"topic {settings.rekey_topic!r} (--rekey-topic) accepts records of at most "
                f"{outbound} bytes, less than the input topic {settings.topic!r} ({inbound}): a "
                "re-keyed trace could not be written; give it max.message.bytes >= the input's"
            )
    if (settings.transactional or settings.rekey_topic is not None) and not problems:
        problems += await _check_transactions(settings, usable)
    if problems:
        raise TopicsUnusable(problems, settings.bootstrap_servers)
    log.info(
        "topics checked: %s",
        ", ".join(f"{u.name} ({u.role}, max {limits.max_bytes(u.name)} B)" for u in uses),
    )
    return limits


async def _broker_default(admin: Any, config: str, fallback: int) -> int:
    """A broker's integer setting (``num.partitions``...); ``fallback`` when it may not be read."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    try:
        cluster = await admin.describe_cluster()
        node = str(cluster["brokers"][0]["node_id"])
        resource = ConfigResource(ConfigResourceType.BROKER, node, configs={config: None})
        for response in await admin.describe_configs([resource]):
            for res in response.to_object()["resources"]:
                for entry in res["config_entries"] if not res["error_code"] else ():
                    if entry["config_names"] == config:
                        return int(entry["config_value"])
    except Exception as exc:  # any failure: the fallback
        log.debug("reading the broker's %s failed: %r", config, exc)
    return fallback


async def _auto_creates(admin: Any) -> bool:
    """Whether the broker creates a topic on first use (``auto.create.topics.enable``); False
    when it may not be read (the ACL DESCRIBE_CONFIGS on the cluster), the safe answer."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    try:
        cluster = await admin.describe_cluster()
        node = str(cluster["brokers"][0]["node_id"])
        resource = ConfigResource(
            ConfigResourceType.BROKER, node, configs={"auto.create.topics.enable": None}
        )
        for response in await admin.describe_configs([resource]):
            for res in response.to_object()["resources"]:
                for entry in res["config_entries"] if not res["error_code"] else ():
                    if entry["config_names"] == "auto.create.topics.enable":
                        return str(entry["config_value"]).lower() == "true"
    except Exception as exc:  # any failure: assume it does not
        log.debug("reading auto.create.topics.enable failed: %r", exc)
    return False


async def _describe(admin: Any, names: list[str]) -> dict[str, int]:
    """Topic → error code of its metadata (0: exists and may be described)."""
    topics = await admin.describe_topics(names)
    return {t["topic"]: int(t["error_code"]) for t in topics}


async def _create(admin: Any, settings: Settings, missing: list[TopicUse]) -> list[str]:
    from aiokafka.admin import NewTopic

    new = [
        NewTopic(
            u.name,
            num_partitions=settings.topic_partitions,
            replication_factor=settings.topic_replication_factor,
        )
        for u in missing
    ]
    response = await admin.create_topics(new, timeout_ms=_REQUEST_TIMEOUT_MS)
    problems: list[str] = []
    created: list[str] = []
    for name, code, *message in response.topic_errors:
        if code in (0, _TOPIC_ALREADY_EXISTS):  # another replica created it first: fine
            created.append(name)
        elif code in (_TOPIC_AUTHORIZATION_FAILED, _CLUSTER_AUTHORIZATION_FAILED):
            problems.append(
                f"--create-topics: not authorized to create topic {name!r}; grant "
                f"{_who(settings)} the ACL CREATE on Topic:{name} (or on the Cluster), or "
                "create it yourself"
            )
        else:
            detail = (message[0] if message else "") or f"error {code}"
            problems.append(f"--create-topics: creating topic {name!r} failed: {detail}")
    for name in created:
        log.warning(
            "created topic %s (%d partitions, replication factor %d; -1: the broker's default)",
            name,
            settings.topic_partitions,
            settings.topic_replication_factor,
        )
    await _wait_for_leaders(admin, created)
    return problems


async def _partition_counts(admin: Any, names: list[str]) -> dict[str, int]:
    """Topic → its partition count, for the topics that exist."""
    topics = await admin.describe_topics(names)
    return {t["topic"]: len(t["partitions"]) for t in topics if t["error_code"] == 0}


def _input(settings: Settings) -> str:
    return settings.rekey_topic or settings.topic


async def _create_held(admin: Any, settings: Settings) -> list[str]:
    """Create the held-parts store: compacted, with the input's partition count (input
    partition P keeps its held parts in partition P)."""
    from aiokafka.admin import NewTopic

    name = settings.held_topic_name
    partitions = (await _partition_counts(admin, [_input(settings)])).get(
        _input(settings), settings.topic_partitions
    )
    # aiokafka's NewTopic takes no "broker default" (-1) for one of the two alone: ask.
    if partitions < 1:
        partitions = await _broker_default(admin, "num.partitions", 1)
    replication = settings.topic_replication_factor
    if replication < 1:
        replication = await _broker_default(admin, "default.replication.factor", 1)
    new = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication,
        topic_configs={"cleanup.policy": "compact"},
    )
    response = await admin.create_topics([new], timeout_ms=_REQUEST_TIMEOUT_MS)
    for _, code, *message in response.topic_errors:
        if code in (_TOPIC_AUTHORIZATION_FAILED, _CLUSTER_AUTHORIZATION_FAILED):
            return [
                f"topic {name!r} (held trace parts, --held-topic) does not exist and may not be "
                f"created: grant {_who(settings)} the ACL CREATE on Topic:{name}, or create it "
                f"(kafka-topics.sh --create --topic {name} --partitions <the input's> --config "
                "cleanup.policy=compact)"
            ]
        if code not in (0, _TOPIC_ALREADY_EXISTS):  # another replica created it first: fine
            detail = (message[0] if message else "") or f"error {code}"
            return [f"creating topic {name!r} (held trace parts) failed: {detail}"]
    log.info("created topic %s (held trace parts, compacted, %d partitions)", name, partitions)
    await _wait_for_leaders(admin, [name])
    return []


async def _check_held(admin: Any, settings: Settings) -> list[str]:
    """The held-parts store is compacted (else its tombstones would not delete anything and
    retention could delete parts still waiting) and has a partition per input partition."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    name, source = settings.held_topic_name, _input(settings)
    problems: list[str] = []
    counts = await _partition_counts(admin, [name, source])
    if source in counts and counts.get(name, 0) < counts[source]:
        problems.append(
            f"topic {name!r} (held trace parts, --held-topic) has {counts.get(name, 0)} "
            f"partitions, fewer than the input {source!r} ({counts[source]}): add partitions "
            f"(kafka-topics.sh --alter --topic {name} --partitions {counts[source]})"
        )
    resource = ConfigResource(ConfigResourceType.TOPIC, name, configs={"cleanup.policy": None})
    policy: str | None = None
    for response in await admin.describe_configs([resource]):
        for res in response.to_object()["resources"]:
            for entry in res["config_entries"] if not res["error_code"] else ():
                if entry["config_names"] == "cleanup.policy":
                    policy = str(entry["config_value"])
    if policy is None:
        log.warning("cannot read cleanup.policy of topic %s: assuming it is compacted", name)
    elif "compact" not in policy.split(","):
        problems.append(
            f"topic {name!r} (held trace parts, --held-topic) has cleanup.policy={policy}: it "
            "must be compacted (kafka-configs.sh --alter --entity-type topics --entity-name "
            f"{name} --add-config cleanup.policy=compact)"
        )
    return problems


async def _wait_for_leaders(admin: Any, names: list[str]) -> None:
    """Until every partition of ``names`` has a leader (producers need one), or a deadline."""
    if not names:
        return
    with_deadline = asyncio.timeout(_READY_TIMEOUT_S)
    try:
        async with with_deadline:
            while True:
                topics = await admin.describe_topics(names)
                if all(
                    t["error_code"] == 0
                    and t["partitions"]
                    and all(p["leader"] >= 0 for p in t["partitions"])
                    for t in topics
                ):
                    return
                await asyncio.sleep(0.2)
    except TimeoutError:
        log.warning("created topics %s have no leader yet after %.0f s", names, _READY_TIMEOUT_S)


async def _check_group(admin: Any, settings: Settings) -> list[str]:
    from aiokafka.errors import GroupAuthorizationFailedError, KafkaError

    try:
        await admin.find_coordinator(settings.group)
    except GroupAuthorizationFailedError:
        return [
            f"consumer group {settings.group!r} (--group): not authorized; grant "
            f"{_who(settings)} the ACL READ on Group:{settings.group}"
        ]
    except KafkaError as exc:  # no coordinator yet (a new cluster): the consumer waits for it
        log.debug("finding the group coordinator at start-up: %r", exc)
    return []


async def _limits(admin: Any, uses: Iterable[TopicUse]) -> RecordLimits:
    """Each topic's ``max.message.bytes``; the broker's default where it may not be read."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    names = [u.name for u in uses]
    by_topic: dict[str, int] = {}
    if not names:
        return RecordLimits()
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, n, configs={"max.message.bytes": None})
        for n in names
    ]
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            name = resource["resource_name"]
            if resource["error_code"]:
                log.warning(
                    "cannot read max.message.bytes of topic %s (error %d; the ACL "
                    "DESCRIBE_CONFIGS on it allows it): assuming Kafka's default",
                    name,
                    resource["error_code"],
                )
                continue
            for entry in resource["config_entries"]:
                if entry["config_names"] == "max.message.bytes" and entry["config_value"]:
                    by_topic[name] = int(entry["config_value"])
    return RecordLimits(by_topic)


async def _check_transactions(settings: Settings, uses: list[TopicUse]) -> list[str]:
    """Initialise a probe transactional ID of the prefix and add a partition of each output
    topic to a transaction, then abort it: what the results producers will need."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError, TransactionalIdAuthorizationFailed

    probe_id = f"{settings.transactional_id_prefix}-startup-check"
    producer = AIOKafkaProducer(
        **settings.kafka_options(),
        client_id=f"{settings.client_id}-topics",
        transactional_id=probe_id,
        enable_idempotence=True,
        acks="all",
    )
    prefix = settings.transactional_id_prefix
    refused_id = (
        f"transactional IDs {prefix}-*: not authorized; grant {_who(settings)} the ACL WRITE "
        f"(and DESCRIBE) on TransactionalId:{prefix} with --resource-pattern-type prefixed "
        "(the results producers' IDs are derived from --group)"
    )
    try:
        async with asyncio.timeout(_REQUEST_TIMEOUT_MS / 1000):
            await producer.start()
    except TransactionalIdAuthorizationFailed:
        await _stop(producer)
        return [refused_id]
    except (KafkaError, TimeoutError) as exc:
        await _stop(producer)
        return [f"transactional ID {probe_id!r} could not be initialised: {exc!r}"]
    try:
        refused = await add_partitions_probe(producer, probe_id, [u.name for u in uses if u.write])
    except TransactionalIdAuthorizationFailed:
        return [refused_id]
    finally:
        await _stop(producer)
    by_name = {u.name: u for u in uses}
    return [
        f"topic {name!r} ({by_name[name].role}, {by_name[name].flag}): not authorized to "
        f"write it; grant {_who(settings)} the ACL WRITE on Topic:{name}"
        for name in refused
    ]


async def _stop(producer: Any) -> None:
    try:
        async with asyncio.timeout(5):
            await producer.stop()
    except Exception as exc:  # closing a probe that failed to start may complain
        log.debug("stopping the topic-check producer: %r", exc)


class TopicWatch:
    """Checks every ``interval_s`` that the topics ``run`` uses still exist; a topic deleted
    (or its describe ACL withdrawn) ends :meth:`run` with :class:`TopicsUnusable`, which the
    pipeline's supervisor turns into a red ``/healthz`` and exit status 1."""

    def __init__(self, settings: Settings, *, interval_s: float) -> None:
        self._settings = settings
        self._interval_s = interval_s

    async def run(self) -> None:
        from aiokafka.errors import KafkaError

        s = self._settings
        uses = topic_uses(s)
        admin = await _admin(s)
        try:
            while True:
                await asyncio.sleep(self._interval_s)
                try:
                    found = await _describe(admin, [u.name for u in uses])
                except (KafkaError, OSError, TimeoutError) as exc:
                    log.info("topic check failed: %s", type(exc).__name__)  # broker away: lag says
                    continue
                gone = [u for u in uses if found.get(u.name, _UNKNOWN_TOPIC) != 0]
                if gone:
                    raise TopicsUnusable(
                        [
                            f"topic {u.name!r} ({u.role}, {u.flag}) is gone while running "
                            f"(deleted, or its ACL withdrawn: error {found.get(u.name)}): "
                            "recreate it, or restore the ACL, and restart"
                            for u in gone
                        ],
                        s.bootstrap_servers,
                    )
        finally:
            await admin.close()


# -- record limits: the bytes a record may take on each topic (read by check_topics) ---------

DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_588
"""Kafka's default ``message.max.bytes`` (a topic's ``max.message.bytes`` defaults to it)."""
DEFAULT_MAX_REQUEST_SIZE: Final = 1_048_576
"""aiokafka's default ``max_request_size``: the producer refuses a larger record itself."""
RECORD_OVERHEAD_BYTES: Final = 512
"""Kept free of every limit for the record batch's framing (61 bytes of batch header, the
record's varints and attributes) with room to spare."""
MIN_RECORD_BYTES: Final = 4096
"""A topic whose limit leaves less than this is refused at start-up: not even an answer's
identity and its counts would fit."""


class RecordLimits:
    """The bytes a produced record's value may take on each topic: the smaller of the topic's
    ``max.message.bytes`` and the producer's ``max_request_size``, less the key, the headers
    and :data:`RECORD_OVERHEAD_BYTES`. Topics not named get ``default``."""

    def __init__(
        self,
        by_topic: Mapping[str, int] | None = None,
        *,
        default: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
    ) -> None:
        self._by_topic = dict(by_topic or {})
        self._default = default
        self.max_request_size = max_request_size

    def __repr__(self) -> str:
        return f"RecordLimits({self._by_topic!r}, max_request_size={self.max_request_size})"

    def max_bytes(self, topic: str) -> int:
        """The record size (key, value and headers) ``topic`` and the producer accept."""
        return min(self._by_topic.get(topic, self._default), self.max_request_size)

    def value_budget(
        self, topic: str, key: bytes | None, headers: tuple[tuple[str, bytes], ...] = ()
    ) -> int:
        """The bytes left for a record's value on ``topic``."""
        framing = sum(len(k.encode()) + len(v) + 8 for k, v in headers)
        return self.max_bytes(topic) - RECORD_OVERHEAD_BYTES - len(key or b"") - framing


# -- aiokafka's private parts -----------------------------------------------------------------
# Every use of aiokafka's private or undocumented parts, in one place, each with its reason.
#
# The rest of citemon talks to Kafka through aiokafka's public API (``AIOKafkaConsumer``,
# ``AIOKafkaProducer``, ``aiokafka.errors``, ``aiokafka.structs``). What follows has no public
# equivalent in the aiokafka this is tested with (the pin in ``pyproject.toml``);
# ``tests/integration/test_kafka_internals.py`` checks each assumption on the installed version
# (that the attributes exist, take these arguments and behave so), so an upgrade that breaks one
# fails there, by name, rather than in production.
#
# * :func:`request_rejoin` — ``consumer._coordinator.request_rejoin()``. A partition whose
#   transactional producer was fenced has a new owner; the consumer must ask the group for a
#   fresh assignment (the one place a new producer for it may be opened without fencing its real
#   owner). aiokafka has no public "rejoin"; re-subscribing would reset every partition's state.
# * :func:`producer_is_fatal` — ``producer._txn_manager.is_fatal_error()``. A transactional
#   producer in the fatal state (fenced, or its sender died) can never commit again; aiokafka
#   raises on the next call but does not say so beforehand, and the pipeline must tell "retry
#   next tick" from "this partition is lost".
# * :func:`cluster_metadata` — ``consumer._client.fetch_all_metadata()``. ``citemon inspect``
#   needs a topic's partitions; the public ``consumer.topics()`` makes this very request and
#   drops the partitions, and ``consumer.partitions_for_topic`` knows only subscribed topics.
#   (``AIOKafkaAdminClient.describe_topics`` would open a second client with the same TLS/SASL
#   options for one request.)
# * :func:`new_client`, :func:`fetch_record_set`, :func:`partition_records`, :func:`first_batch`
#   — ``aiokafka.client.AIOKafkaClient``, ``aiokafka.protocol.fetch.FetchRequest`` (and the
#   positional fields of its response), ``aiokafka.consumer.fetcher.PartitionRecords`` and
#   ``aiokafka.record.memory_records.MemoryRecords``. A record batch the consumer cannot decode
#   makes ``getmany`` raise without saying which partition or offsets; re-reading the partition
#   with a raw ``Fetch`` and the consumer's own unpacking, batch by batch, is the only way to
#   find exactly the bad batch (:class:`Rereader`, below).


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


# -- re-reading past a batch the consumer cannot decode ---------------------------------------
# aiokafka decompresses a fetched batch while ``getmany`` hands its records out; a batch it cannot
# decode raises out of ``getmany`` (:data:`UNDECODABLE`) without saying which partition failed.
# Intake and the re-key stage find it by re-reading each partition they own with a
# :class:`Rereader` (a low-level client of its own, made by :meth:`KafkaClients.rereader`): a raw
# ``Fetch`` unpacked batch by batch by the consumer's own ``PartitionRecords`` (same CRC check,
# same ``read_committed`` filtering of aborted transactions), stopping at the first batch that
# does not decode (:class:`Scan`, :class:`BadBatch`).


CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
"""Kafka's codec IDs 0–4 (the low three bits of a v2 batch's attributes)."""

UNDECODABLE: Final[tuple[type[BaseException], ...]] = (
    UnsupportedCodecError,
    CorruptRecordException,
    cramjam.DecompressionError,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
)
"""What aiokafka's ``getmany`` raises for a batch it cannot decode."""

_BATCH_HEADER: Final = struct.Struct(">qiibIhi")  # base offset … last offset delta (27 bytes)
_LOG_OVERHEAD: Final = 12  # base offset (8) + length (4): not counted in the length
_READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class BadBatch:
    """One record batch that does not decode: offsets ``[base_offset, next_offset)``."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    codec: str
    reason: str
    """``unsupported_codec`` (no library for it, or an unknown codec ID) or ``corrupt_batch``."""
    error: str
    raw: bytes
    timestamp_ms: int = -1

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def __str__(self) -> str:
        return (
            f"{self.topic}/{self.partition} offsets {self.base_offset}-{self.last_offset} "
            f"({self.codec}, {self.error})"
        )


@dataclass(slots=True)
class Scan:
    """What re-reading a partition found: records that decode, then the first batch that does
    not (``bad`` is None when every batch of the response decoded)."""

    good: list[Any] = field(default_factory=list)
    bad: BadBatch | None = None


class _Batches:
    """``MemoryRecords``' two methods ``PartitionRecords`` uses, one batch at a time, remembering
    which batch is being unpacked."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.index = -1

    def has_next(self) -> bool:
        return self.index + 1 < len(self.chunks)

    def next_batch(self) -> Any:
        self.index += 1
        return first_batch(self.chunks[self.index])


def split_batches(raw: bytes) -> list[bytes]:
    """The complete batches of a fetch response's record set (a partial last one is dropped,
    as the broker may cut the response inside a batch)."""
    chunks: list[bytes] = []
    pos = 0
    while pos + _LOG_OVERHEAD <= len(raw):
        _, length = struct.unpack_from(">qi", raw, pos)
        end = pos + _LOG_OVERHEAD + length
        if length <= 0 or end > len(raw):
            break
        chunks.append(raw[pos:end])
        pos = end
    return chunks


def describe(topic: str, partition: int, chunk: bytes, exc: BaseException) -> BadBatch:
    """A :class:`BadBatch` from a batch's header (never compressed, so always readable)."""
    reason = "unsupported_codec" if isinstance(exc, UnsupportedCodecError) else "corrupt_batch"
    error = str(exc)
    if not error.startswith(type(exc).__name__):  # aiokafka's errors name themselves
        error = f"{type(exc).__name__}: {error}"
    if len(chunk) < _BATCH_HEADER.size:
        base = struct.unpack_from(">q", chunk)[0]
        return BadBatch(topic, partition, base, base + 1, "unknown", reason, error, chunk)
    base, _, _, magic, _, attributes, last_delta = _BATCH_HEADER.unpack_from(chunk)
    if magic != 2:  # v0/v1 message sets (gone from Kafka 4): one offset per wrapper
        return BadBatch(topic, partition, base, base + 1, "unknown", reason, error, chunk)
    codec_id = attributes & 0x07
    codec = CODECS[codec_id] if codec_id < len(CODECS) else f"unknown({codec_id})"
    (first_ts,) = struct.unpack_from(">q", chunk, _BATCH_HEADER.size)
    return BadBatch(
        topic, partition, base, base + last_delta + 1, codec, reason, error, chunk, first_ts
    )


async def scan_partition(
    client: Any,
    tp: Any,
    offset: int,
    *,
    max_bytes: int,
    isolation_level: int = _READ_COMMITTED,
) -> Scan:
    """Fetch ``tp`` from ``offset`` with ``client`` (an ``AIOKafkaClient``) and unpack it batch by
    batch as the consumer does. Raises ``KafkaError`` when the broker refuses the fetch."""
    fetched = await fetch_record_set(
        client, tp, offset, max_bytes=max_bytes, isolation_level=isolation_level
    )
    if fetched is None:
        return Scan()
    raw, aborted = fetched
    return unpack_batches(tp, raw, aborted, offset, isolation_level)


def unpack_batches(
    tp: Any, raw: bytes, aborted: Any, offset: int, isolation_level: int = _READ_COMMITTED
) -> Scan:
    """Unpack a fetch response's record set from ``offset`` exactly as the consumer does, batch
    by batch, stopping at the first batch that does not decode."""
    batches = _Batches(split_batches(bytes(raw)))
    records = partition_records(tp, batches, aborted, offset, isolation_level)
    scan = Scan()
    try:
        for record in records:
            scan.good.append(record)
    except UNDECODABLE as exc:
        scan.bad = describe(tp.topic, tp.partition, batches.chunks[batches.index], exc)
    return scan


class Rereader:
    """Re-reads one partition from an offset (:func:`scan_partition`) with a low-level client of
    its own, made on the first re-read (a monitor that never meets a bad batch opens none) and
    closed by :meth:`close`. Made by :meth:`KafkaClients.rereader`; a test hands in clients whose
    rereader answers with scans of its own, as an httpx ``Client`` takes a transport."""

    def __init__(self, options: dict[str, Any], client_id: str, *, max_bytes: int) -> None:
        self._options = options
        self._client_id = client_id
        self._max_bytes = max_bytes
        self._client: Any = None

    def __repr__(self) -> str:
        return f"Rereader(client_id={self._client_id!r}, max_bytes={self._max_bytes})"

    async def scan(self, tp: Any, offset: int) -> Scan:
        """``tp`` read from ``offset``: the records that decode, then the first batch that does
        not. Raises ``KafkaError`` (or ``OSError``, ``TimeoutError``) when the broker cannot be
        asked or refuses the fetch."""
        if self._client is None:
            self._client = await new_client(self._options, self._client_id)
        return await scan_partition(self._client, tp, offset, max_bytes=self._max_bytes)

    async def close(self) -> None:
        """Close the client, if one was made."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
