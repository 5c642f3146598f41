"""A judge's answers remembered, and identical questions in flight asked once.

:class:`ReplyCache` is an LRU of results (never errors) keyed by :func:`question_key`, plus
single-flight: a question already being asked is joined, not asked again, and one caller giving
up does not cancel it for the others. It belongs to the judge that owns the questions (the HTTP
judges and the classifier each hold one), not to the transport, which only sends requests: a
judge's key says what the answer depends on (its kind, the model, the prompt's version, the
claim and the passages), which only the judge knows.

Hits and misses are told to the judge's :class:`~citemon._core.judge.JudgeObserver` instances (the
``citemon_judge_cache_total`` counter); joining a question in flight counts as a hit, since it
saves a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, TypeVar, cast

from citemon._core.errors import ConfigError
from citemon._core.judge import JudgeObserver

__all__ = ["DEFAULT_CACHE_SIZE", "ReplyCache", "question_key"]

DEFAULT_CACHE_SIZE: Final = 10_000
"""Results a judge remembers by default (a verdict is a few hundred bytes)."""

_T = TypeVar("_T")


def question_key(
    kind: str, model: str, text: str, passages: list[tuple[str, str]], version: str = ""
) -> str:
    """The cache key of a question: ``kind``, ``model``, ``version`` (a prompt's, so that a new
    prompt is never answered from an old one's verdicts), ``text`` and ``passages``."""
    payload = json.dumps([kind, model, version, text, passages], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


class ReplyCache:
    """An LRU of ``size`` results (0: remember nothing, still single-flight) with single-flight.

    Each of ``observers`` is told each hit and miss. :meth:`aclose` cancels the questions in flight.
    """

    def __init__(
        self, size: int = DEFAULT_CACHE_SIZE, *, observers: Sequence[JudgeObserver] = ()
    ) -> None:
        if size < 0:
            raise ConfigError(f"cache_size must be 0 or more, not {size}")
        self._size = size
        self._observers = tuple(observers)
        self._results: OrderedDict[str, object] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Any]] = {}

    def __repr__(self) -> str:
        return f"ReplyCache(size={self._size}, held={len(self._results)})"

    @property
    def size(self) -> int:
        return self._size

    def lookup(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` for a cached key, else ``(False, None)``; counted as a hit or miss."""
        found, value = self._peek(key)
        self._observe(hit=found)
        return found, value

    def store(self, key: str, value: object) -> None:
        if self._size:
            self._results[key] = value
            self._results.move_to_end(key)
            while len(self._results) > self._size:
                self._results.popitem(last=False)

    async def cached(self, key: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """The cached result for ``key``, else ``call()``'s, shared with identical calls in
        flight and cached once it succeeds (errors are never cached)."""
        found, value = self._peek(key)
        if found:
            self._observe(hit=True)
            return cast(_T, value)
        # Joining an identical call already in flight saves a request: count it as a hit.
        self._observe(hit=key in self._pending)
        return await self.single_flight(key, call, cache=True)

    async def single_flight(
        self, key: str, call: Callable[[], Awaitable[_T]], *, cache: bool = False
    ) -> _T:
        """``call()``, or the identical call already in flight under ``key``; with ``cache``
        its result is stored under ``key`` when it succeeds."""
        fut = self._pending.get(key)
        if fut is None:
            fut = asyncio.ensure_future(call())
            self._pending[key] = fut
            fut.add_done_callback(partial(self._settle, key, cache))
        # shield: one caller giving up must not cancel the call the others are waiting on.
        return cast(_T, await asyncio.shield(fut))

    async def aclose(self) -> None:
        """Cancel the calls still in flight and wait for them to end."""
        pending = list(self._pending.values())
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def _peek(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` for a cached key (now the most recent), else ``(False, None)``."""
        if key in self._results:
            self._results.move_to_end(key)
            return True, self._results[key]
        return False, None

    def _settle(self, key: str, cache: bool, fut: asyncio.Future[Any]) -> None:
        if self._pending.get(key) is fut:
            del self._pending[key]
        if not cache or fut.cancelled() or fut.exception() is not None:  # errors: never cached
            return
        self.store(key, fut.result())

    def _observe(self, *, hit: bool) -> None:
        for observer in self._observers:
            observer.cache(hit)
