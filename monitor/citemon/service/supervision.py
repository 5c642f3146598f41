"""Background tasks that must run until shutdown, watched: one that ends early is fatal.

The commit loop, the lag loop and the metrics server each keep a guarantee; if one died
silently the process would look healthy while intake paused forever behind an uncommitted
backlog. :class:`Supervisor` turns such an ending (a bug's exception, a cancellation, a plain
return) into a :class:`~citemon.core.errors.MonitorFailed` that the pipeline raises from ``run``,
after ``/healthz`` turned 503 and intake drained.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from citemon.core.errors import MonitorFailed, TopicsUnusable

__all__ = ["Supervisor"]

log = logging.getLogger(__name__)


class Supervisor:
    """Watches tasks; ``fatal`` holds the first early ending, ``on_fatal`` is told of it."""

    def __init__(self, on_fatal: Callable[[], None]) -> None:
        self._on_fatal = on_fatal
        self.fatal: BaseException | None = None
        self.closing = False

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
            self._on_fatal()
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
        self._on_fatal()
