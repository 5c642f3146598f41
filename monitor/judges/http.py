"""The HTTP judge: an OpenAI-compatible chat model behind wire contract v1.

Wire contract v1 (DESIGN.md, "Judges"): ``POST {base_url}/chat/completions`` with an
OpenAI-compatible body (``model``, ``messages``, ``temperature: 0``,
``response_format: {"type": "json_object"}``), one claim per request, every passage verbatim
inside nonce-tagged delimiters (:mod:`monitor.judges.prompts`). The model's message content must
be a JSON object ``{"entailed": true|false, "reason": "…"}`` (a ```json fence and surrounding
whitespace are tolerated); anything else is an invalid reply. ``Authorization: Bearer <key>`` is
sent only when a key is set, and the key comes from :data:`API_KEY_ENV` unless passed in.

What the judge promises its callers (the scorer, the monitor's pipeline):

* at most ``max_inflight`` HTTP requests in flight, shared by every caller of one judge;
* a hard per-attempt deadline of ``timeout_s`` (connect + send + whole reply);
* retries with exponential backoff and full jitter on 429, 5xx, 408, timeouts, connection
  errors and invalid replies; a server's ``Retry-After`` (seconds or HTTP date, capped by
  ``backoff_max_s``) is obeyed and also holds back every other caller of the judge;
* other 4xx fail at once; after the retry budget the matching :class:`~monitor.errors.JudgeError`
  is raised (the scorer turns it into ``unjudged``) — never a guessed verdict;
* verdicts (not errors) are cached in an LRU keyed by a hash of model, prompt version, claim and
  the sorted passages; identical concurrent requests share one call;
* the API key never appears in logs, reprs, error messages or metrics.

httpx errors are mapped to citemon's in one place, :meth:`HTTPJudge._attempt`.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import logging
import math
import os
import random
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import httpx

from monitor.errors import (
    ConfigError,
    JudgeError,
    JudgeHTTPError,
    JudgeInvalidReply,
    JudgeRateLimited,
    JudgeTimeout,
)
from monitor.judges.base import JudgeObserver
from monitor.judges.prompts import (
    PROMPT_VERSION,
    Message,
    build_decompose_messages,
    build_entailment_messages,
)
from monitor.records import Verdict

__all__ = [
    "API_KEY_ENV",
    "HTTPJudge",
    "parse_decompose_reply",
    "parse_entailment_reply",
    "parse_retry_after",
]

API_KEY_ENV: Final = "CITEMON_JUDGE_API_KEY"
"""Environment variable holding the judge's API key (default: unset, no ``Authorization``)."""

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
_SNIPPET_CHARS = 200


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "…"


def _json_object(content: str) -> dict[str, Any]:
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise JudgeInvalidReply(f"reply is not JSON: {_snippet(content)!r}") from exc
    if not isinstance(value, dict):
        raise JudgeInvalidReply(f"reply is not a JSON object: {_snippet(content)!r}")
    return value


def parse_entailment_reply(content: str) -> Verdict:
    """The verdict in a model's message content, or :class:`JudgeInvalidReply`.

    ``entailed`` must be a JSON boolean (``"true"`` or ``1`` is a model not following the
    contract, and guessing would bias the score); ``reason`` must be a string or absent; a
    ``confidence`` in [0, 1] is kept, any other is ignored.
    """
    obj = _json_object(content)
    entailed = obj.get("entailed")
    if not isinstance(entailed, bool):
        raise JudgeInvalidReply(f'"entailed" is not a boolean: {_snippet(content)!r}')
    reason = obj.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise JudgeInvalidReply(f'"reason" is not a string: {_snippet(content)!r}')
    confidence = obj.get("confidence")
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0.0 <= confidence <= 1.0
    ):
        confidence = None
    return Verdict(entailed=entailed, reason=reason, confidence=confidence)


def parse_decompose_reply(content: str) -> list[str]:
    """The claims in a decomposition reply ``{"claims": ["…", …]}``, blank ones dropped."""
    obj = _json_object(content)
    claims = obj.get("claims")
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise JudgeInvalidReply(f'"claims" is not a list of strings: {_snippet(content)!r}')
    return [c.strip() for c in claims if c.strip()]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), else None."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT by definition
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class HTTPJudge:
    """A :class:`~monitor.judges.base.Judge` that asks an OpenAI-compatible chat endpoint.

    ``base_url`` is the API root (``http://localhost:8000/v1`` for vLLM, ``…:11434/v1`` for
    Ollama); ``retries`` is the number of retries after the first attempt. Limits are in the
    names: ``max_inflight`` requests, ``timeout_s`` per attempt, backoff in seconds,
    ``cache_size`` entries (0 disables the cache). Pass ``client`` to share an
    ``httpx.AsyncClient`` (the judge then does not close it) or ``transport`` for the one it
    builds; ``rng`` makes the jitter reproducible.

    Use ``async with HTTPJudge(...) as judge`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        max_inflight: int = 8,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        cache_size: int = 10_000,
        api_key: str | None = None,
        observer: JudgeObserver | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_inflight < 1:
            raise ConfigError(f"max_inflight must be at least 1, not {max_inflight}")
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be positive, not {timeout_s}")
        if retries < 0:
            raise ConfigError(f"retries must be 0 or more, not {retries}")
        if backoff_base_s < 0 or backoff_max_s < 0:
            raise ConfigError("backoff_base_s and backoff_max_s must not be negative")
        if cache_size < 0:
            raise ConfigError(f"cache_size must be 0 or more, not {cache_size}")
        if not base_url.strip() or not model.strip():
            raise ConfigError("the HTTP judge needs a base URL and a model name")
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._model = model
        self._max_inflight = max_inflight
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._cache_size = cache_size
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._api_key = key or None
        self._headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._observer = observer
        self._rng = rng or random.Random()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(
                max_connections=max_inflight, max_keepalive_connections=max_inflight
            ),
        )
        self._semaphore = asyncio.Semaphore(max_inflight)
        self._not_before = 0.0  # time.monotonic() before which nobody sends (Retry-After)
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Any]] = {}

    # -- public surface ------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._model

    @property
    def max_inflight(self) -> int:
        return self._max_inflight

    def __repr__(self) -> str:
        return (
            f"HTTPJudge(base_url={self._base_url!r}, model={self._model!r}, "
            f"max_inflight={self._max_inflight}, timeout_s={self._timeout_s:g}, "
            f"retries={self._retries}, prompt_version={PROMPT_VERSION!r}, "
            f"api_key={'***' if self._api_key else None!r})"
        )

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """Whether ``passages`` (ID → text), taken together, entail ``claim``.

        Raises a :class:`~monitor.errors.JudgeError` subclass when no valid verdict could be
        had within the retry budget. No passages entail nothing, so that costs no request.
        """
        if not passages:
            return Verdict(entailed=False, reason="no passages were shown")
        key = self._key("entails", claim, sorted(passages.items()))
        return await self._cached(
            key,
            lambda: self._call(build_entailment_messages(claim, passages), parse_entailment_reply),
        )

    async def decompose(self, sentence: str) -> list[str]:
        """``sentence`` split into standalone atomic claims (``--decompose llm``).

        An empty split means the model found nothing to check; the sentence itself is returned
        so the claim is not silently lost. Raises :class:`~monitor.errors.JudgeError` on final
        failure (the caller falls back to the sentence).
        """
        key = self._key("decompose", sentence, [])
        claims = await self._cached(
            key,
            lambda: self._call(build_decompose_messages(sentence), parse_decompose_reply),
        )
        return list(claims) if claims else [sentence]

    async def aclose(self) -> None:
        """Cancel calls still running and close the HTTP client if the judge made it."""
        pending = list(self._pending.values())
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> HTTPJudge:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- cache and single-flight ---------------------------------------------------------

    def _key(self, kind: str, text: str, passages: list[tuple[str, str]]) -> str:
        payload = json.dumps(
            [kind, self._model, PROMPT_VERSION, text, passages], ensure_ascii=False
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    async def _cached(self, key: str, call: Callable[[], Awaitable[_T]]) -> _T:
        if key in self._cache:
            self._cache.move_to_end(key)
            self._observe_cache(hit=True)
            return cast(_T, self._cache[key])
        fut = self._pending.get(key)
        # Joining an identical call already in flight saves a request: count it as a hit.
        self._observe_cache(hit=fut is not None)
        if fut is None:
            fut = asyncio.ensure_future(call())
            self._pending[key] = fut
            fut.add_done_callback(partial(self._settle, key))
        # shield: one caller giving up must not cancel the call the others are waiting on.
        return cast(_T, await asyncio.shield(fut))

    def _settle(self, key: str, fut: asyncio.Future[Any]) -> None:
        self._pending.pop(key, None)
        if fut.cancelled() or fut.exception() is not None:  # errors are never cached
            return
        if self._cache_size:
            self._cache[key] = fut.result()
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    # -- one logical call: attempts, backoff ---------------------------------------------

    async def _call(self, messages: list[Message], parse: Callable[[str], _T]) -> _T:
        body = {
            "model": self._model,
            "messages": messages,
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
        attempt = 0
        while True:
            await self._wait_not_before()
            try:
                return await self._attempt(body, parse)
            except JudgeError as exc:
                if not exc.retriable or attempt >= self._retries:
                    raise
                delay = self._backoff(attempt, exc)
                logger.debug(
                    "judge attempt %d/%d failed (%s: %s); retrying in %.3fs",
                    attempt + 1,
                    self._retries + 1,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                attempt += 1
                await asyncio.sleep(delay)

    def _backoff(self, attempt: int, exc: JudgeError) -> float:
        if isinstance(exc, JudgeRateLimited) and exc.retry_after_s is not None:
            delay = min(exc.retry_after_s, self._backoff_max_s)
            # The server asked everyone to wait, not just this call.
            self._not_before = max(self._not_before, time.monotonic() + delay)
            return delay
        # Full jitter (AWS architecture blog): uniform in [0, min(cap, base·2^attempt)].
        return self._rng.uniform(0.0, min(self._backoff_max_s, self._backoff_base_s * 2**attempt))

    async def _wait_not_before(self) -> None:
        # A loop, not an Event: another 429 may push the deadline on while we sleep.
        while (wait := self._not_before - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(wait)

    async def _attempt(self, body: dict[str, Any], parse: Callable[[str], _T]) -> _T:
        """One HTTP request under the in-flight cap: the single httpx → citemon error boundary."""
        async with self._semaphore:
            self._observe_inflight(+1)
            started = time.perf_counter()
            outcome = "error"
            try:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        response = await self._client.post(
                            self._url, json=body, headers=self._headers
                        )
                except (TimeoutError, httpx.TimeoutException) as exc:
                    raise JudgeTimeout(
                        f"judge at {self._url} did not answer within {self._timeout_s:g}s"
                    ) from exc
                except httpx.TransportError as exc:
                    raise JudgeHTTPError(
                        f"judge at {self._url} failed: {type(exc).__name__}: "
                        f"{self._redact(str(exc))}"
                    ) from exc
                result = self._read(response, parse)
                outcome = "ok"
                return result
            except JudgeError as exc:
                outcome = exc.outcome
                raise
            finally:
                self._observe_inflight(-1)
                if self._observer is not None:
                    self._observer.request_done(outcome, time.perf_counter() - started)

    def _read(self, response: httpx.Response, parse: Callable[[str], _T]) -> _T:
        status = response.status_code
        if status == 429:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise JudgeRateLimited(
                f"judge at {self._url} is rate limiting (HTTP 429, Retry-After "
                f"{'unset' if retry_after is None else f'{retry_after:g}s'})",
                retry_after_s=retry_after,
            )
        if not 200 <= status < 300:
            raise JudgeHTTPError(
                f"judge at {self._url} returned HTTP {status}: "
                f"{_snippet(self._redact(response.text))!r}",
                status=status,
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise JudgeInvalidReply(
                f"judge at {self._url} sent no chat completion: "
                f"{_snippet(self._redact(response.text))!r}"
            ) from exc
        if not isinstance(content, str):
            raise JudgeInvalidReply(f"judge at {self._url} sent no message content")
        return parse(content)

    def _redact(self, text: str) -> str:
        # A misbehaving server may echo request headers back in an error body.
        return text.replace(self._api_key, "***") if self._api_key else text

    def _observe_inflight(self, delta: int) -> None:
        if self._observer is not None:
            self._observer.inflight(delta)

    def _observe_cache(self, *, hit: bool) -> None:
        if self._observer is not None:
            self._observer.cache(hit)
