"""A real, scriptable OpenAI-compatible judge server on 127.0.0.1 for tests (stdlib only).

It speaks just enough HTTP/1.1 (keep-alive, Content-Length or chunked bodies) to serve
``POST …/chat/completions`` the way vLLM or OpenAI would, and understands the nonce-tagged
prompts of wire contract v1 (:mod:`citemon.judges.prompts`), so it can answer with *known*
verdicts: by default a claim is entailed iff every content word of it occurs in the passages
shown (:func:`content_word_rule`), and a sentence is decomposed by splitting on ``;`` and
``and`` (:func:`split_rule`).

It also speaks wire contract v2 (:class:`citemon.judges.BatchJudge`): a request carrying several
``<claim id="c1" …>`` tags is a citation check (``kind="cited"``) or a support search
(``kind="support"``), and each claim is answered with the same ``rule``, so v1 and v2 replies
agree by construction: ``entailed`` = rule(claim, shown); ``supported_by`` = the shown passages
for which rule(claim, {p}) holds; ``dispensable`` = those without which rule(claim, rest) holds;
``joint`` = rule(claim, all shown). ``batch_edit(request, reply)`` may rewrite a v2 reply object
before it is sent (drop a claim's entry, add an extra one, corrupt a field) to test the client.

It also speaks MiniCheck's prompt (``--judge-format minicheck``: a user message ``Document: …``
whose last line is ``Claim: …``, ``kind="minicheck"``): the reply is ``Yes`` or ``No`` by the
same ``rule`` over the document, with OpenAI-shaped ``logprobs`` (the answer at probability
``minicheck_p``, the other word at the rest) when the request asks ``logprobs: true``.

Structured outputs: each request's ``response_format`` is recorded as ``RecordedRequest.format``
(``json_schema``, ``json_object+schema``, ``json_object``, ``none``); ``refuse={"json_schema":
REFUSALS["llama-cpp-python"]}`` makes the server refuse that form (and ``"logprobs"`` refuses a
request asking for logprobs) with the status and body of the real server named (see
:data:`REFUSALS`), like a server without structured outputs.

Faults are scripted, in arrival order, optionally only for requests whose claim (or sentence)
contains a marker string::

    async with JudgeServer(latency_s=0.01) as server:           # in the test's event loop
        server.script(Fault.status(429, retry_after="1"))        # the next request gets a 429
        server.script(Fault.status(500), Fault.drop(), match="zeta")  # next two "zeta" claims
        server.script(Fault.content("not json"), match="omega", forever=True)
        judge = HTTPJudge(server.base_url, "test-model")
        ...
        assert server.attempts("zeta") == 3
        assert server.max_concurrent <= judge.max_inflight

    with JudgeServer().in_thread() as server:                    # for code with its own loop
        subprocess.run(["citemon", "score", "--judge-base-url", server.base_url, ...])

Fault kinds: ``status(code, retry_after=, body=, echo_headers=)``, ``slow(seconds)`` (then a
normal reply), ``content(text)`` (HTTP 200 whose message content is ``text``: invalid JSON, wrong
shape…), ``raw(body)`` (HTTP 200 that is not a chat completion), ``drop()`` (close the socket
without replying), ``truncate()`` (send half a response, then close). ``chaos(rate, faults,
seed)`` adds random faults to unscripted requests for load tests.

As a fixture: ``pytest_plugins = ["tests.judge_server"]`` in a conftest (or import
:func:`judge_server` into the test module) gives each test a fresh running ``judge_server``.

Every request is recorded (:class:`RecordedRequest`: headers, JSON body, parsed claim and
passages — for v2, ``claims`` by ID, and ``text`` is their texts joined by newlines so ``match``
finds any of them — which fault it got); ``max_concurrent`` is the most requests the server was
handling at once (a client that hangs up stops counting at once, even while a slow reply is
pending).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

__all__ = [
    "REFUSALS",
    "Fault",
    "JudgeServer",
    "RecordedRequest",
    "content_word_rule",
    "judge_server",
    "split_rule",
]

RequestKind = Literal["entails", "decompose", "cited", "support", "minicheck", "other"]

REFUSALS: dict[str, tuple[int, str]] = {
    # llama-cpp-python 0.3.36, measured: FastAPI's validation of response_format.type, a 422.
    "llama-cpp-python": (
        422,
        json.dumps(
            {
                "detail": [
                    {
                        "type": "literal_error",
                        "loc": ["body", "response_format", "type"],
                        "msg": "Input should be 'text' or 'json_object'",
                        "input": "json_schema",
                        "ctx": {"expected": "'text' or 'json_object'"},
                    }
                ]
            }
        ),
    ),
    # The same server with FastAPI 0.165 (measured here): the validation error as a 500.
    "llama-cpp-python-500": (
        500,
        json.dumps(
            {
                "error": {
                    "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                    "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                    "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
                    '\'json_object\'"}}\n\n  File "llama_cpp/server/app.py", line 376, in '
                    "create_chat_completion\n    POST /v1/chat/completions",
                    "type": "internal_server_error",
                    "param": None,
                    "code": None,
                }
            }
        ),
    ),
    # OpenAI, a model without structured outputs.
    "openai": (
        400,
        json.dumps(
            {
                "error": {
                    "message": "Invalid parameter: 'response_format' of type 'json_schema' is "
                    "not supported with this model.",
                    "type": "invalid_request_error",
                    "param": "response_format",
                    "code": None,
                }
            }
        ),
    ),
    # vLLM: a schema its guided-decoding backend cannot compile.
    "vllm": (
        400,
        json.dumps(
            {
                "object": "error",
                "message": "The provided JSON schema contains features not supported by xgrammar.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ),
    ),
    # A server that will not return log probabilities.
    "no-logprobs": (
        400,
        json.dumps({"error": {"message": "logprobs is not supported", "type": "invalid_request"}}),
    ),
}
"""Refusals as real servers send them: name → (status, body)."""
FaultKind = Literal["status", "slow", "content", "raw", "drop", "truncate"]

_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "may",
        "might",
        "must",
        "not",
        "of",
        "on",
        "or",
        "our",
        "so",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "would",
        "you",
        "your",
    }
)
_WORD = re.compile(r"[a-z0-9]+")


def _content_words(text: str) -> set[str]:
    return {
        w
        for w in _WORD.findall(text.lower())
        if w not in _STOPWORDS and (len(w) > 2 or w.isdigit())
    }


def content_word_rule(claim: str, passages: Mapping[str, str]) -> tuple[bool, str]:
    """Entailed iff every content word of ``claim`` occurs in the passages; and why."""
    missing = sorted(_content_words(claim) - _content_words(" ".join(passages.values())))
    if missing:
        return False, "missing: " + ", ".join(missing)
    return True, "every content word of the claim occurs in the passages"


def split_rule(sentence: str) -> list[str]:
    """Decompose by splitting on ``;`` and ``and`` (a stand-in for a model's split)."""
    parts = re.split(r";\s*|,?\s+and\s+", sentence.strip().rstrip("."))
    return [p.strip() for p in parts if p.strip()]


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour; build with the class methods."""

    kind: FaultKind
    status_code: int = 200
    retry_after: str | None = None
    body: str = ""
    echo_headers: bool = False
    delay_s: float = 0.0
    finish_reason: str = "stop"

    @classmethod
    def status(
        cls,
        code: int,
        *,
        retry_after: str | float | None = None,
        body: str = '{"error": {"message": "injected"}}',
        echo_headers: bool = False,
    ) -> Fault:
        """Reply with HTTP ``code`` (and ``Retry-After``); ``echo_headers`` puts the request's
        headers in the body, like a careless proxy would."""
        ra = None if retry_after is None else str(retry_after)
        return cls("status", status_code=code, retry_after=ra, body=body, echo_headers=echo_headers)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (or until the client hangs up), then answer normally."""
        return cls("slow", delay_s=seconds)

    @classmethod
    def content(cls, text: str, *, finish_reason: str = "stop") -> Fault:
        """HTTP 200, a well-formed chat completion whose message content is ``text``."""
        return cls("content", body=text, finish_reason=finish_reason)

    @classmethod
    def raw(cls, body: str) -> Fault:
        """HTTP 200 whose body is ``body`` verbatim (not a chat completion)."""
        return cls("raw", body=body)

    @classmethod
    def drop(cls) -> Fault:
        """Read the request, then close the socket without a byte of reply."""
        return cls("drop")

    @classmethod
    def truncate(cls) -> Fault:
        """Send the status line, headers and half the body, then close."""
        return cls("truncate")


@dataclass
class RecordedRequest:
    """What the server saw of one request."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    kind: RequestKind = "other"
    text: str = ""  # the claim (entails) or the sentence (decompose)
    passages: dict[str, str] = field(default_factory=dict)
    fault: str | None = None
    received_at: float = 0.0  # time.monotonic()
    claims: dict[str, str] = field(default_factory=dict)  # v2: claim ID → text
    precision: bool = False  # v2 citation check that asks supported_by/dispensable
    format: str = "none"  # response_format asked: json_schema, json_object+schema, json_object
    refused: bool = False  # the server refused what it asked for (``refuse=``)


def _format_of(body: Any) -> str:
    rf = body.get("response_format") if isinstance(body, dict) else None
    if not isinstance(rf, dict):
        return "none"
    if rf.get("type") == "json_object":
        return "json_object+schema" if "schema" in rf else "json_object"
    return str(rf.get("type"))


def _parse_minicheck(body: Any) -> tuple[str, str] | None:
    """(document, claim) from a MiniCheck prompt, or None."""
    try:
        user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    except (TypeError, KeyError, StopIteration):
        return None
    found = re.fullmatch(r"Document: (.*)\nClaim: ([^\n]*)", user, re.DOTALL)
    return (found.group(1), found.group(2)) if found else None


@dataclass
class _Scripted:
    fault: Fault
    match: str | None
    forever: bool


def _parse_prompt(body: Any) -> tuple[RequestKind, str, dict[str, str]]:
    """(kind, claim or sentence, passages) from a wire-contract-v1 request body."""
    try:
        user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    except (TypeError, KeyError, StopIteration):
        return "other", "", {}
    found = re.search(r"Delimiter nonce for this request: (\S+)", user)
    if not found:
        return "other", "", {}
    n = re.escape(json.dumps(found.group(1)))
    claim = re.search(rf"<claim nonce={n}>\n(.*?)\n</claim nonce={n}>", user, re.DOTALL)
    if claim:
        passages = {
            json.loads(pid): text
            for pid, text in re.findall(
                rf'<passage id=("(?:[^"\\]|\\.)*") nonce={n}>\n(.*?)\n</passage nonce={n}>',
                user,
                re.DOTALL,
            )
        }
        return "entails", claim.group(1), passages
    sentence = re.search(rf"<sentence nonce={n}>\n(.*?)\n</sentence nonce={n}>", user, re.DOTALL)
    if sentence:
        return "decompose", sentence.group(1), {}
    return "other", "", {}


def _parse_batch_prompt(body: Any) -> tuple[RequestKind, dict[str, str], dict[str, str], bool]:
    """(kind, claims by ID, passages, precision asked) from a wire-contract-v2 request body."""
    try:
        user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    except (TypeError, KeyError, StopIteration):
        return "other", {}, {}, False
    found = re.search(r"Delimiter nonce for this request: (\S+)", user)
    if not found:
        return "other", {}, {}, False
    n = re.escape(json.dumps(found.group(1)))
    quoted = r'("(?:[^"\\]|\\.)*")'

    def tagged(name: str) -> dict[str, str]:
        pattern = rf"<{name} id={quoted} nonce={n}>\n(.*?)\n</{name} nonce={n}>"
        return {json.loads(i): t for i, t in re.findall(pattern, user, re.DOTALL)}

    claims = tagged("claim")
    if not claims:
        return "other", {}, {}, False
    question = user.rsplit("\n", 1)[-1]
    if "do all the passages together entail it" in question:
        return "support", claims, tagged("passage"), False
    return "cited", claims, tagged("passage"), "could be left out" in question


def _batch_reply(
    rule: Callable[[str, Mapping[str, str]], tuple[bool, str]], req: RecordedRequest
) -> dict[str, Any]:
    """The v2 reply object ``rule`` implies for ``req`` (see the module docstring)."""
    shown = req.passages

    def holds(claim: str, ids: Sequence[str]) -> bool:
        return rule(claim, {p: shown[p] for p in ids})[0]

    verdicts: list[dict[str, Any]] = []
    for cid, claim in req.claims.items():
        entailed, reason = rule(claim, shown)
        alone = [p for p in shown if holds(claim, [p])]
        if req.kind == "support":
            verdicts.append(
                {"claim": cid, "supported_by": alone, "joint": entailed, "reason": reason}
            )
            continue
        entry: dict[str, Any] = {"claim": cid, "entailed": entailed, "reason": reason}
        if req.precision and entailed:
            entry["supported_by"] = alone
            entry["dispensable"] = [p for p in shown if holds(claim, [q for q in shown if q != p])]
        verdicts.append(entry)
    return {"verdicts": verdicts}


class JudgeServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 with scriptable faults.

    ``latency_s`` delays every reply (to build up concurrency); ``rule`` decides entailment
    (``(claim, passages) -> (entailed, reason)``); ``splitter`` decomposes sentences;
    ``batch_edit(request, reply)`` rewrites v2 reply objects (default: sent as the rule says).
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        rule: Callable[[str, Mapping[str, str]], tuple[bool, str]] = content_word_rule,
        splitter: Callable[[str], list[str]] = split_rule,
        batch_edit: Callable[[RecordedRequest, dict[str, Any]], dict[str, Any]] | None = None,
        refuse: Mapping[str, tuple[int, str]] | None = None,
        minicheck_p: float = 0.9,
    ) -> None:
        self.refuse = dict(refuse or {})
        self.minicheck_p = minicheck_p
        self.latency_s = latency_s
        self.rule = rule
        self.splitter = splitter
        self.batch_edit = batch_edit
        self.requests: list[RecordedRequest] = []
        self.max_concurrent = 0
        self._active = 0
        self._lock = threading.Lock()
        self._script: list[_Scripted] = []
        self._chaos: tuple[float, list[Fault], random.Random] | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        self._port = 0

    # -- scripting and inspection --------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The API root to give a client (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self._port}/v1"

    def script(self, *faults: Fault, match: str | None = None, forever: bool = False) -> None:
        """Queue ``faults`` for the next requests (whose claim/sentence contains ``match``).

        Each fault is used once, in order, unless ``forever``: then the first keeps applying.
        """
        with self._lock:
            self._script += [_Scripted(f, match, forever) for f in faults]

    def chaos(self, rate: float, faults: Sequence[Fault], *, seed: int = 0) -> None:
        """Give a random one of ``faults`` to a fraction ``rate`` of unscripted requests."""
        with self._lock:
            self._chaos = (rate, list(faults), random.Random(seed))

    def reset(self) -> None:
        """Forget scripted faults, chaos and recorded requests."""
        with self._lock:
            self._script.clear()
            self._chaos = None
            self.requests.clear()
            self.max_concurrent = 0

    def attempts(self, match: str | None = None) -> int:
        """Requests received (whose claim/sentence contains ``match``)."""
        with self._lock:
            return sum(1 for r in self.requests if match is None or match in r.text)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            # Python 3.11's wait_closed() does not wait for handlers. Abort their sockets so
            # they end normally (a cancelled stream handler makes asyncio log an error).
            for conn in list(self._conns.values()):
                conn.transport.abort()
            tasks = list(self._conns)
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=5)
                for task in late:
                    task.cancel()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> JudgeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[JudgeServer]:
        """Serve from a background thread with its own event loop (for sync code, the CLI)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name="judge-server", daemon=True)
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("judge server did not start")
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    # -- HTTP ------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a client that hung up, or a request line this server does not speak
        finally:
            del self._conns[task]
            writer.close()  # flushes what was written, then closes

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line.strip():
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while size := int((await reader.readline()).split(b";")[0], 16):
                data += await reader.readexactly(size + 2)
                data = data[:-2]
            await reader.readline()
        else:
            data = await reader.readexactly(int(headers.get("content-length", "0")))
        try:
            body = json.loads(data) if data else None
        except ValueError:
            body = None
        kind, text, passages = _parse_prompt(body)
        record = RecordedRequest(
            method, path, headers, body, kind, text, passages, received_at=time.monotonic()
        )
        record.format = _format_of(body)
        if kind == "other":
            kind, claims, passages, precision = _parse_batch_prompt(body)
            if kind != "other":
                record.kind, record.passages, record.precision = kind, passages, precision
                record.claims, record.text = claims, "\n".join(claims.values())
                text = record.text
        if kind == "other" and (minicheck := _parse_minicheck(body)) is not None:
            record.kind, record.passages = "minicheck", {"document": minicheck[0]}
            record.text = text = minicheck[1]
        with self._lock:
            fault = self._pick_fault(text or data.decode("utf-8", "replace"))
            record.fault = fault.kind if fault else None
            self.requests.append(record)
            self._active += 1
            self.max_concurrent = max(self.max_concurrent, self._active)
        try:
            return await self._respond(reader, writer, record, fault)
        finally:
            with self._lock:
                self._active -= 1

    def _pick_fault(self, text: str) -> Fault | None:
        for i, entry in enumerate(self._script):
            if entry.match is None or entry.match in text:
                if not entry.forever:
                    del self._script[i]
                return entry.fault
        if self._chaos is not None:
            rate, faults, rng = self._chaos
            if faults and rng.random() < rate:
                return rng.choice(faults)
        return None

    async def _delay_or_drop(self, reader: asyncio.StreamReader, fault: Fault | None) -> bool:
        """Wait out the latency (and a ``slow`` fault's delay); False when the client hung up
        meanwhile or a ``drop`` fault closes the connection without a reply."""
        delay = self.latency_s + (fault.delay_s if fault and fault.kind == "slow" else 0.0)
        if delay > 0 and not await _wait_unless_hangup(reader, delay):
            return False
        return not (fault is not None and fault.kind == "drop")

    async def _respond(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        req: RecordedRequest,
        fault: Fault | None,
    ) -> bool:
        if not await self._delay_or_drop(reader, fault):
            return False
        if req.method != "POST":
            return await _send(writer, 405, '{"error": "method not allowed"}')
        if not req.path.endswith("/chat/completions"):
            return await _send(writer, 404, '{"error": "not found"}')
        asked_logprobs = isinstance(req.body, dict) and req.body.get("logprobs") is True
        for form in (req.format, "logprobs" if asked_logprobs else None):
            if form in self.refuse:
                req.refused = True
                return await _send(writer, *self.refuse[form])
        if fault is not None and fault.kind == "status":
            body = fault.body
            if fault.echo_headers:
                echo = {"error": "injected", "request_headers": req.headers}
                body = json.dumps(echo, sort_keys=True)
            extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            return await _send(writer, fault.status_code, body, extra)
        if fault is not None and fault.kind == "raw":
            return await _send(writer, 200, fault.body)
        if fault is not None and fault.kind == "content":
            content = fault.body
        elif req.kind == "entails":
            entailed, reason = self.rule(req.text, req.passages)
            content = json.dumps({"entailed": entailed, "reason": reason})
        elif req.kind == "decompose":
            content = json.dumps({"claims": self.splitter(req.text)})
        elif req.kind in ("cited", "support"):
            reply = _batch_reply(self.rule, req)
            if self.batch_edit is not None:
                reply = self.batch_edit(req, reply)
            content = json.dumps(reply)
        elif req.kind == "minicheck":
            content = "Yes" if self.rule(req.text, req.passages)[0] else "No"
        else:
            return await _send(writer, 400, '{"error": "not a wire contract v1 or v2 prompt"}')
        model = req.body.get("model", "") if isinstance(req.body, dict) else ""
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": fault.finish_reason if fault is not None else "stop",
        }
        if asked_logprobs and content in ("Yes", "No"):
            other = "No" if content == "Yes" else "Yes"
            p = self.minicheck_p
            top = [
                {"token": content, "logprob": math.log(p), "bytes": list(content.encode())},
                {"token": other, "logprob": math.log(1 - p), "bytes": list(other.encode())},
            ]
            choice["logprobs"] = {"content": [dict(top[0], top_logprobs=top)]}
        completion = json.dumps(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
            }
        )
        if fault is not None and fault.kind == "truncate":
            return await _send_truncated(writer, completion)
        return await _send(writer, 200, completion)


async def _wait_unless_hangup(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Sleep ``seconds``; False as soon as the client closes its end (it gave up)."""
    eof = asyncio.ensure_future(reader.read(1))
    try:
        done, _ = await asyncio.wait({eof}, timeout=seconds)
        return not done  # HTTP/1.1 clients send nothing while waiting, so any read means EOF
    finally:
        eof.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await eof


_REASONS = {
    200: "OK",
    400: "Bad Request",
    422: "Unprocessable Entity",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


async def _send_truncated(writer: asyncio.StreamWriter, body: str) -> bool:
    """A 200 whose ``Content-Length`` promises all of ``body`` and which carries half of it (the
    connection is then dropped: returns False)."""
    payload = body.encode()
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    writer.write(head + payload[: len(payload) // 2])
    await writer.drain()
    return False


async def _send(
    writer: asyncio.StreamWriter, status: int, body: str, headers: Mapping[str, str] | None = None
) -> bool:
    payload = body.encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    await writer.drain()
    return True


@pytest.fixture
async def judge_server() -> AsyncIterator[JudgeServer]:
    """A fresh :class:`JudgeServer` running in the test's event loop."""
    async with JudgeServer() as server:
        yield server
