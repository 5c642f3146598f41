"""Who wakes whom in ``citemon run``: each stage notifies its own :class:`Signal` where its state
changes, and a waiter that arms its waits before it checks loses no change made meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from citemon._core.errors import MonitorFailed
from citemon._service.ledger import Ledger
from citemon._service.lifecycle import Signal, Supervisor


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
