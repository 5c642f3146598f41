"""What the shim counts about itself (:class:`ShimStats`), and its rate-limited error log."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["LOG_INTERVAL_S", "STATS", "ShimStats"]

_log = logging.getLogger("citemon_instrumentation")

LOG_INTERVAL_S: Final = 60.0
"""At most one log line per error kind per this many seconds (the first one always)."""


class ShimStats:
    """What the shim counted; read it from a health endpoint or a test.

    ``errors`` are failures of the shim itself, ``redact_errors`` of the redact hook (the text was
    then not recorded), ``truncated`` answers that carry ``citemon.truncated=true``.
    """

    __slots__ = (
        "_last_log",
        "_lock",
        "answers",
        "errors",
        "redact_errors",
        "suppressed",
        "truncated",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_log: dict[str, float] = {}
        self.answers = 0
        self.errors = 0
        self.redact_errors = 0
        self.truncated = 0
        self.suppressed = 0

    def __repr__(self) -> str:
        return (
            f"ShimStats(answers={self.answers}, errors={self.errors}, "
            f"redact_errors={self.redact_errors}, truncated={self.truncated})"
        )

    def _error(
        self, kind: str, exc: BaseException, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        """Count an error and log it, rate-limited per kind (never the text it was handling)."""
        with self._lock:
            if kind == "redact":
                self.redact_errors += 1
            else:
                self.errors += 1
            t = now()
            last = self._last_log.get(kind)
            if last is not None and t - last < LOG_INTERVAL_S:
                self.suppressed += 1
                return
            self._last_log[kind] = t
            suppressed, self.suppressed = self.suppressed, 0
        # The type only: a message may quote the text it failed on (a redact hook's often does).
        _log.warning(
            "citemon shim %s error (the host is unaffected; %d similar suppressed): %s",
            kind,
            suppressed,
            type(exc).__name__,
        )


STATS: Final = ShimStats()
"""The default counters, used when a call passes no ``stats=``."""
