"""The one HTTP transport of the judges: limits, retries, credentials, once.

A judge is handed a transport, as an ``httpx.Client`` takes ``transport=``
(:func:`~citemon.judges.load_judge` builds it from the settings, credentials included), and
sends each request through it with its :class:`Wire`, the one thing judges differ in: what a
request's body is and how its reply reads (the chat wire of :mod:`citemon.judges.http`, TEI's
``/predict`` of :mod:`citemon.judges.tei`). What the transport promises, so that no judge has
its own copy and none can get it wrong:

* at most ``max_inflight`` HTTP requests in flight, shared by every caller of one judge;
* a hard per-attempt deadline of ``timeout_s`` (connect + send + whole reply), and a reply read
  no further than ``max_reply_bytes``;
* retries with exponential backoff and full jitter on 429, 5xx, 408, timeouts, connection
  errors and invalid replies; a server's ``Retry-After`` (seconds or HTTP date, capped by
  ``backoff_max_s``) is obeyed and also holds back every other caller of the judge;
* other 4xx fail at once; after the retry budget the matching
  :class:`~citemon._core.errors.JudgeError` is raised (the scorer turns it into ``unjudged``),
  never a guessed verdict;
* the API key never appears in logs, reprs, error messages or metrics; nor do credentials in
  the base URL (``http://user:key@host/v1`` is sent as HTTP Basic auth and shown without them),
  nor an ``Authorization`` value a server echoes back in an error body (the parsing and the
  redaction are :class:`~citemon.judges.credentials.Credentials`).

httpx errors are mapped to citemon's in one place, :meth:`HTTPTransport.send`; a reply's status
in one other, :func:`raise_for_status`, which a wire calls once it has read what its endpoint
says in a status of its own. The API key is what the caller passes (``JudgeSettings.api_key``
through ``load_judge``): the transport reads no environment. What a judge remembers, and
single-flight, are the judge's own (:mod:`citemon.judges.cache`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Generic, Protocol, Self, TypeVar

import httpx

from citemon._core.errors import (
    ConfigError,
    JudgeError,
    JudgeHTTPError,
    JudgeInvalidReply,
    JudgeRateLimited,
    JudgeTimeout,
)
from citemon._core.judge import JudgeObserver
from citemon.judges.credentials import Credentials
from citemon.judges.replies import snippet
from citemon.judges.settings import API_KEY_ENV

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MAX_REPLY_BYTES",
    "Exchange",
    "HTTPTransport",
    "Refused",
    "Site",
    "Wire",
    "parse_retry_after",
    "raise_for_status",
]

DEFAULT_MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
"""A chat completion carrying verdicts is a few kB; past this a reply is read no further."""

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


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


@dataclass(frozen=True, slots=True)
class Site:
    """The endpoint as a wire may see it: never its credentials, so it can be shown."""

    url: str
    """``{base_url}/{endpoint}`` without credentials or query string."""
    model: str
    redact: Callable[[str], str]
    """Takes every form of the transport's credentials out of a text (an echoed error body)."""


@dataclass(frozen=True, slots=True)
class Exchange(Generic[_T]):
    """One HTTP request as a wire makes it once the request holds its slot: the JSON body, how
    the reply reads (raising a :class:`~citemon._core.errors.JudgeError`, or :class:`Refused`),
    and, for a result valid only in part, the invalid-reply cause to count it under."""

    body: dict[str, Any]
    read: Callable[[httpx.Response], _T]
    problem: Callable[[_T], str | None] | None = None


class Wire(Protocol):
    """What one endpoint's requests and replies are: all an HTTP judge adds to the transport.

    ``exchange`` is called for every request sent, inside the in-flight slot, so what it asks
    for (a response format a server refused before) is decided as late as it can be.
    """

    endpoint: str
    """The path under the base URL (``chat/completions``, ``predict``)."""

    def exchange(self, request: Any, site: Site) -> Exchange[Any]: ...


class Refused(Exception):
    """A wire's reading of a reply: the server refused what the request asked for (a response
    format), and the wire now asks for less. The transport sends again at once: a server's
    capability is not a failure, so it costs no retry (the refused request counts as ``error``)."""


def raise_for_status(response: httpx.Response, site: Site) -> None:
    """A non-2xx reply as citemon's error (429 with its ``Retry-After``; the body redacted)."""
    status = response.status_code
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        raise JudgeRateLimited(
            f"judge at {site.url} is rate limiting (HTTP 429, Retry-After "
            f"{'unset' if retry_after is None else f'{retry_after:g}s'})",
            retry_after_s=retry_after,
        )
    if not 200 <= status < 300:
        raise JudgeHTTPError(
            f"judge at {site.url} returned HTTP {status}: {snippet(site.redact(response.text))!r}",
            status=status,
        )


class HTTPTransport:
    """JSON-over-HTTP endpoints under ``base_url`` (each wire's at ``{base_url}/{endpoint}``)
    with the module's promises.

    ``retries`` is the number of retries after the first attempt; limits are in the names:
    ``max_inflight`` requests, ``timeout_s`` per attempt, backoff in seconds. ``api_key`` is
    sent as a bearer token (``None``: no ``Authorization``). each of ``observers`` is told of
    every request. Pass ``client`` to share an ``httpx.AsyncClient`` (it is then not closed here) or
    ``transport`` for the one built here; ``rng`` makes the jitter reproducible. Use ``async
    with`` or call :meth:`aclose`.
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
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        api_key: str | None = None,
        observers: Sequence[JudgeObserver] = (),
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_inflight < 1:
            raise ConfigError(f"max_inflight must be at least 1, not {max_inflight}")
        if max_reply_bytes < 1:
            raise ConfigError(f"max_reply_bytes must be at least 1, not {max_reply_bytes}")
        self._max_reply_bytes = max_reply_bytes
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be positive, not {timeout_s}")
        if retries < 0:
            raise ConfigError(f"retries must be 0 or more, not {retries}")
        if backoff_base_s < 0 or backoff_max_s < 0:
            raise ConfigError("backoff_base_s and backoff_max_s must not be negative")
        if not base_url.strip() or not model.strip():
            raise ConfigError("the HTTP judge needs a base URL and a model name")
        self._credentials = Credentials.parse(base_url, api_key)
        self._headers = self._credentials.headers
        self._shown_base = self._credentials.shown_base
        self._sites: dict[str, tuple[str, Site]] = {}  # endpoint → (URL sent to, Site shown)
        self._model = model
        self._max_inflight = max_inflight
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._observers = tuple(observers)
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

    def __repr__(self) -> str:
        return f"HTTPTransport({self.describe()})"

    def describe(self, extra: str = "") -> str:
        """The repr's fields (``extra``, ``name=value, `` pairs, before the key); no secret."""
        return (
            f"base_url={self._shown_base!r}, model={self._model!r}, "
            f"max_inflight={self._max_inflight}, timeout_s={self._timeout_s:g}, "
            f"retries={self._retries}, {extra}"
            f"api_key={'***' if self._credentials.api_key else None!r}"
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def max_inflight(self) -> int:
        return self._max_inflight

    @property
    def observers(self) -> tuple[JudgeObserver, ...]:
        """What is told of every request (a judge tells them of its cache too)."""
        return self._observers

    def site(self, wire: Wire) -> Site:
        """Where ``wire``'s requests go, as they may be shown."""
        return self._endpoint(wire.endpoint)[1]

    def _endpoint(self, endpoint: str) -> tuple[str, Site]:
        if endpoint not in self._sites:
            url = self._credentials.url(endpoint)
            shown = Site(f"{self._shown_base}/{endpoint}", self._model, self._credentials.redact)
            self._sites[endpoint] = (url, shown)
        return self._sites[endpoint]

    @property
    def shown_base(self) -> str:
        """The base URL without credentials or query string."""
        return self._shown_base

    async def aclose(self) -> None:
        """Close the HTTP client if the transport made it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- one logical call: attempts, backoff ---------------------------------------------

    async def call(
        self,
        request: object,
        wire: Wire,
        *,
        fatal: tuple[type[JudgeError], ...] = (),
        log: logging.Logger = logger,
        what: str = "judge",
    ) -> Any:
        """One logical call: attempts within the retry budget, with backoff between them.

        ``fatal`` errors are raised at once; ``log`` and ``what`` name the caller in the debug
        line of each retry."""
        attempt = 0
        while True:
            try:
                return await self.send(request, wire)
            except fatal:
                raise
            except JudgeError as exc:
                if not await self.retry(attempt, exc, log=log, what=what):
                    raise
                attempt += 1

    async def retry(
        self, attempt: int, exc: JudgeError, *, log: logging.Logger = logger, what: str = "judge"
    ) -> bool:
        """Whether attempt ``attempt`` (0-based), failed with ``exc``, may be followed by
        another: False past the budget or for an error that cannot pass; else True, once the
        backoff has been slept."""
        if not exc.retriable or attempt >= self._retries:
            return False
        delay = self.backoff(attempt, exc)
        log.debug(
            "%s attempt %d/%d failed (%s: %s); retrying in %.3fs",
            what,
            attempt + 1,
            self._retries + 1,
            type(exc).__name__,
            exc,
            delay,
        )
        await asyncio.sleep(delay)
        return True

    def backoff(self, attempt: int, exc: JudgeError) -> float:
        """Seconds to wait after attempt ``attempt`` failed with ``exc``."""
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

    async def send(self, request: object, wire: Wire) -> Any:
        """One attempt: after any ``Retry-After``, a request, and again at once if the server
        refused what it asked for (:class:`Refused`: the wire asks for less now)."""
        await self._wait_not_before()
        while True:
            try:
                return await self._send(request, wire)
            except Refused:
                continue

    async def _send(self, request: object, wire: Wire) -> Any:
        """One HTTP request under the in-flight cap: the single httpx → citemon error boundary.

        The wire makes the request once it holds its slot, so requests queued behind a refusal
        already ask for less."""
        auth = self._credentials.request_auth
        url, site = self._endpoint(wire.endpoint)
        async with self._semaphore:
            exchange = wire.exchange(request, site)
            self._observe_inflight(+1)
            started = time.perf_counter()
            outcome = "error"
            try:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        response = await self._post(url, site, exchange.body, auth)
                except (TimeoutError, httpx.TimeoutException) as exc:
                    raise JudgeTimeout(
                        f"judge at {site.url} did not answer within {self._timeout_s:g}s"
                    ) from exc
                except httpx.TransportError as exc:
                    raise JudgeHTTPError(
                        f"judge at {site.url} failed: {type(exc).__name__}: "
                        f"{self._credentials.redact(str(exc))}"
                    ) from exc
                result = exchange.read(response)  # Refused: outcome stays "error", it failed
                # A reply valid only in part (a v2 reply missing claims) is invalid too.
                problem = None if exchange.problem is None else exchange.problem(result)
                if problem is not None:
                    outcome = "invalid"
                    self._observe_invalid(problem)
                else:
                    outcome = "ok"
                return result
            except JudgeError as exc:
                outcome = exc.outcome
                if isinstance(exc, JudgeInvalidReply):
                    self._observe_invalid(exc.cause)
                raise
            finally:
                self._observe_inflight(-1)
                seconds = time.perf_counter() - started
                for observer in self._observers:
                    observer.request_done(outcome, seconds)

    async def _post(
        self, url: str, site: Site, body: dict[str, Any], auth: dict[str, Any]
    ) -> httpx.Response:
        """POST ``body`` and read the reply, at most ``max_reply_bytes`` of it: a broken proxy
        or a runaway model must not make one request hold gigabytes in a long-lived monitor."""
        request = self._client.build_request("POST", url, json=body, headers=self._headers)
        response = await self._client.send(request, stream=True, **auth)
        try:
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > self._max_reply_bytes:
                    raise JudgeInvalidReply(
                        f"judge at {site.url} sent a reply over "
                        f"{self._max_reply_bytes} bytes (HTTP {response.status_code}); "
                        "read no further",
                        cause="too_large",
                    )
        finally:
            await response.aclose()
        # The bytes are decoded already: drop the headers that would have httpx decode again.
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(
            response.status_code, headers=headers, content=bytes(data), request=request
        )

    async def get_json(self, path: str) -> Any:
        """``GET {base_url}/{path}`` as JSON, or None when the server has none or fails (a reply
        over 1 MB included): for optional hints (TEI's ``/info``). One request, outside the
        in-flight cap, the retries and the metrics."""
        url = self._credentials.url(path)
        auth = self._credentials.request_auth
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.get(url, headers=self._headers, **auth)
            if response.status_code != 200 or len(response.content) > 1_000_000:
                return None
            return response.json()
        except (TimeoutError, httpx.HTTPError, ValueError):
            return None

    # -- the observer ----------------------------------------------------------------------

    def _observe_inflight(self, delta: int) -> None:
        for observer in self._observers:
            observer.inflight(delta)

    def _observe_invalid(self, cause: str) -> None:
        for observer in self._observers:
            observer.invalid_reply(cause)
