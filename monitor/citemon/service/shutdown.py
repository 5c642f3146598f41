"""Shutting the pipeline down within a deadline, without cutting a commit in half.

After the drain come the last commit and closing the clients. aiokafka retries both for as long
as the broker is away, so without a deadline a SIGTERM during a broker restart waited for the
broker; past the deadline the process exits uncommitted, as after a ``kill -9`` (the next owner
scores the uncommitted answers, and its transactional ID fences ours, aborting the transaction
left open).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

__all__ = ["close_within", "stop_between_commits"]

log = logging.getLogger(__name__)

CLOSE_GRACE_S: Final = 1.0
"""Per client, once the close deadline has passed."""


async def stop_between_commits(
    background: Sequence[asyncio.Task[Any]], commit_lock: asyncio.Lock, deadline: float
) -> bool:
    """Cancel the commit and lag loops, but never in the middle of a commit; False when a
    commit held the lock past ``deadline`` and was cut short (skip the final commit then).

    A transaction cancelled while its commit is on the wire may still commit at the broker
    while its entries stay unconfirmed here: the final commit would then publish the same
    results again. So wait for the commit lock; if a commit holds it past ``deadline`` (the
    close deadline: the broker is away), cancel anyway, and the caller exits as after a kill:
    the partition's next owner finds that transaction complete or aborted before it reads the
    offset. The counters may then undercount, never overcount: answers are counted only once
    their commit is confirmed, and a transaction that completed unconfirmed is neither counted
    here nor read again by the next owner."""
    try:
        async with asyncio.timeout_at(deadline):
            await commit_lock.acquire()
    except TimeoutError:
        for task in background:
            task.cancel()
        return False
    try:
        for task in background:
            task.cancel()
    finally:
        commit_lock.release()
    return True


async def close_within(
    deadline: float,
    background: Sequence[asyncio.Task[Any]],
    *,
    final_commit: Callable[[], Awaitable[None]],
    clients: Sequence[tuple[str, Callable[[], Awaitable[Any]]]],
    uncommitted: Callable[[], int],
    timeout_s: float,
) -> None:
    """The final commit before ``deadline``, then close each client; past the deadline
    nothing more is committed and each client gets :data:`CLOSE_GRACE_S` before it is
    abandoned."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(deadline):
            await asyncio.gather(*background, return_exceptions=True)
            try:
                await final_commit()
            except Exception:  # the bug that killed the commit loop may strike here too
                log.exception("the final commit failed; the next owner scores the rest")
    except TimeoutError:
        log.error(
            "Kafka did not answer within %.0f s of shutdown: stopping without the final "
            "commit (%d fetched records uncommitted; the next owner scores them)",
            timeout_s,
            uncommitted(),
        )
    for name, stop in clients:
        try:
            async with asyncio.timeout_at(max(deadline, loop.time() + CLOSE_GRACE_S)):
                await stop()
        except TimeoutError:
            log.warning("closing the Kafka %s timed out; abandoning it", name)
