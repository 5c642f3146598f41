"""Kafka's "cannot connect" mapped to citemon's error, at one boundary."""

from __future__ import annotations

from citemon.core.errors import KafkaUnavailable

__all__ = ["kafka_unavailable"]


def kafka_unavailable(bootstrap_servers: str, exc: BaseException) -> KafkaUnavailable:
    """The error to raise (``from exc``) when a client's start-up found no broker.

    aiokafka reports a refused login as a failed bootstrap too (its own log says which), so the
    message names both causes."""
    return KafkaUnavailable(
        f"cannot connect to Kafka at {bootstrap_servers} (unreachable, or TLS/SASL "
        f"rejected the client): {exc}"
    )
