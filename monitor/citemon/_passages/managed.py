"""The production manners around every backend: a cache, a concurrency cap, a timeout, retries
with backoff, counts, and (for ``citemon run``) holding answers while the store is down.

:class:`ManagedStore` is itself a :class:`~citemon._core.passages.PassageStore`: the scorer asks
it once per answer for every text-less ID. What it does with one call:

1. IDs in the cache (``cache_size`` entries, each for ``cache_ttl_s``) are answered from it
   (counted ``cached``); IDs the store did not hold are not cached, so a chunk indexed later is
   found on its next answer.
2. The rest go to the backend in **one** round trip (never one per passage), under a cap of
   ``concurrency`` round trips at once and a ``timeout_s`` each. A failed or timed-out round trip
   is retried ``retries`` times, ``backoff_s`` doubling up to ``backoff_max_s``; IDs the
   backend returned are ``fetched``, the others ``not_found``.
3. Still failing: :class:`~citemon._core.passages.PassageLookupError` (its IDs ``failed``) — or,
   with ``hold_s`` > 0 (``citemon run``), the store is taken to be down: ``up`` turns false
   (``/readyz`` 503), and every lookup waits while one probe at a time tries the store again
   (``backoff_s`` doubling up to ``backoff_max_s``), so answers are held rather than poured into
   ``unjudged``; the scoring slots fill and intake stops as it does for a judge outage. The wait
   of one answer is bounded by ``hold_s``: past it the lookup fails and that answer's claims are
   ``unjudged`` (``passage_lookup_failed``), counted.

Errors are described by their type and message only (a driver's message names no password:
credentials come from the environment, never from the URL; :mod:`citemon._passages.open`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cachetools import TTLCache

from citemon._core.passages import LookupOutcome, PassageLookupError, PassageObserver, PassageStore
from citemon._core.stats import ratio
from citemon._engine.passage_text import DEFAULT_HASH_KEY

__all__ = ["LookupStats", "ManagedStore", "StoreLimits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreLimits:
    """``--passage-store-*`` flags; the defaults are what a team's production database takes."""

    cache_size: int = 10_000
    cache_ttl_s: float = 300.0
    concurrency: int = 8
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.2
    backoff_max_s: float = 10.0
    hold_s: float = 0.0
    """0: fail at once after the retries (``score``); ``run`` holds answers this long."""


@dataclass(slots=True)
class LookupStats:
    """Counts since start (the bench reads these; the metrics get the same via the observer)."""

    lookups: int = 0
    """Calls of :meth:`ManagedStore.lookup` that needed anything (one per answer)."""
    round_trips: int = 0
    cached: int = 0
    fetched: int = 0
    not_found: int = 0
    failed: int = 0

    @property
    def hit_ratio(self) -> float | None:
        """Cached IDs over IDs asked for; None when none was asked (no fake 0)."""
        return ratio(self.cached, self.cached + self.fetched + self.not_found + self.failed)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class ManagedStore:
    """A backend with the manners above; ``aclose`` closes the backend (pools, clients)."""

    def __init__(
        self,
        backend: PassageStore,
        limits: StoreLimits | None = None,
        *,
        observer: PassageObserver | None = None,
        name: str = "passage store",
        hash_key: str = DEFAULT_HASH_KEY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.limits = limits = limits or StoreLimits()
        if limits.concurrency < 1 or limits.timeout_s <= 0 or limits.retries < 0:
            raise ValueError("passage store: concurrency >= 1, timeout > 0, retries >= 0")
        self.name = name
        self.hash_key = hash_key
        """The metadata key of a passage's content hash (``--passage-hash-key``)."""
        self.observer = observer
        self.stats = LookupStats()
        self._clock = clock
        self._cache: TTLCache[str, str] | None = (
            TTLCache(maxsize=limits.cache_size, ttl=limits.cache_ttl_s, timer=clock)
            if limits.cache_size > 0 and limits.cache_ttl_s > 0
            else None
        )
        self._slots = asyncio.Semaphore(limits.concurrency)
        self._up = asyncio.Event()
        self._up.set()
        self._probe = asyncio.Lock()
        self._probe_backoff = limits.backoff_s
        self._next_probe = 0.0
        self.down_since: float | None = None
        self.last_error: str | None = None

    @property
    def up(self) -> bool:
        """False while the store is taken to be down (``/readyz``)."""
        return self.down_since is None

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        self.stats.lookups += 1
        out: dict[str, str] = {}
        missing: list[str] = []
        for pid in wanted:
            text = self._cache.get(pid) if self._cache is not None else None
            if text is None:
                missing.append(pid)
            else:
                out[pid] = text
        self._count("cached", len(out))
        if not missing:
            return out
        try:
            fetched = await self._fetch(missing)
        except PassageLookupError:
            self._count("failed", len(missing))
            raise
        for pid in missing:
            text = fetched.get(pid)
            if isinstance(text, str) and text:
                out[pid] = text
                if self._cache is not None:
                    self._cache[pid] = text
        found = sum(1 for pid in missing if pid in out)
        self._count("fetched", found)
        self._count("not_found", len(missing) - found)
        return out

    async def aclose(self) -> None:
        close = getattr(self.backend, "aclose", None)
        if close is not None:
            await close()

    # -- internals -------------------------------------------------------------------------

    def _count(self, outcome: LookupOutcome, n: int) -> None:
        if n <= 0:
            return
        setattr(self.stats, outcome, getattr(self.stats, outcome) + n)
        if self.observer is not None:
            self.observer.looked_up(outcome, n)

    async def _fetch(self, ids: list[str]) -> Mapping[str, str]:
        """One lookup's round trips, held through an outage when ``hold_s`` says so."""
        hold = self.limits.hold_s
        if hold <= 0:
            return await self._attempts(ids, self.limits.retries)
        deadline = self._clock() + hold
        while True:
            if self._up.is_set():
                try:
                    return await self._attempts(ids, self.limits.retries)
                except PassageLookupError:
                    if self._clock() >= deadline:
                        raise
                    self._mark_down()
            elif self._clock() >= self._next_probe and not self._probe.locked():
                async with self._probe:  # one probe at a time, for every waiting answer
                    try:
                        return await self._attempts(ids, 0)
                    except PassageLookupError:
                        self._probe_backoff = min(
                            self._probe_backoff * 2, self.limits.backoff_max_s
                        )
                        self._next_probe = self._clock() + self._probe_backoff
            now = self._clock()
            if now >= deadline:
                raise PassageLookupError(
                    f"{self.name} down for {now - (self.down_since or now):.0f} s "
                    f"(held {hold:.0f} s): {self.last_error}"
                )
            # Wait for the store to answer someone, or for the next probe's time.
            await self._wait_up(min(deadline, max(self._next_probe, now + self._probe_backoff)))

    async def _wait_up(self, until: float) -> None:
        remaining = until - self._clock()
        if remaining <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._up.wait(), remaining)

    def _mark_down(self) -> None:
        if self.down_since is None:
            self.down_since = self._clock()
            self._up.clear()
            self._probe_backoff = self.limits.backoff_s
            self._next_probe = self.down_since + self._probe_backoff
            log.warning(
                "%s is failing every lookup (%s); holding answers and probing it",
                self.name,
                self.last_error,
            )

    def _mark_up(self) -> None:
        if self.down_since is not None:
            log.warning(
                "%s is answering again after %.1f s down; resuming",
                self.name,
                self._clock() - self.down_since,
            )
            self.down_since = None
            self._up.set()

    async def _attempts(self, ids: list[str], retries: int) -> Mapping[str, str]:
        backoff = self.limits.backoff_s
        for attempt in range(retries + 1):
            if attempt:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.limits.backoff_max_s)
            async with self._slots:
                self.stats.round_trips += 1
                started = time.perf_counter()
                try:
                    got = await asyncio.wait_for(self.backend.lookup(ids), self.limits.timeout_s)
                    if not isinstance(got, Mapping):
                        raise TypeError(f"lookup returned {type(got).__name__}, not a mapping")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any backend's failure, a plugin's included
                    self.last_error = _describe(exc)
                    if self.observer is not None:
                        self.observer.round_trip(time.perf_counter() - started, False)
                    continue
            if self.observer is not None:
                self.observer.round_trip(time.perf_counter() - started, True)
            self._mark_up()
            wanted = set(ids)
            return {str(k): v for k, v in got.items() if str(k) in wanted and isinstance(v, str)}
        raise PassageLookupError(
            f"{self.name} failed after {retries + 1} attempt(s): {self.last_error}"
        )
