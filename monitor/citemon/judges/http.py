"""The HTTP judge: an OpenAI-compatible chat model behind wire contract v1 (or v2).

A judge is handed an :class:`~citemon.judges.transport.HTTPTransport` (limits, retries,
secrets), as an ``httpx.Client`` takes ``transport=``, and speaks through it with a
:class:`ChatWire`: citemon's JSON verdicts, or MiniCheck's Yes/No (``--judge-format
minicheck``), one wire whose reply format decides what a request asks for. What it asked
before is remembered in its :class:`~citemon.judges.cache.ReplyCache`. :class:`HTTPJudge` asks
one claim per request (v1); :class:`HTTPBatchJudge` adds v2's batches, composed from an
:class:`HTTPJudge` (for ``entails`` and ``decompose``) and the same transport, wire and cache,
not derived from it. The contracts themselves (the request, the reply, the response-format step
down, v2's per-claim validity) are stated in ``docs/judges.md``; the prompts are
:mod:`citemon.judges.prompts` and the reading of replies :mod:`citemon.judges.replies`.

A v2 reply is judged per claim: only the claims left without a valid verdict are asked again,
in a new request (fresh nonce, claims numbered afresh), within the one retry budget; the others
keep theirs, so a model that drops one claim of twenty costs one claim, not twenty.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Generic, Literal, Self, TypeVar, cast

import httpx

from citemon._core.errors import ConfigError, JudgeError, JudgeInvalidReply
from citemon._core.judge import CitedOutcome, CitedVerdict, SupportOutcome, SupportVerdict
from citemon._core.records import Verdict
from citemon.judges.cache import ReplyCache, question_key
from citemon.judges.prompts import (
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
from citemon.judges.replies import (
    BatchReply,
    Choice,
    parse_batch_for,
    parse_cited_reply,
    parse_content,
    parse_decompose_reply,
    parse_entailment_reply,
    parse_minicheck_choice,
    parse_support_reply,
    snippet,
)
from citemon.judges.transport import (
    Exchange,
    HTTPTransport,
    Refused,
    Site,
    raise_for_status,
)

__all__ = [
    "FORMATS",
    "MINICHECK_MAX_TOKENS",
    "MINICHECK_TOP_LOGPROBS",
    "PROTOCOLS",
    "ChatRequest",
    "ChatWire",
    "HTTPBatchJudge",
    "HTTPJudge",
    "ReplyFormat",
    "WireProtocol",
]

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

# What a request asks of the server, best first; a refusal steps to the next (docs/judges.md,
# "Structured outputs").
_LADDERS: Final[dict[ReplyFormat, tuple[str, ...]]] = {
    "json": ("json_schema", "json_object+schema", "json_object"),
    "minicheck": ("logprobs", "plain"),
}
# Words in a 400/422 body that say the server refused that rung (lower-cased): OpenAI's 400
# `invalid_request_error` (param `response_format`), vLLM's 400 from a schema its grammar backend
# cannot compile, llama-cpp-python 0.3.36's 422 `literal_error` at `response_format.type` (a 500
# quoting that validation error under FastAPI 0.165).
_REFUSAL_WORDS: Final[dict[str, tuple[str, ...]]] = {
    "json_schema": ("response_format", "schema"),
    "json_object+schema": ("response_format", "schema"),
    "logprobs": ("logprobs",),
}
# (endpoint URL without credentials, model, format) → rung in use; shared by every judge.
_rungs: dict[tuple[str, str, ReplyFormat], int] = {}

_T = TypeVar("_T")
_V = TypeVar("_V", CitedVerdict, SupportVerdict)


@dataclass(frozen=True, slots=True)
class ChatRequest(Generic[_T]):
    """One logical chat request: its messages, the reply's schema (None: a MiniCheck request)
    and how the model's message reads."""

    messages: list[Message]
    schema: Schema | None
    parse: Callable[[Choice], _T]


class _Ladder:
    """The response formats of one reply format, best first, and the rung an endpoint and model
    are at: shared by every judge of the process, so a refusal is learned (and logged) once."""

    def __init__(self, reply_format: ReplyFormat) -> None:
        self.format: ReplyFormat = reply_format
        self.rungs = _LADDERS[reply_format]

    def now(self, site: Site) -> str:
        return self.rungs[_rungs.get(self._where(site), 0)]

    def _where(self, site: Site) -> tuple[str, str, ReplyFormat]:
        return (site.url, site.model, self.format)

    def refused(self, rung: str, response: httpx.Response) -> bool:
        """Whether ``response`` refuses what ``rung`` asked for."""
        if rung == self.rungs[-1]:
            return False  # nothing left to step down to
        words = _REFUSAL_WORDS.get(rung)
        status = response.status_code
        if words is None or status not in (400, 422, 500):
            return False
        text = response.text.lower()
        if status == 500 and "validation error" not in text:
            return False  # a 500 is the server failing, unless it is a request validation error
        return any(word in text for word in words)

    def step_down(self, rung: str, response: httpx.Response, site: Site) -> None:
        index = self.rungs.index(rung)
        where = self._where(site)
        if _rungs.get(where, 0) > index:
            return  # another call stepped down already (and logged it)
        _rungs[where] = index + 1
        logger.warning(
            "judge at %s (model %r) refused %s (HTTP %d: %r); asking for %s from now on",
            site.url,
            site.model,
            rung,
            response.status_code,
            snippet(site.redact(response.text)),
            self.rungs[index + 1],
        )


def _read_choice(response: httpx.Response, site: Site, parse: Callable[[Choice], _T]) -> _T:
    """A 2xx chat completion's first choice, through ``parse``; raises JudgeInvalidReply."""
    try:
        choice = response.json()["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, LookupError, TypeError) as exc:
        raise JudgeInvalidReply(
            f"judge at {site.url} sent no chat completion: {snippet(site.redact(response.text))!r}",
            cause="not_completion",
        ) from exc
    if not isinstance(content, str):
        raise JudgeInvalidReply(
            f"judge at {site.url} sent no message content", cause="not_completion"
        )
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    try:
        return parse(Choice(content, finish, choice.get("logprobs")))
    except JudgeInvalidReply as exc:
        if finish != "length":
            raise
        # Cut off by max_tokens or the context: the cause to fix is the length, not the model.
        raise JudgeInvalidReply(
            f"reply cut off (finish_reason length): {exc}", cause="truncated"
        ) from exc


def _read(
    ladder: _Ladder,
    rung: str,
    site: Site,
    parse: Callable[[Choice], _T],
    response: httpx.Response,
) -> _T:
    if ladder.refused(rung, response):
        ladder.step_down(rung, response, site)
        raise Refused(rung)
    raise_for_status(response, site)
    return _read_choice(response, site, parse)


def _batch_problem(result: object) -> str | None:
    # A v2 reply that leaves some claims without a verdict is an invalid reply too.
    return result.cause if isinstance(result, BatchReply) and result.problems else None


class ChatWire:
    """``POST chat/completions`` in one reply format, stepping down where a server refuses.

    ``json``: citemon's JSON verdicts, asking for the reply's exact schema as structured outputs
    (``json_schema``), then ``json_object`` with the schema, then plain ``json_object``.
    ``minicheck``: a one-token Yes/No answer and its log probabilities, then without them; a
    request with a schema (``--decompose llm``) asks a MiniCheck server for a plain
    ``json_object``, never for structured outputs.
    """

    endpoint = "chat/completions"

    def __init__(self, reply_format: ReplyFormat = "json") -> None:
        if reply_format not in FORMATS:
            raise ConfigError(f"the judge format must be json or minicheck, not {reply_format!r}")
        self.reply_format: ReplyFormat = reply_format
        self.ladder = _Ladder(reply_format)

    def __repr__(self) -> str:
        return f"ChatWire({self.reply_format!r})"

    def exchange(self, request: ChatRequest[_T], site: Site) -> Exchange[_T]:
        rung = self.ladder.now(site)
        body: dict[str, Any] = {
            "model": site.model,
            "messages": request.messages,
            "temperature": 0,
        }
        body |= self._asks(request, rung)
        return Exchange(
            body, partial(_read, self.ladder, rung, site, request.parse), _batch_problem
        )

    def _asks(self, request: ChatRequest[Any], rung: str) -> dict[str, Any]:
        """What the body asks of the server at ``rung``, beyond the messages."""
        if self.reply_format == "minicheck":
            if request.schema is not None:
                return {"response_format": {"type": "json_object"}}
            # A one-token answer, and its probabilities while the server gives them.
            asks: dict[str, Any] = {"max_tokens": MINICHECK_MAX_TOKENS}
            if rung == "logprobs":
                asks |= {"logprobs": True, "top_logprobs": MINICHECK_TOP_LOGPROBS}
            return asks
        if request.schema is None:
            raise TypeError("a json ChatWire needs a request with a reply schema")
        name, schema = request.schema
        if rung == "json_schema":
            strict = {"name": name, "strict": True, "schema": schema}
            return {"response_format": {"type": "json_schema", "json_schema": strict}}
        if rung == "json_object+schema":
            return {"response_format": {"type": "json_object", "schema": schema}}
        return {"response_format": {"type": "json_object"}}


class HTTPJudge:
    """A :class:`~citemon._core.judge.Judge` that asks an OpenAI-compatible chat endpoint.

    ``transport`` is the endpoint: its base URL is the API root (``http://localhost:8000/v1``
    for vLLM, ``…:11434/v1`` for Ollama), with the model, limits and credentials
    (``HTTPJudge(HTTPTransport("http://localhost:8000/v1", "judge"))``). ``reply_format`` is
    ``json`` (citemon's prompts, structured outputs) or ``minicheck`` (MiniCheck's prompt;
    ``entails`` only, and ``decompose`` still sends the JSON decomposition prompt). ``cache``
    remembers answers (default: a :class:`~citemon.judges.cache.ReplyCache` of the default size
    reporting to the transport's observers).

    Use ``async with HTTPJudge(...) as judge`` or call :meth:`aclose` (which closes the
    transport too).
    """

    protocol: WireProtocol = "v1"
    """The wire contract this judge speaks (v1: ``entails`` and ``decompose`` only)."""

    def __init__(
        self,
        transport: HTTPTransport,
        *,
        reply_format: ReplyFormat = "json",
        cache: ReplyCache | None = None,
    ) -> None:
        self._wire = ChatWire(reply_format)
        self._format: ReplyFormat = reply_format
        self.transport = transport
        self.cache = cache if cache is not None else ReplyCache(observers=transport.observers)

    def __repr__(self) -> str:
        fields = f"protocol={self.protocol!r}, format={self._format!r}, "
        return f"{type(self).__name__}({self.transport.describe(fields)})"

    @property
    def model(self) -> str:
        return self.transport.model

    @property
    def max_inflight(self) -> int:
        return self.transport.max_inflight

    @property
    def reply_format(self) -> ReplyFormat:
        return self._format

    @property
    def response_format(self) -> str:
        """What this judge's endpoint is asked for now: ``json_schema``, ``json_object+schema``
        or ``json_object`` (format ``json``), ``logprobs`` or ``plain`` (format ``minicheck``)."""
        return self._wire.ladder.now(self.transport.site(self._wire))

    @property
    def confidence_means(self) -> str | None:
        """What a verdict's ``confidence`` is, for ``citemon calibrate``'s ROC and threshold:
        MiniCheck's is the probability of the answer it gave (``"verdict"``); the JSON format
        gives none."""
        return "verdict" if self._format == "minicheck" else None

    async def aclose(self) -> None:
        """Cancel calls still running and close the transport."""
        await self.cache.aclose()
        await self.transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """Whether ``passages`` (ID → text), taken together, entail ``claim``.

        Raises a :class:`~citemon._core.errors.JudgeError` subclass when no valid verdict could be
        had within the retry budget. No passages entail nothing, so that costs no request.
        """
        if not passages:
            return Verdict(entailed=False, reason="no passages were shown")
        if self._format == "minicheck":
            # MiniCheck reads the passages as one document in the order given: that order is
            # part of what it sees, so it is part of the key (no sorting).
            key = self.key("minicheck", claim, list(passages.items()), PROMPT_VERSION_MINICHECK)
            messages = build_minicheck_messages(claim, passages)
            request = ChatRequest(messages, None, parse_minicheck_choice)
            return await self.cache.cached(key, lambda: self.call(request))
        key = self.key("entails", claim, sorted(passages.items()), PROMPT_VERSION)
        return await self.cache.cached(
            key,
            lambda: self.call(
                ChatRequest(
                    build_entailment_messages(claim, passages),
                    entailment_schema(),
                    parse_content(parse_entailment_reply),
                )
            ),
        )

    async def decompose(self, sentence: str) -> list[str]:
        """``sentence`` split into standalone atomic claims (``--decompose llm``).

        An empty split means the model found nothing to check; the sentence itself is returned
        so the claim is not silently lost. Raises :class:`~citemon._core.errors.JudgeError` on final
        failure (the caller falls back to the sentence).
        """
        key = self.key("decompose", sentence, [], PROMPT_VERSION)
        claims = await self.cache.cached(
            key,
            lambda: self.call(
                ChatRequest(
                    build_decompose_messages(sentence),
                    decompose_schema(),
                    parse_content(parse_decompose_reply),
                )
            ),
        )
        return list(claims) if claims else [sentence]

    def key(self, kind: str, text: str, passages: list[tuple[str, str]], version: str) -> str:
        """The cache key of a question to this judge's model."""
        return question_key(kind, self.transport.model, text, passages, version)

    async def call(self, request: ChatRequest[_T]) -> _T:
        """One logical request through the wire, within the transport's retry budget."""
        return cast(_T, await self.transport.call(request, self._wire))

    async def send(self, request: ChatRequest[_T]) -> _T:
        """One attempt of ``request`` (the caller retries: v2 re-asks only what is missing)."""
        return cast(_T, await self.transport.send(request, self._wire))


class HTTPBatchJudge:
    """An HTTP judge that also speaks wire contract v2 (a
    :class:`~citemon._core.judge.BatchJudge`), composed, not derived: an :class:`HTTPJudge`
    answers ``entails`` and ``decompose`` with v1 requests (``citemon calibrate`` asks one pair
    at a time) and the batches go through the same transport, wire and cache. The scorer sees
    the batch methods and uses them instead of ``entails``.

    ``HTTPBatchJudge(HTTPTransport(base_url, model))``; ``cache`` as :class:`HTTPJudge`'s.
    """

    protocol: WireProtocol = "v2"

    def __init__(self, transport: HTTPTransport, *, cache: ReplyCache | None = None) -> None:
        self.single = HTTPJudge(transport, cache=cache)
        self.transport = transport
        self.cache = self.single.cache

    def __repr__(self) -> str:
        fields = f"protocol={self.protocol!r}, format='json', "
        return f"HTTPBatchJudge({self.transport.describe(fields)})"

    @property
    def model(self) -> str:
        return self.transport.model

    @property
    def max_inflight(self) -> int:
        return self.transport.max_inflight

    @property
    def reply_format(self) -> ReplyFormat:
        return "json"

    @property
    def response_format(self) -> str:
        """What the endpoint is asked for now (as :attr:`HTTPJudge.response_format`)."""
        return self.single.response_format

    @property
    def confidence_means(self) -> str | None:
        """The JSON format's verdicts carry no confidence."""
        return None

    async def aclose(self) -> None:
        await self.single.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """v1's question, asked as :meth:`HTTPJudge.entails` asks it."""
        return await self.single.entails(claim, passages)

    async def decompose(self, sentence: str) -> list[str]:
        """v1's question, asked as :meth:`HTTPJudge.decompose` asks it."""
        return await self.single.decompose(sentence)

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

        def messages(ids: Mapping[str, str]) -> tuple[list[Message], Schema]:
            return (
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

        def messages(ids: Mapping[str, str]) -> tuple[list[Message], Schema]:
            return build_support_messages(ids, passages), support_schema(list(ids), shown)

        def parse(content: str, ids: list[str]) -> BatchReply[SupportVerdict]:
            return parse_support_reply(content, claims=ids, passages=shown)

        return await self._batch("support", claims, passages, messages, parse)

    async def _batch(
        self,
        kind: str,
        claims: Sequence[str],
        passages: Mapping[str, str],
        messages: Callable[[Mapping[str, str]], tuple[list[Message], Schema]],
        parse: Callable[[str, list[str]], BatchReply[_V]],
    ) -> list[_V | JudgeError]:
        """Cached claims from the cache, the rest in one request (shared with identical ones)."""
        cache, key = self.cache, self.single.key
        items = sorted(passages.items())
        keys = {c: key(kind, c, items, PROMPT_VERSION_V2) for c in dict.fromkeys(claims)}
        done: dict[str, _V | JudgeError] = {}
        for claim, k in keys.items():
            found, value = cache.lookup(k)
            if found:
                done[claim] = cast(_V, value)
        ask = [c for c in keys if c not in done]
        if ask:
            flight = key(f"{kind}-batch", json.dumps(ask), items, PROMPT_VERSION_V2)
            got = await cache.single_flight(flight, lambda: self._ask(ask, messages, parse))
            for claim, outcome in got.items():
                done[claim] = outcome
                if not isinstance(outcome, JudgeError):
                    cache.store(keys[claim], outcome)
        return [done[c] for c in claims]

    async def _ask(
        self,
        claims: list[str],
        messages: Callable[[Mapping[str, str]], tuple[list[Message], Schema]],
        parse: Callable[[str, list[str]], BatchReply[_V]],
    ) -> dict[str, _V | JudgeError]:
        """Ask for ``claims``; re-ask only the ones left without a valid verdict, then give up.

        One retry budget covers both failed requests and claims missing from a reply.
        """
        out: dict[str, _V | JudgeError] = {}
        pending = claims
        attempt = 0
        while True:
            ids = {f"c{n}": claim for n, claim in enumerate(pending, 1)}
            request = ChatRequest(*messages(ids), partial(parse_batch_for, parse, list(ids)))
            try:
                reply: BatchReply[_V] = await self.single.send(request)
            except JudgeError as exc:
                if not await self.transport.retry(attempt, exc, log=logger, what="judge batch"):
                    return out | dict.fromkeys(pending, exc)
            else:
                for cid, verdict in reply.verdicts.items():
                    out[ids[cid]] = verdict
                if not reply.problems:
                    return out
                pending = [ids[cid] for cid in ids if cid in reply.problems]
                why = {ids[cid]: p for cid, p in reply.problems.items()}
                error = JudgeInvalidReply(
                    f"{len(pending)} of {len(ids)} claims without a valid verdict "
                    f"({next(iter(why.values()))})",
                    cause=reply.cause,
                )
                if not await self.transport.retry(attempt, error, log=logger, what="judge batch"):
                    return out | {
                        c: JudgeInvalidReply(
                            f"no valid verdict for the claim: {why[c]}", cause=reply.cause
                        )
                        for c in pending
                    }
            attempt += 1
