"""The HTTP judge: an OpenAI-compatible chat model behind wire contract v1 (or v2).

Wire contract v1 (DESIGN.md, "Judges"): ``POST {base_url}/chat/completions`` with an
OpenAI-compatible body (``model``, ``messages``, ``temperature: 0``, ``response_format``: the
reply's exact schema as structured outputs, see below), one claim per request, every passage
verbatim inside nonce-tagged delimiters (:mod:`monitor.judges.prompts`). The model's message
content must be a JSON object ``{"entailed": true|false, "reason": "…"}`` (a ```json fence and
surrounding whitespace are tolerated); anything else is an invalid reply.
``Authorization: Bearer <key>`` is sent only when a key is set, and the key comes from
:data:`API_KEY_ENV` unless passed in.

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
* the API key never appears in logs, reprs, error messages or metrics; nor do credentials in
  the base URL (``http://user:key@host/v1`` is sent as HTTP Basic auth and shown without them),
  nor an ``Authorization`` value a server echoes back in an error body;
* a reply with a repeated JSON key (``{"entailed": false, "entailed": true}``) is invalid, not
  read as whichever copy the JSON parser keeps.

httpx errors are mapped to citemon's in one place, :meth:`HTTPJudge._send`.

Structured outputs: every JSON request asks for ``{"type": "json_schema", "json_schema":
{"name": …, "strict": true, "schema": …}}`` with the exact reply schema of
:mod:`monitor.judges.prompts`. A server that refuses it — HTTP 400 or 422 whose body names
``response_format`` or a schema (OpenAI models without structured outputs: 400
``invalid_request_error``, param ``response_format``; llama-cpp-python 0.3.36's server: a pydantic
``literal_error`` at ``response_format.type``, as 422, or with FastAPI 0.165 as a 500
``internal_server_error`` quoting that validation error — a 500 counts only when it says
"validation error"; older vLLM: 400 from the same validation; a grammar backend that cannot
compile the schema: 400 naming it) — is asked again at once with ``{"type":
"json_object", "schema": …}`` (llama-cpp-python constrains decoding to that schema; servers that
do not know the key ignore it), and a refusal of that too steps down to plain ``json_object``.
The step is remembered per endpoint and model for the life of the process and logged once; the
refused request counts as an ``error`` request but not against the retry budget.

``--judge-format minicheck`` (:data:`FORMATS`) speaks MiniCheck's own prompt instead
(:func:`~monitor.judges.prompts.build_minicheck_messages`): no ``response_format``,
``max_tokens`` :data:`MINICHECK_MAX_TOKENS`, ``logprobs: true, top_logprobs:``
:data:`MINICHECK_TOP_LOGPROBS`; the reply must be ``Yes`` or ``No``
(:func:`parse_minicheck_reply`) and ``confidence`` comes from the reply token's log
probabilities. A server that refuses ``logprobs`` (400/422 naming it) is asked without them
from then on, and its verdicts have no confidence.

Invalid replies are reported to the observer by cause (:data:`monitor.errors.INVALID_REPLY_CAUSES`,
``invalid_reply(cause)`` when the observer has it): ``citemon_judge_invalid_replies_total{cause}``.

Wire contract v2 (:class:`HTTPBatchJudge`, ``--judge-protocol v2``) keeps all of the above and adds
the two batch requests of :mod:`monitor.judges.batch`, several claims per request, each claim
tagged with an ID the request assigns (``c1``, ``c2``, …). The reply must be a JSON object
``{"verdicts": [{"claim": "c1", …}, …]}``; a reply that is not such an object is invalid as a
whole. Inside it, each claim is judged on its own entry: a claim with no entry, two entries or an
invalid one is *invalid for that claim only*, and entries naming no claim of the request are
ignored. Only the claims left without a valid verdict are asked again, in a new request (fresh
nonce, claims numbered afresh), within the same retry budget as failed requests; claims still
without one then get a :class:`JudgeInvalidReply` (``unjudged``), while the others keep theirs.
A reply that leaves any claim without a verdict counts as outcome ``invalid`` for the observer.
Verdicts are cached per claim (the key holds the protocol and prompt version, the request kind,
the claim and the sorted passages), so only claims not cached are sent.
"""

from __future__ import annotations

import asyncio
import base64
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any, Final, Generic, Literal, TypeVar, cast

import httpx

from monitor.errors import (
    INVALID_REPLY_CAUSES,
    ConfigError,
    JudgeError,
    JudgeHTTPError,
    JudgeInvalidReply,
    JudgeRateLimited,
    JudgeTimeout,
)
from monitor.judges.base import JudgeObserver
from monitor.judges.batch import CitedOutcome, CitedVerdict, SupportOutcome, SupportVerdict
from monitor.judges.prompts import (
    PROMPT_VERSION,
    PROMPT_VERSION_MINICHECK,
    PROMPT_VERSION_V2,
    Message,
    Schema,
    build_cited_messages,
    build_decompose_messages,
    build_entailment_messages,
    build_minicheck_messages,
    build_support_messages,
    cited_schema,
    decompose_schema,
    entailment_schema,
    support_schema,
)
from monitor.records import Verdict

__all__ = [
    "API_KEY_ENV",
    "FORMATS",
    "INVALID_REPLY_CAUSES",
    "MINICHECK_MAX_TOKENS",
    "MINICHECK_TOP_LOGPROBS",
    "PROTOCOLS",
    "BatchReply",
    "HTTPBatchJudge",
    "HTTPJudge",
    "ReplyFormat",
    "WireProtocol",
    "parse_cited_reply",
    "parse_decompose_reply",
    "parse_entailment_reply",
    "parse_minicheck_reply",
    "parse_retry_after",
    "parse_support_reply",
]

API_KEY_ENV: Final = "CITEMON_JUDGE_API_KEY"
"""Environment variable holding the judge's API key (default: unset, no ``Authorization``)."""
DEFAULT_MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
"""A chat completion carrying verdicts is a few kB; past this a reply is read no further."""
MINICHECK_MAX_TOKENS: Final = 1
"""``max_tokens`` of a MiniCheck request: the answer is one token, ``Yes`` or ``No`` (MiniCheck's
own inference code asks for exactly one)."""
MINICHECK_TOP_LOGPROBS: Final = 5
"""``top_logprobs`` of a MiniCheck request (MiniCheck's own code asks vLLM for 5)."""

logger = logging.getLogger(__name__)

WireProtocol = Literal["v1", "v2"]
"""A judge wire contract version (``--judge-protocol``)."""

PROTOCOLS: Final[tuple[WireProtocol, ...]] = ("v1", "v2")

ReplyFormat = Literal["json", "minicheck"]
"""What the http judge asks for (``--judge-format``): citemon's JSON verdicts, or MiniCheck's."""

FORMATS: Final[tuple[ReplyFormat, ...]] = ("json", "minicheck")

# What a request asks of the server, best first; a refusal steps to the next (see the docstring).
_LADDERS: Final[dict[ReplyFormat, tuple[str, ...]]] = {
    "json": ("json_schema", "json_object+schema", "json_object"),
    "minicheck": ("logprobs", "plain"),
}
# Words in a 400/422 body that say the server refused that rung (lower-cased).
_REFUSAL_WORDS: Final[dict[str, tuple[str, ...]]] = {
    "json_schema": ("response_format", "schema"),
    "json_object+schema": ("response_format", "schema"),
    "logprobs": ("logprobs",),
}
# (endpoint URL without credentials, model, format) → rung in use; shared by every judge.
_rungs: dict[tuple[str, str, ReplyFormat], int] = {}

_T = TypeVar("_T")
_V = TypeVar("_V", CitedVerdict, SupportVerdict)
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
_SNIPPET_CHARS = 200
# A credential a server echoes back ("authorization": "Bearer sk-…"), whatever key it holds.
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[^\s\"',;}]+")


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "…"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            # Two values for one key: which one the model meant is a guess, so neither is used.
            raise JudgeInvalidReply(f"reply repeats the key {_snippet(key)!r}")
        seen.add(key)
    return dict(pairs)


def _json_object(content: str) -> dict[str, Any]:
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        # strict=False: a raw control character inside a string (a model's literal newline or
        # tab in "reason"; llama.cpp's JSON grammar lets any byte through) leaves the verdict
        # unambiguous, so it is not a reason to lose it.
        value = json.loads(text, object_pairs_hook=_unique_keys, strict=False)
    except (ValueError, RecursionError) as exc:
        raise JudgeInvalidReply(
            f"reply is not JSON: {_snippet(content)!r}", cause="not_json"
        ) from exc
    if not isinstance(value, dict):
        raise JudgeInvalidReply(
            f"reply is not a JSON object: {_snippet(content)!r}", cause="not_json"
        )
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


_YES_NO = re.compile(r"\A[\s\"'*`]*(yes|no)\b[\s.!\"'*`]*\Z", re.IGNORECASE)


def _probability(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return math.exp(min(0.0, value))  # a logprob above 0 is rounding: probability 1


def _minicheck_confidence(logprobs: object, answer: str) -> float | None:
    """The probability of ``answer`` (``yes``/``no``) at the first Yes/No token of the reply,
    renormalised over Yes and No among its ``top_logprobs``; None when the server sent none."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        token = entry["token"].strip().lower()
        if not token:
            continue  # a leading space or newline token
        if token not in ("yes", "no"):
            return None
        mass = {"yes": 0.0, "no": 0.0}
        seen: set[str] = set()
        top = entry.get("top_logprobs")
        for alt in top if isinstance(top, list) else []:
            if not isinstance(alt, dict) or not isinstance(alt.get("token"), str):
                continue
            word = alt["token"].strip().lower()
            p = _probability(alt.get("logprob"))
            if word in mass and p is not None and alt["token"] not in seen:
                seen.add(alt["token"])
                mass[word] += p
        if mass["yes"] + mass["no"] > 0:
            return round(mass[answer] / (mass["yes"] + mass["no"]), 6)
        p = _probability(entry.get("logprob"))
        return None if p is None or token != answer else round(p, 6)
    return None


def parse_minicheck_reply(content: str, logprobs: object = None) -> Verdict:
    """The verdict in a MiniCheck reply: ``Yes`` (entailed) or ``No``, else JudgeInvalidReply.

    Case, surrounding blanks, quotes, markdown emphasis and a full stop are tolerated; any other
    word is invalid. ``logprobs`` is the choice's ``logprobs`` object (OpenAI shape); with it,
    ``confidence`` is the probability of the answer given (see :func:`_minicheck_confidence`).
    """
    found = _YES_NO.match(content)
    if not found:
        raise JudgeInvalidReply(
            f"reply is not Yes or No: {_snippet(content)!r}", cause="not_yes_no"
        )
    answer = found.group(1).lower()
    return Verdict(
        entailed=answer == "yes",
        reason=f"MiniCheck: {found.group(1)}",
        confidence=_minicheck_confidence(logprobs, answer),
    )


@dataclass(frozen=True, slots=True)
class _Choice:
    """The parts of a chat completion's first choice a parser reads."""

    content: str
    finish_reason: object = None
    logprobs: object = None


@dataclass(frozen=True, slots=True)
class _Request:
    """One logical request: its messages, and the reply schema (None: a MiniCheck request)."""

    messages: list[Message]
    schema: Schema | None


def _content(parse: Callable[[str], _T]) -> Callable[[_Choice], _T]:
    return lambda choice: parse(choice.content)


def _minicheck(choice: _Choice) -> Verdict:
    return parse_minicheck_reply(choice.content, choice.logprobs)


@dataclass(slots=True)
class BatchReply(Generic[_V]):
    """A v2 reply taken apart: valid verdicts and, per claim ID, why it has none (``problems``)."""

    verdicts: dict[str, _V] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def cause(self) -> str:
        """The ``citemon_judge_invalid_replies_total`` cause of a reply with problems: entries
        missing or doubled only → ``missing_claims``; any mistyped entry → ``schema``."""
        only_missing = all(p in _MISSING for p in self.problems.values())
        return "missing_claims" if only_missing else "schema"


_NO_ENTRY: Final = "no entry for the claim"
_TWO_ENTRIES: Final = "two entries for one claim"
_MISSING: Final = (_NO_ENTRY, _TWO_ENTRIES)


def _entries(content: str, claims: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each asked claim's entry in a v2 reply, or why it has no usable one."""
    obj = _json_object(content)
    listed = obj.get("verdicts")
    if not isinstance(listed, list):
        raise JudgeInvalidReply(f'"verdicts" is not a list: {_snippet(content)!r}')
    asked = set(claims)
    entries: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    for entry in listed:
        cid = entry.get("claim") if isinstance(entry, dict) else None
        if not isinstance(cid, str) or cid not in asked:
            continue  # an extra entry: nothing to attribute it to
        if cid in entries or cid in problems:
            entries.pop(cid, None)
            problems[cid] = _TWO_ENTRIES
            continue
        entries[cid] = entry
    for cid in claims:
        if cid not in entries and cid not in problems:
            problems[cid] = _NO_ENTRY
    return entries, problems


def _ids(entry: dict[str, Any], name: str, shown: list[str]) -> tuple[str, ...]:
    value = entry.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'"{name}" is not a list of passage IDs')
    unknown = [v for v in value if v not in shown]
    if unknown:
        raise ValueError(f'"{name}" names passages not shown: {", ".join(unknown[:3])}')
    return tuple(p for p in shown if p in value)  # the shown order, without repeats


def _reason(entry: dict[str, Any]) -> str | None:
    reason = entry.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError('"reason" is not a string')
    return reason


def parse_cited_reply(
    content: str, *, claims: list[str], passages: list[str], precision: bool
) -> BatchReply[CitedVerdict]:
    """A v2 citation-check reply for the claim IDs ``claims`` over the passage IDs ``passages``.

    Per entry: ``entailed`` must be a JSON boolean, ``reason`` a string or absent, a
    ``confidence`` in [0, 1] is kept. With ``precision``, an entailed claim's entry must also
    carry ``supported_by`` and ``dispensable``, lists of shown passage IDs (possibly empty);
    otherwise those fields are ignored. Raises :class:`JudgeInvalidReply` only when the reply as
    a whole is unusable.
    """
    entries, problems = _entries(content, claims)
    reply: BatchReply[CitedVerdict] = BatchReply(problems=problems)
    for cid, entry in entries.items():
        try:
            entailed = entry.get("entailed")
            if not isinstance(entailed, bool):
                raise ValueError('"entailed" is not a boolean')
            reason = _reason(entry)
            confidence = entry.get("confidence")
            if (
                isinstance(confidence, bool)
                or not isinstance(confidence, int | float)
                or not 0.0 <= confidence <= 1.0
            ):
                confidence = None
            alone = spare = None
            if precision and entailed:
                alone = _ids(entry, "supported_by", passages)
                spare = _ids(entry, "dispensable", passages)
        except ValueError as exc:
            reply.problems[cid] = str(exc)
            continue
        reply.verdicts[cid] = CitedVerdict(
            entailed=entailed,
            reason=reason,
            confidence=confidence,
            supported_by=alone,
            dispensable=spare,
        )
    return reply


def parse_support_reply(
    content: str, *, claims: list[str], passages: list[str]
) -> BatchReply[SupportVerdict]:
    """A v2 support-search reply: per claim ``supported_by`` (shown IDs) and ``joint`` (bool)."""
    entries, problems = _entries(content, claims)
    reply: BatchReply[SupportVerdict] = BatchReply(problems=problems)
    for cid, entry in entries.items():
        try:
            joint = entry.get("joint")
            if not isinstance(joint, bool):
                raise ValueError('"joint" is not a boolean')
            verdict = SupportVerdict(
                supported_by=_ids(entry, "supported_by", passages),
                joint=joint,
                reason=_reason(entry),
            )
        except ValueError as exc:
            reply.problems[cid] = str(exc)
            continue
        reply.verdicts[cid] = verdict
    return reply


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
    ``cache_size`` entries (0 disables the cache). ``reply_format`` is ``json`` (citemon's
    prompts, structured outputs) or ``minicheck`` (MiniCheck's prompt; ``entails`` only, and
    ``decompose`` still sends the JSON decomposition prompt). Pass ``client`` to share an
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
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        api_key: str | None = None,
        reply_format: ReplyFormat = "json",
        observer: JudgeObserver | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if reply_format not in FORMATS:
            raise ConfigError(f"the judge format must be json or minicheck, not {reply_format!r}")
        self._format: ReplyFormat = reply_format
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
        if cache_size < 0:
            raise ConfigError(f"cache_size must be 0 or more, not {cache_size}")
        if not base_url.strip() or not model.strip():
            raise ConfigError("the HTTP judge needs a base URL and a model name")
        try:
            parsed = httpx.URL(base_url.strip().rstrip("/"))
        except httpx.InvalidURL:
            raise ConfigError("the judge base URL is not a valid URL") from None  # may hold a key
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(
                "the judge base URL must be absolute, http:// or https:// with a host "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        # A key read from a file often ends in a newline; inside, only visible ASCII can be sent
        # (anything else makes httpx raise with the header, key included, in its message).
        self._api_key = (key or "").strip() or None
        if self._api_key and not all("!" <= ch <= "~" for ch in self._api_key):
            raise ConfigError(
                f"the judge API key ({API_KEY_ENV}) holds a space, control or non-ASCII "
                "character, which an HTTP header cannot carry (the key is not shown)"
            )
        # Credentials in the URL become Basic auth; the URL kept and shown is without them.
        self._auth: httpx.BasicAuth | None = None
        secrets = [self._api_key or ""]
        if parsed.userinfo:
            user, password = parsed.username, parsed.password
            self._auth = httpx.BasicAuth(user, password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            raw_password = parsed.userinfo.decode("ascii").partition(":")[2]
            secrets += [password, raw_password, token]
            parsed = parsed.copy_with(username=None, password=None)
        self._secrets = tuple(sorted({x for x in secrets if x}, key=len, reverse=True))
        self._base_url = str(parsed)
        # The path gets the endpoint; a query string (`?api-version=…`) stays after it.
        self._url = str(parsed.copy_with(path=parsed.path.rstrip("/") + "/chat/completions"))
        # What messages and logs show: no credentials, no query string (`?api-key=…`).
        self._shown_base = str(parsed.copy_with(query=None, fragment=None))
        self._shown_url = f"{self._shown_base}/chat/completions"
        self._model = model
        self._max_inflight = max_inflight
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._cache_size = cache_size
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

    protocol: WireProtocol = "v1"
    """The wire contract this judge speaks (v1: ``entails`` and ``decompose`` only)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self._shown_base!r}, model={self._model!r}, "
            f"max_inflight={self._max_inflight}, timeout_s={self._timeout_s:g}, "
            f"retries={self._retries}, protocol={self.protocol!r}, format={self._format!r}, "
            f"api_key={'***' if self._api_key else None!r})"
        )

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """Whether ``passages`` (ID → text), taken together, entail ``claim``.

        Raises a :class:`~monitor.errors.JudgeError` subclass when no valid verdict could be
        had within the retry budget. No passages entail nothing, so that costs no request.
        """
        if not passages:
            return Verdict(entailed=False, reason="no passages were shown")
        if self._format == "minicheck":
            # MiniCheck reads the passages as one document in the order given: that order is
            # part of what it sees, so it is part of the key (no sorting).
            key = self._key("minicheck", claim, list(passages.items()), PROMPT_VERSION_MINICHECK)
            request = _Request(build_minicheck_messages(claim, passages), None)
            return await self._cached(key, lambda: self._call(request, _minicheck))
        key = self._key("entails", claim, sorted(passages.items()))
        return await self._cached(
            key,
            lambda: self._call(
                _Request(build_entailment_messages(claim, passages), entailment_schema()),
                _content(parse_entailment_reply),
            ),
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
            lambda: self._call(
                _Request(build_decompose_messages(sentence), decompose_schema()),
                _content(parse_decompose_reply),
            ),
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

    def _key(
        self, kind: str, text: str, passages: list[tuple[str, str]], version: str | None = None
    ) -> str:
        version = PROMPT_VERSION if version is None else version  # looked up now, not at import
        payload = json.dumps([kind, self._model, version, text, passages], ensure_ascii=False)
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

    @property
    def reply_format(self) -> ReplyFormat:
        return self._format

    @property
    def response_format(self) -> str:
        """What this judge's endpoint is asked for now: ``json_schema``, ``json_object+schema``
        or ``json_object`` (format ``json``), ``logprobs`` or ``plain`` (format ``minicheck``)."""
        ladder = _LADDERS[self._format]
        return ladder[_rungs.get(self._endpoint, 0)]

    @property
    def confidence_means(self) -> str | None:
        """What a verdict's ``confidence`` is, for ``citemon calibrate``'s ROC and threshold:
        MiniCheck's is the probability of the answer it gave (``"verdict"``); the JSON format
        gives none."""
        return "verdict" if self._format == "minicheck" else None

    @property
    def _endpoint(self) -> tuple[str, str, ReplyFormat]:
        return (self._shown_url, self._model, self._format)

    def _body(self, request: _Request, rung: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": request.messages,
            "temperature": 0,
        }
        if request.schema is None:  # MiniCheck: a one-token answer and its probabilities
            body["max_tokens"] = MINICHECK_MAX_TOKENS
            if rung == "logprobs":
                body |= {"logprobs": True, "top_logprobs": MINICHECK_TOP_LOGPROBS}
            return body
        name, schema = request.schema
        if rung == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        elif rung == "json_object+schema":
            body["response_format"] = {"type": "json_object", "schema": schema}
        else:
            body["response_format"] = {"type": "json_object"}
        return body

    def _refused(self, rung: str, response: httpx.Response) -> bool:
        """Whether ``response`` refuses what ``rung`` asked for (see the module docstring)."""
        words = _REFUSAL_WORDS.get(rung)
        status = response.status_code
        if words is None or status not in (400, 422, 500):
            return False
        text = response.text.lower()
        if status == 500 and "validation error" not in text:
            return False  # a 500 is the server failing, unless it is a request validation error
        return any(word in text for word in words)

    def _step_down(self, rung: str, response: httpx.Response) -> None:
        ladder = _LADDERS[self._format]
        index = ladder.index(rung)
        if _rungs.get(self._endpoint, 0) > index:
            return  # another call stepped down already (and logged it)
        _rungs[self._endpoint] = index + 1
        logger.warning(
            "judge at %s (model %r) refused %s (HTTP %d: %r); asking for %s from now on",
            self._shown_url,
            self._model,
            rung,
            response.status_code,
            _snippet(self._redact(response.text)),
            ladder[index + 1],
        )

    async def _call(self, request: _Request, parse: Callable[[_Choice], _T]) -> _T:
        attempt = 0
        while True:
            await self._wait_not_before()
            try:
                return await self._attempt(request, parse)
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

    async def _attempt(self, request: _Request, parse: Callable[[_Choice], _T]) -> _T:
        """One attempt: a request, and again at once one step down if the server refused what
        it asked for (a refusal is the server's capability, not a failure to retry)."""
        while True:
            refused: list[tuple[str, httpx.Response]] = []
            result = await self._send(request, parse, refused)
            if not refused:
                return cast(_T, result)
            self._step_down(*refused[0])

    async def _send(
        self,
        request: _Request,
        parse: Callable[[_Choice], _T],
        refused: list[tuple[str, httpx.Response]],
    ) -> _T | None:
        """One HTTP request under the in-flight cap: the single httpx → citemon error boundary.

        What to ask for is chosen once the request holds its slot, so requests queued behind a
        refusal already use the step down. A refusal is appended to ``refused`` (with the rung
        refused) and None returned instead of raised.
        """
        auth: dict[str, Any] = {} if self._auth is None else {"auth": self._auth}
        async with self._semaphore:
            rung = self.response_format
            body = self._body(request, rung)
            self._observe_inflight(+1)
            started = time.perf_counter()
            outcome = "error"
            try:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        response = await self._post(body, auth)
                except (TimeoutError, httpx.TimeoutException) as exc:
                    raise JudgeTimeout(
                        f"judge at {self._shown_url} did not answer within {self._timeout_s:g}s"
                    ) from exc
                except httpx.TransportError as exc:
                    raise JudgeHTTPError(
                        f"judge at {self._shown_url} failed: {type(exc).__name__}: "
                        f"{self._redact(str(exc))}"
                    ) from exc
                if rung != _LADDERS[self._format][-1] and self._refused(rung, response):
                    refused.append((rung, response))
                    return None  # outcome stays "error": the request did fail
                result = self._read(response, parse)
                # A v2 reply that leaves some claims without a verdict is an invalid reply too.
                if isinstance(result, BatchReply) and result.problems:
                    outcome = "invalid"
                    self._observe_invalid(result.cause)
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
                if self._observer is not None:
                    self._observer.request_done(outcome, time.perf_counter() - started)

    async def _post(self, body: dict[str, Any], auth: dict[str, Any]) -> httpx.Response:
        """POST ``body`` and read the reply, at most ``max_reply_bytes`` of it: a broken proxy
        or a runaway model must not make one request hold gigabytes in a long-lived monitor."""
        request = self._client.build_request("POST", self._url, json=body, headers=self._headers)
        response = await self._client.send(request, stream=True, **auth)
        try:
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > self._max_reply_bytes:
                    raise JudgeInvalidReply(
                        f"judge at {self._shown_url} sent a reply over "
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

    def _read(self, response: httpx.Response, parse: Callable[[_Choice], _T]) -> _T:
        status = response.status_code
        if status == 429:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise JudgeRateLimited(
                f"judge at {self._shown_url} is rate limiting (HTTP 429, Retry-After "
                f"{'unset' if retry_after is None else f'{retry_after:g}s'})",
                retry_after_s=retry_after,
            )
        if not 200 <= status < 300:
            raise JudgeHTTPError(
                f"judge at {self._shown_url} returned HTTP {status}: "
                f"{_snippet(self._redact(response.text))!r}",
                status=status,
            )
        try:
            choice = response.json()["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise JudgeInvalidReply(
                f"judge at {self._shown_url} sent no chat completion: "
                f"{_snippet(self._redact(response.text))!r}",
                cause="not_completion",
            ) from exc
        if not isinstance(content, str):
            raise JudgeInvalidReply(
                f"judge at {self._shown_url} sent no message content", cause="not_completion"
            )
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        try:
            return parse(_Choice(content, finish, choice.get("logprobs")))
        except JudgeInvalidReply as exc:
            if finish != "length":
                raise
            # Cut off by max_tokens or the context: the cause to fix is the length, not the model.
            raise JudgeInvalidReply(
                f"reply cut off (finish_reason length): {exc}", cause="truncated"
            ) from exc

    def _redact(self, text: str) -> str:
        # A misbehaving server may echo request headers back in an error body, and a transport
        # error may quote the URL: take out every form of the credentials this judge sends.
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return _AUTH_VALUE.sub(r"\1\2***", text)

    def _observe_inflight(self, delta: int) -> None:
        if self._observer is not None:
            self._observer.inflight(delta)

    def _observe_cache(self, *, hit: bool) -> None:
        if self._observer is not None:
            self._observer.cache(hit)

    def _observe_invalid(self, cause: str) -> None:
        report = getattr(self._observer, "invalid_reply", None)  # optional in the protocol
        if report is not None:
            report(cause)


class HTTPBatchJudge(HTTPJudge):
    """An :class:`HTTPJudge` that also speaks wire contract v2 (a :class:`~.batch.BatchJudge`).

    Everything about limits, retries, the cache, the observer and the key is shared with v1;
    ``entails`` and ``decompose`` still send v1 requests (``citemon calibrate`` asks one pair at
    a time). The scorer sees the batch methods and uses them instead of ``entails``.
    """

    protocol: WireProtocol = "v2"

    def __init__(self, base_url: str, model: str, **kwargs: Any) -> None:
        if kwargs.get("reply_format", "json") != "json":
            raise ConfigError(
                "--judge-format minicheck asks one claim per request: use --judge-protocol v1"
            )
        super().__init__(base_url, model, **kwargs)

    async def check_citations(
        self, claims: Sequence[str], passages: Mapping[str, str], *, precision: bool
    ) -> list[CitedOutcome]:
        """Whether ``passages`` (one citation set) entail each claim: one request for all.

        ``precision`` is asked only of two or more passages (one passage is its own answer).
        """
        if not passages:
            return [CitedVerdict(entailed=False, reason="no passages were shown")] * len(claims)
        precise = precision and len(passages) > 1
        kind = "cited+precision" if precise else "cited"
        shown = list(passages)

        def messages(ids: Mapping[str, str]) -> _Request:
            return _Request(
                build_cited_messages(ids, passages, precision=precise),
                cited_schema(list(ids), shown, precision=precise),
            )

        def parse(content: str, ids: list[str]) -> BatchReply[CitedVerdict]:
            return parse_cited_reply(content, claims=ids, passages=shown, precision=precise)

        return await self._batch(kind, claims, passages, messages, parse)

    async def find_support(
        self, claims: Sequence[str], passages: Mapping[str, str]
    ) -> list[SupportOutcome]:
        """Which single passages entail each claim, and whether all jointly do: one request."""
        if not passages:
            return [SupportVerdict(supported_by=(), joint=False)] * len(claims)
        shown = list(passages)

        def messages(ids: Mapping[str, str]) -> _Request:
            return _Request(build_support_messages(ids, passages), support_schema(list(ids), shown))

        def parse(content: str, ids: list[str]) -> BatchReply[SupportVerdict]:
            return parse_support_reply(content, claims=ids, passages=shown)

        return await self._batch("support", claims, passages, messages, parse)

    async def _batch(
        self,
        kind: str,
        claims: Sequence[str],
        passages: Mapping[str, str],
        messages: Callable[[Mapping[str, str]], _Request],
        parse: Callable[[str, list[str]], BatchReply[_V]],
    ) -> list[_V | JudgeError]:
        """Cached claims from the cache, the rest in one request (shared with identical ones)."""
        items = sorted(passages.items())
        keys = {c: self._key(kind, c, items, PROMPT_VERSION_V2) for c in dict.fromkeys(claims)}
        done: dict[str, _V | JudgeError] = {}
        for claim, key in keys.items():
            if key in self._cache:
                self._cache.move_to_end(key)
                done[claim] = cast(_V, self._cache[key])
            self._observe_cache(hit=claim in done)
        ask = [c for c in keys if c not in done]
        if ask:
            flight = self._key(f"{kind}-batch", json.dumps(ask), items, PROMPT_VERSION_V2)
            got = await self._single_flight(flight, lambda: self._ask(ask, messages, parse))
            for claim, outcome in got.items():
                done[claim] = outcome
                if not isinstance(outcome, JudgeError):
                    self._store(keys[claim], outcome)
        return [done[c] for c in claims]

    async def _single_flight(
        self, key: str, call: Callable[[], Awaitable[dict[str, _V | JudgeError]]]
    ) -> dict[str, _V | JudgeError]:
        fut = self._pending.get(key)
        if fut is None:
            fut = asyncio.ensure_future(call())
            self._pending[key] = fut
            fut.add_done_callback(partial(self._forget, key))
        return cast(dict[str, _V | JudgeError], await asyncio.shield(fut))

    def _forget(self, key: str, fut: asyncio.Future[Any]) -> None:
        if self._pending.get(key) is fut:
            del self._pending[key]

    def _store(self, key: str, value: object) -> None:
        if self._cache_size:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    async def _ask(
        self,
        claims: list[str],
        messages: Callable[[Mapping[str, str]], _Request],
        parse: Callable[[str, list[str]], BatchReply[_V]],
    ) -> dict[str, _V | JudgeError]:
        """Ask for ``claims``; re-ask only the ones left without a valid verdict, then give up.

        One retry budget covers both failed requests and claims missing from a reply.
        """
        out: dict[str, _V | JudgeError] = {}
        pending = claims
        attempt = 0
        while True:
            await self._wait_not_before()
            ids = {f"c{n}": claim for n, claim in enumerate(pending, 1)}
            error: JudgeError
            try:
                reply = await self._attempt(messages(ids), partial(_parse_for, parse, list(ids)))
            except JudgeError as exc:
                if not exc.retriable or attempt >= self._retries:
                    return out | dict.fromkeys(pending, exc)
                error = exc
            else:
                for cid, verdict in reply.verdicts.items():
                    out[ids[cid]] = verdict
                if not reply.problems:
                    return out
                pending = [ids[cid] for cid in ids if cid in reply.problems]
                why = {ids[cid]: p for cid, p in reply.problems.items()}
                if attempt >= self._retries:
                    return out | {
                        c: JudgeInvalidReply(
                            f"no valid verdict for the claim: {why[c]}", cause=reply.cause
                        )
                        for c in pending
                    }
                error = JudgeInvalidReply(
                    f"{len(pending)} of {len(ids)} claims without a valid verdict "
                    f"({next(iter(why.values()))})",
                    cause=reply.cause,
                )
            delay = self._backoff(attempt, error)
            logger.debug(
                "judge batch attempt %d/%d: %s; asking %d claims again in %.3fs",
                attempt + 1,
                self._retries + 1,
                error,
                len(pending),
                delay,
            )
            attempt += 1
            await asyncio.sleep(delay)


def _parse_for(
    parse: Callable[[str, list[str]], BatchReply[_V]], ids: list[str], choice: _Choice
) -> BatchReply[_V]:
    return parse(choice.content, ids)
