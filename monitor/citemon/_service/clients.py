"""The Kafka clients of one monitor, made by one object that the builder takes.

Production uses :class:`KafkaClients` as it is; a test hands in a subclass whose clients wrap
aiokafka's (a consumer that fails on cue, say), the way arq takes its Redis pool: the runtime
code has no test hooks of its own. The start-up check of the topics and the watch on them
(:mod:`citemon._service.topics`) go through it too, so a test without a broker replaces them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from citemon._service.kafka_internals import new_client

if TYPE_CHECKING:
    from citemon._service.fitting import RecordLimits
    from citemon._service.held import HeldTrace
    from citemon._service.settings import Settings

__all__ = ["KafkaClients"]


class KafkaClients:
    """Makes the consumer, the producers and the low-level client the monitor uses."""

    def group_consumer(self, settings: Settings, *, group_id: str, client_id: str) -> Any:
        """A consumer of ``group_id`` as the monitor reads its input: committed by hand,
        ``read_committed``, with the fetch and session bounds of ``settings``; not started."""
        s = settings
        return self.consumer(
            **s.kafka_options(),
            group_id=group_id,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_bytes=s.fetch_max_bytes,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
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

    async def client(self, options: dict[str, Any], client_id: str) -> Any:
        """A bootstrapped ``AIOKafkaClient`` (the bad-batch re-read's)."""
        return await new_client(options, client_id)

    async def read_held(
        self, settings: Settings, tps: list[Any], committed: dict[Any, int | None]
    ) -> dict[Any, dict[str, HeldTrace]]:
        """The trace parts held for input partitions ``tps``, read back from the held-parts
        store (:func:`citemon._service.held.read_held`)."""
        from citemon._service.held import read_held

        return await read_held(self.consumer, settings, tps, committed)

    async def check_topics(self, settings: Settings) -> RecordLimits:
        """Every topic ``run`` uses exists and may be used (or is created), before consuming;
        their record limits (:func:`citemon._service.topics.check_topics`)."""
        from citemon._service.topics import check_topics

        return await check_topics(settings)

    async def watch_topics(self, settings: Settings, *, interval_s: float) -> None:
        """Until cancelled, or until a topic ``run`` uses is gone
        (:class:`citemon._service.topics.TopicWatch`)."""
        from citemon._service.topics import TopicWatch

        await TopicWatch(settings, interval_s=interval_s).run()
