"""Who wakes whom in ``citemon run``: each stage notifies its own :class:`Signal` where its state
changes, and a waiter that arms its waits before it checks loses no change made meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from citemon._core.errors import MonitorFailed, TopicsUnusable
from citemon._service.kafka import KafkaClients, RecordLimits
from citemon._service.ledger import Ledger
from citemon._service.lifecycle import Signal, Supervisor
from citemon._service.settings import Settings
from tests.built import Build


async def test_a_wait_armed_before_a_change_returns_though_awaited_after_it() -> None:
    signal = Signal()
    armed = signal.wait()  # armed, then the waiter checks (and awaits something else)...
    signal.notify()  # ...while the state changes
    assert await asyncio.wait_for(armed, timeout=5) is True


async def test_a_wait_armed_after_a_change_waits_for_the_next_one() -> None:
    signal = Signal()
    signal.notify()
    armed = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    assert not armed.done()
    signal.notify()
    assert await asyncio.wait_for(armed, timeout=5) is True


async def test_the_ledger_wakes_its_waiters_on_its_own_changes() -> None:
    ledger = Ledger()
    assert not hasattr(ledger, "touch")  # nobody outside notifies for it
    changed = asyncio.ensure_future(ledger.changed())
    ledger.assign(["tp"], opening=False)
    assert await asyncio.wait_for(changed, timeout=5) is True
    # A fetch taken: positions no longer stand ahead of the records taken.
    changed = asyncio.ensure_future(ledger.changed())
    with ledger.taking_fetch():
        await asyncio.sleep(0)
        assert not changed.done()
    assert await asyncio.wait_for(changed, timeout=5) is True
    # A seek: positions moved.
    changed = asyncio.ensure_future(ledger.changed())
    ledger.sought("tp")
    assert await asyncio.wait_for(changed, timeout=5) is True


async def test_the_supervisor_wakes_its_waiters_on_a_fatal_ending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor()
    failed = asyncio.ensure_future(supervisor.failed())
    supervisor.supervise(asyncio.create_task(asyncio.sleep(0), name="early"))  # returns: fatal
    assert await asyncio.wait_for(failed, timeout=5) is True
    assert isinstance(supervisor.fatal, MonitorFailed)
    assert "background task early returned" in caplog.text


async def test_caught_up_raises_when_run_ends_before_it_could_return(build: Build) -> None:
    """A caller waiting for ``caught_up()`` is told when ``run()`` ends without it: refused at
    start (a topic missing) or stopped; it would otherwise wait for ever."""

    class Unusable(KafkaClients):
        async def check_topics(self, settings: Settings) -> RecordLimits:
            raise TopicsUnusable(["topic 't' does not exist"], "localhost:9092")

    p = build(Settings(topic="t", results_topic="r"), clients=Unusable())
    waiting = asyncio.ensure_future(p.caught_up())
    await asyncio.sleep(0)  # the waiter armed its waits before run() starts
    with pytest.raises(TopicsUnusable):
        await p.run()
    with pytest.raises(RuntimeError, match="stopped before it caught up"):
        await asyncio.wait_for(waiting, timeout=5)
    # A later call, after run() ended, is told at once too.
    with pytest.raises(RuntimeError, match="stopped before it caught up"):
        await asyncio.wait_for(p.caught_up(), timeout=5)
