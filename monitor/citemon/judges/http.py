"""The HTTP judge: an OpenAI-compatible chat model behind wire contract v1 (or v2).

Wire contract v1 (DESIGN.md, "Judges"): ``POST {base_url}/chat/completions`` with an
OpenAI-compatible body (``model``, ``messages``, ``temperature: 0``, ``response_format``: the
reply's exact schema as structured outputs, see below), one claim per request, every passage
verbatim inside nonce-tagged delimiters (:mod:`citemon.judges.prompts`). The model's message
content must be a JSON object ``{"entailed": true|false, "reason": "…"}`` (a ```json fence and
surrounding whitespace are tolerated); anything else is an invalid reply.
``Authorization: Bearer <key>`` is sent only when a key is set, and the key comes from
:data:`API_KEY_ENV` unless passed in.

Limits, retries, the cache and single-flight, secrets:
:class:`~citemon.judges.transport.HTTPTransport` (the module's promises hold for this judge).
What this module adds: the chat request and its reply (:mod:`citemon.judges.replies` reads
it), the response-format ladder below, MiniCheck's format, and wire contract v2's batch
requests.

Structured outputs: every JSON request asks for ``{"type": "json_schema", "json_schema":
{"name": …, "strict": true, "schema": …}}`` with the exact reply schema of
:mod:`citemon.judges.prompts`. A server that refuses it — HTTP 400 or 422 whose body names
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
(:func:`~citemon.judges.prompts.build_minicheck_messages`): no ``response_format``,
``max_tokens`` :data:`MINICHECK_MAX_TOKENS`, ``logprobs: true, top_logprobs:``
:data:`MINICHECK_TOP_LOGPROBS`; the reply must be ``Yes`` or ``No``
(:func:`parse_minicheck_reply`) and ``confidence`` comes from the reply token's log
probabilities. A server that refuses ``logprobs`` (400/422 naming it) is asked without them
from then on, and its verdicts have no confidence.

Invalid replies are reported to the observer by cause
(:data:`citemon.core.errors.INVALID_REPLY_CAUSES`, ``invalid_reply(cause)`` when the observer has
it): ``citemon_judge_invalid_replies_total{cause}``.

Wire contract v2 (:class:`HTTPBatchJudge`, ``--judge-protocol v2``) keeps all of the above and adds
the two batch requests of :mod:`citemon.judges.batch`, several claims per request, each claim
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

Why one module (about 480 lines): wire contracts v1 and v2 share the chat body, the
response-format ladder and the reply reading; v2's batch requests add under 150 lines.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal, TypeVar, cast

import httpx

from citemon.core.errors import INVALID_REPLY_CAUSES, ConfigError, JudgeError, JudgeInvalidReply
from citemon.core.judge import CitedOutcome, CitedVerdict, SupportOutcome, SupportVerdict
from citemon.core.records import Verdict
from citemon.judges.prompts import (
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
    parse_minicheck_reply,
    parse_support_reply,
    snippet,
)
from citemon.judges.transport import API_KEY_ENV, HTTPTransport, parse_retry_after

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


@dataclass(frozen=True, slots=True)
class _Request:
    """One logical request: its messages, and the reply schema (None: a MiniCheck request)."""

    messages: list[Message]
    schema: Schema | None


class HTTPJudge(HTTPTransport):
    """A :class:`~citemon.core.judge.Judge` that asks an OpenAI-compatible chat endpoint.

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
        reply_format: ReplyFormat = "json",
        **kwargs: Any,
    ) -> None:
        if reply_format not in FORMATS:
            raise ConfigError(f"the judge format must be json or minicheck, not {reply_format!r}")
        self._format: ReplyFormat = reply_format
        super().__init__(base_url, model, endpoint="chat/completions", **kwargs)

    protocol: WireProtocol = "v1"
    """The wire contract this judge speaks (v1: ``entails`` and ``decompose`` only)."""

    def _repr_fields(self) -> str:
        return f"protocol={self.protocol!r}, format={self._format!r}, "

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """Whether ``passages`` (ID → text), taken together, entail ``claim``.

        Raises a :class:`~citemon.core.errors.JudgeError` subclass when no valid verdict could be
        had within the retry budget. No passages entail nothing, so that costs no request.
        """
        if not passages:
            return Verdict(entailed=False, reason="no passages were shown")
        if self._format == "minicheck":
            # MiniCheck reads the passages as one document in the order given: that order is
            # part of what it sees, so it is part of the key (no sorting).
            key = self._key("minicheck", claim, list(passages.items()), PROMPT_VERSION_MINICHECK)
            request = _Request(build_minicheck_messages(claim, passages), None)
            return await self._cached(key, lambda: self._call(request, parse_minicheck_choice))
        key = self._key("entails", claim, sorted(passages.items()))
        return await self._cached(
            key,
            lambda: self._call(
                _Request(build_entailment_messages(claim, passages), entailment_schema()),
                parse_content(parse_entailment_reply),
            ),
        )

    async def decompose(self, sentence: str) -> list[str]:
        """``sentence`` split into standalone atomic claims (``--decompose llm``).

        An empty split means the model found nothing to check; the sentence itself is returned
        so the claim is not silently lost. Raises :class:`~citemon.core.errors.JudgeError` on final
        failure (the caller falls back to the sentence).
        """
        key = self._key("decompose", sentence, [])
        claims = await self._cached(
            key,
            lambda: self._call(
                _Request(build_decompose_messages(sentence), decompose_schema()),
                parse_content(parse_decompose_reply),
            ),
        )
        return list(claims) if claims else [sentence]

    # -- the chat request: response formats, body, reply ------------------------------------

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

    def _rung(self) -> str:
        return self.response_format

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
        if rung == _LADDERS[self._format][-1]:
            return False  # nothing left to step down to
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
            snippet(self._redact(response.text)),
            ladder[index + 1],
        )

    def _reply(self, response: httpx.Response, parse: Callable[[Choice], _T]) -> _T:
        try:
            choice = response.json()["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise JudgeInvalidReply(
                f"judge at {self._shown_url} sent no chat completion: "
                f"{snippet(self._redact(response.text))!r}",
                cause="not_completion",
            ) from exc
        if not isinstance(content, str):
            raise JudgeInvalidReply(
                f"judge at {self._shown_url} sent no message content", cause="not_completion"
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

    def _problem(self, result: object) -> str | None:
        # A v2 reply that leaves some claims without a verdict is an invalid reply too.
        return result.cause if isinstance(result, BatchReply) and result.problems else None


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
            found, value = self._lookup(key)
            if found:
                done[claim] = cast(_V, value)
        ask = [c for c in keys if c not in done]
        if ask:
            flight = self._key(f"{kind}-batch", json.dumps(ask), items, PROMPT_VERSION_V2)
            got = await self._single_flight(flight, lambda: self._ask(ask, messages, parse))
            for claim, outcome in got.items():
                done[claim] = outcome
                if not isinstance(outcome, JudgeError):
                    self._store(keys[claim], outcome)
        return [done[c] for c in claims]

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
                reply = await self._attempt(
                    messages(ids), partial(parse_batch_for, parse, list(ids))
                )
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
