"""Starting and stopping: a quiet start, supervised background tasks, a shutdown with a deadline.

* **A quiet start.** On a healthy start the group coordinator is often not ready yet (a new
  group, a broker just started, ``__consumer_offsets`` being created): aiokafka then logs
  ``ERROR … GroupCoordinatorNotAvailableError`` and ``WARNING … Marking the coordinator dead``,
  retries and joins a moment later. :class:`StartupNoise` lowers exactly those messages to DEBUG
  until the monitor first holds partitions (never longer than ``grace_s``); after that a
  coordinator lost mid-run is still an ERROR. Matched on aiokafka's logger name, text and error
  class (aiokafka 0.11-0.14); ``tests/integration/test_monitor_demo.py`` fails if an upgrade
  changes them.
* **Nothing fails silently.** The commit loop, the lag loop and the metrics server each keep a
  guarantee; if one died silently the process would look healthy while intake paused forever
  behind an uncommitted backlog. :class:`Supervisor` turns such an ending (an exception, a
  cancellation, a plain return) into a :class:`~citemon._core.errors.MonitorFailed` that ``run``
  raises, after ``/healthz`` turned 503 and intake drained.
* **Who wakes whom.** A task that waits for the monitor's state (catching up, the revoke wait)
  waits on the :class:`Signal` of each stage whose state it reads; each stage notifies its own,
  where its state changes.
* **A deadline on shutdown.** After the drain come the last commit and closing the clients.
  aiokafka retries both for as long as the broker is away, so without a deadline a SIGTERM
  during a broker restart waited for the broker; past it the process exits uncommitted, as after
  a ``kill -9`` (the next owner scores the uncommitted answers, and its transactional ID fences
  ours, aborting the transaction left open). A commit is never cut in half
  (:func:`stop_between_commits`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    NotCoordinatorForGroupError,
)

from citemon._core.errors import MonitorFailed, TopicsUnusable

__all__ = [
    "CLOSE_GRACE_S",
    "COORDINATOR_LOGGER",
    "RepeatedClientErrors",
    "Signal",
    "StartupNoise",
    "Supervisor",
    "close_within",
    "quiet_repeats",
    "quiet_startup",
    "stop_between_commits",
]

log = logging.getLogger(__name__)


# -- a quiet start ---------------------------------------------------------------------------

COORDINATOR_LOGGER: Final = "aiokafka.consumer.group_coordinator"
"""The logger of aiokafka's consumer-group coordinator, which logs the start-up noise."""

#: Retriable errors of a coordinator that is not there *yet* (Kafka error codes 15, 14, 16).
TRANSIENT_ERRORS: Final = (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    NotCoordinatorForGroupError,
)
LOOKUP_FAILED: Final = "Group Coordinator Request failed: %s"
COORDINATOR_DEAD: Final = "Marking the coordinator dead (node %s)for group %s."
DEFAULT_GRACE_S: Final = 60.0
"""Past this, a coordinator still missing is a real problem: its messages keep their level."""


class StartupNoise(logging.Filter):
    """Lowers aiokafka's transient coordinator messages to DEBUG until ``joined()`` first
    returns true or ``grace_s`` has passed; drops them unless DEBUG is enabled for their logger
    (a filter runs after the logger's level check, so a lowered record must be judged again)."""

    def __init__(
        self,
        joined: Callable[[], bool],
        *,
        grace_s: float = DEFAULT_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._joined = joined
        self._clock = clock
        self._until = clock() + grace_s
        self._over = False

    def starting(self) -> bool:
        """True while the monitor is starting (sticky: once over, over for good)."""
        if not self._over and (self._joined() or self._clock() >= self._until):
            self._over = True
        return not self._over

    def filter(self, record: logging.LogRecord) -> bool:
        if not is_transient(record) or not self.starting():
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def is_transient(record: logging.LogRecord) -> bool:
    """One of aiokafka's messages about a group coordinator that is not available yet."""
    if record.name != COORDINATOR_LOGGER:
        return False
    if record.msg == COORDINATOR_DEAD:
        return True
    if record.msg == LOOKUP_FAILED and isinstance(record.args, tuple) and record.args:
        return isinstance(record.args[0], TRANSIENT_ERRORS)
    return False


@contextmanager
def quiet_startup(
    joined: Callable[[], bool], *, grace_s: float = DEFAULT_GRACE_S
) -> Iterator[None]:
    """:class:`StartupNoise` on aiokafka's coordinator logger for the duration of the block."""
    noise = StartupNoise(joined, grace_s=grace_s)
    logger = logging.getLogger(COORDINATOR_LOGGER)
    logger.addFilter(noise)
    try:
        yield
    finally:
        logger.removeFilter(noise)


# -- supervision ----------------------------------------------------------------------------


class Signal:
    """A stage's word to the tasks waiting on it that its state changed; each stage owns its
    own and notifies it where that state changes (the ledger in its mutators, the answer jobs
    when one ends, the supervisor on a fatal ending), and a waiter waits on the ones whose state
    it reads.

    :meth:`wait` returns at the next :meth:`notify` after the *call*, not after the coroutine
    first runs: a waiter arms its waits, then checks the state (which may await), then awaits
    them, and loses no change made while it checked.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """The state changed: wake every wait armed before now."""
        self._event.set()
        self._event = asyncio.Event()

    def wait(self) -> Coroutine[Any, Any, bool]:
        """Await this to return at the next :meth:`notify` after this call."""
        return self._event.wait()


class Supervisor:
    """Watches tasks; ``fatal`` holds the first early ending, and :meth:`failed` returns
    when there is one."""

    def __init__(self) -> None:
        self.fatal: BaseException | None = None
        self.closing = False
        self._failed = Signal()

    def failed(self) -> Coroutine[Any, Any, bool]:
        """Await this to return at the next fatal ending after the call."""
        return self._failed.wait()

    def supervise(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """Watch a task that must run until shutdown; its ending before then is fatal."""
        task.add_done_callback(self._done)
        return task

    def stop(self) -> None:
        """Shutdown has begun: supervised tasks may end now."""
        self.closing = True

    def _done(self, task: asyncio.Task[Any]) -> None:
        if self.closing:
            return
        name = task.get_name()
        if task.cancelled():
            cause: BaseException | None = None
            what = "was cancelled"
        else:
            cause = task.exception()
            what = f"died: {cause!r}" if cause is not None else "returned"
        if isinstance(cause, TopicsUnusable):  # said in full, no traceback: exit 1 with it
            log.error("%s: /healthz is now unhealthy and the monitor stops", cause)
            if self.fatal is None:
                self.fatal = cause
            self._failed.notify()
            return
        error = MonitorFailed(f"background task {name} {what}; the monitor stops")
        error.__cause__ = cause
        log.error(
            "background task %s %s: /healthz is now unhealthy, intake stops and the process "
            "exits non-zero",
            name,
            what,
            exc_info=cause,
        )
        if self.fatal is None:
            self.fatal = error
        self._failed.notify()


# -- shutdown -------------------------------------------------------------------------------


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


# -- aiokafka's repeated errors ---------------------------------------------------------------
# aiokafka's repeated errors: printed once, then counted, not logged several times a second.
#
# When a condition persists (a topic deleted under the consumer, a broker away, a refused ACL),
# aiokafka logs the same ``ERROR``/``WARNING`` on every metadata refresh or retry:
# ``Topic … not found in cluster metadata`` several times a second, for as long as it lasts. By
# then citemon has said what is wrong in its own words (:mod:`citemon._service.kafka`, the
# commit loop's warnings, ``/healthz``); the copies bury that line. :class:`RepeatedClientErrors`
# lets the first of each distinct aiokafka message through, counts the repeats
# (``citemon_kafka_client_errors_total{logger}``) and lets one through again, with the number of
# repeats, every ``summary_every_s``. Messages of citemon's own loggers are never touched.


CLIENT_LOGGER: Final = "aiokafka"
DEFAULT_SUMMARY_EVERY_S: Final = 60.0
_MAX_KEYS: Final = 1000
_DECIDED: Final = "_citemon_repeat_decided"


class RepeatedClientErrors(logging.Filter):
    """A handler filter: the first of each aiokafka WARNING-or-worse message (by logger, text
    and arguments) passes; repeats are dropped and reported to ``on_repeat(logger_name)``,
    except one every ``summary_every_s``, which says how many were dropped."""

    def __init__(
        self,
        on_repeat: Callable[[str], None],
        *,
        summary_every_s: float = DEFAULT_SUMMARY_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._on_repeat = on_repeat
        self._every = summary_every_s
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str, str], list[float]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        # One decision per record, however many handlers (each with this filter) it reaches.
        decided = getattr(record, _DECIDED, None)
        if decided is not None:
            return bool(decided)
        keep = self._decide(record)
        setattr(record, _DECIDED, keep)
        return keep

    def _decide(self, record: logging.LogRecord) -> bool:
        name = record.name
        if record.levelno < logging.WARNING or not (
            name == CLIENT_LOGGER or name.startswith(CLIENT_LOGGER + ".")
        ):
            return True
        key = (name, str(record.msg), repr(record.args))
        now = self._clock()
        entry = self._seen.get(key)
        if entry is None:
            self._seen[key] = [now, 0.0]
            if len(self._seen) > _MAX_KEYS:
                self._seen.popitem(last=False)
            return True
        self._on_repeat(name)
        entry[1] += 1
        if now - entry[0] < self._every:
            return False
        record.msg = (
            f"{record.getMessage()} (and {entry[1]:.0f} more times in the last "
            f"{now - entry[0]:.0f} s, not logged: citemon_kafka_client_errors_total)"
        )
        record.args = ()
        entry[0], entry[1] = now, 0.0
        return True


@contextmanager
def quiet_repeats(
    on_repeat: Callable[[str], None], *, summary_every_s: float = DEFAULT_SUMMARY_EVERY_S
) -> Iterator[RepeatedClientErrors]:
    """:class:`RepeatedClientErrors` on every handler of the root logger for the block."""
    noise = RepeatedClientErrors(on_repeat, summary_every_s=summary_every_s)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(noise)
    try:
        yield noise
    finally:
        for handler in handlers:
            handler.removeFilter(noise)
