"""``Monitor.wait_serving()``: the signal that a built monitor serves (its metrics port bound),
and the start-up error when it never does; no broker (the clients fail on cue)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from prometheus_client import CollectorRegistry

from citemon._core.errors import ConfigError
from citemon._service.kafka import KafkaClients, RecordLimits
from citemon._service.monitor import build_monitor
from citemon._service.settings import Settings


class _TopicsCheckedOnCue(KafkaClients):
    """Clients whose topic check waits for ``release``, then finds the topics unusable."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def check_topics(self, settings: Settings) -> RecordLimits:
        await self.release.wait()
        raise ConfigError("topic citemon.test does not exist (a test's clients)")


async def test_wait_serving_returns_once_the_metrics_port_is_bound() -> None:
    clients = _TopicsCheckedOnCue()
    settings = Settings(metrics_host="127.0.0.1", metrics_port=0)
    monitor = build_monitor(settings, clients=clients, registry=CollectorRegistry())
    task = asyncio.create_task(monitor.serve(asyncio.Event()))
    await asyncio.wait_for(monitor.wait_serving(), 30)
    port = monitor.server.port
    assert port != 0
    async with httpx.AsyncClient() as http:
        live = await http.get(f"http://127.0.0.1:{port}/healthz")
        ready = await http.get(f"http://127.0.0.1:{port}/readyz")
    # Serving is not ready: no partition is assigned while the topics are being checked.
    assert (live.status_code, ready.status_code) == (200, 503)
    clients.release.set()
    with pytest.raises(ConfigError, match="does not exist"):
        await task
    await monitor.wait_serving()  # served once: returns, the later error is serve()'s


async def test_wait_serving_raises_what_stopped_the_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(metrics_host="127.0.0.1", metrics_port=port)
        monitor = build_monitor(settings, registry=CollectorRegistry())
        task = asyncio.create_task(monitor.serve(asyncio.Event()))
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            await asyncio.wait_for(monitor.wait_serving(), 30)
        with pytest.raises(ConfigError):
            await task
