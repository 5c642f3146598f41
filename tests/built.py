"""Pipelines built the way ``citemon run`` builds them, for tests that drive one without a
broker: :func:`~citemon._service.monitor.build_monitor` (the one builder) makes every part from
the settings; a test picks its judge with the settings (``--judge module:factory``), and hands in
only what ``build_monitor`` takes: Kafka clients that fail on cue, a registry to read, a clock
it moves. The ``build`` fixture closes what it built (scoring threads, judge) after the test."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
from prometheus_client import CollectorRegistry

from citemon._service.kafka import KafkaClients
from citemon._service.monitor import Monitor, build_monitor
from citemon._service.pipeline import Pipeline
from citemon._service.settings import Settings

__all__ = ["Build", "build"]


class Build:
    """``build(settings, ...)``: the pipeline of the monitor ``settings`` describe."""

    def __init__(self) -> None:
        self._built: list[Monitor] = []

    def __call__(
        self,
        settings: Settings,
        *,
        registry: CollectorRegistry | None = None,
        clients: KafkaClients | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Pipeline:
        monitor = build_monitor(
            settings, clients=clients, registry=registry or CollectorRegistry(), clock=clock
        )
        self._built.append(monitor)
        return monitor.pipeline

    async def aclose(self) -> None:
        for monitor in self._built:
            await monitor.aclose()


@pytest.fixture
async def build() -> AsyncIterator[Build]:
    """Builds pipelines for one test; closes them after it."""
    built = Build()
    try:
        yield built
    finally:
        await built.aclose()
