"""aiokafka's repeated errors: printed once, then counted, not logged several times a second.

When a condition persists (a topic deleted under the consumer, a broker away, a refused ACL),
aiokafka logs the same ``ERROR``/``WARNING`` on every metadata refresh or retry:
``Topic … not found in cluster metadata`` several times a second, for as long as it lasts. By
then citemon has said what is wrong in its own words (:mod:`citemon._service.topics`, the
commit loop's warnings, ``/healthz``); the copies bury that line. :class:`RepeatedClientErrors`
lets the first of each distinct aiokafka message through, counts the repeats
(``citemon_kafka_client_errors_total{logger}``) and lets one through again, with the number of
repeats, every ``summary_every_s``. Messages of citemon's own loggers are never touched.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["RepeatedClientErrors", "quiet_repeats"]

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
