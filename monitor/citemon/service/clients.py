"""The Kafka clients of one monitor, made by one object that the builder takes.

Production uses :class:`KafkaClients` as it is; a test hands in a subclass whose clients wrap
aiokafka's (a consumer that fails on cue, say), the way arq takes its Redis pool: the runtime
code has no test hooks of its own.
"""

from __future__ import annotations

from typing import Any

from citemon.service.kafka_internals import new_client

__all__ = ["KafkaClients"]


class KafkaClients:
    """Makes the consumer, the producers and the low-level client the monitor uses."""

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
