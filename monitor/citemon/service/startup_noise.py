"""aiokafka's transient start-up messages, at debug level until the consumer has joined its group.

On a healthy start the group coordinator is often not ready yet (a new group, a broker that has
just started, ``__consumer_offsets`` being created or loaded): aiokafka then logs
``ERROR … Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError`` and
``WARNING … Marking the coordinator dead …``, retries, and joins a moment later. Those lines are
the first thing ``citemon run`` and ``make demo`` would print, and they report nothing wrong.

:class:`StartupNoise` lowers exactly those messages to DEBUG (shown with ``--log-level debug``)
while the monitor is starting: until it first holds partitions, and never longer than
``grace_s``. After that, or for any other message, aiokafka's level stands: a coordinator lost
mid-run, or one that never comes, is still an ERROR on stderr. The messages are matched on
aiokafka's logger name, text and error class (aiokafka 0.11-0.14); a test fails if an upgrade
changes them (``tests/integration/test_monitor_demo.py`` asserts a quiet start).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    NotCoordinatorForGroupError,
)

__all__ = ["COORDINATOR_LOGGER", "StartupNoise", "quiet_startup"]

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
