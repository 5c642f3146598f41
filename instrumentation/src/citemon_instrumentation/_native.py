"""The citations providers return as structure, read from a provider's response (as JSON: the
SDK object's dump) with the passages from the request or the response. One reader for both
sides: the monitor reads the responses instrumentations recorded whole (OpenInference's
``output.value``), the shim's ``record_*_citations`` helpers the response objects themselves
(duck-typed: no provider SDK is imported). Pure functions of JSON values, Python ≥ 3.10.

=====================  ===========================================================================
Anthropic Messages     text blocks' ``citations``: ``char_location`` / ``page_location`` /
                       ``content_block_location`` name a request ``document`` block by
                       ``document_index``, ``search_result_location`` a ``search_result`` block by
                       ``search_result_index``; each quotes what it cites (``cited_text``). The
                       answer is the text blocks joined; a citation covers its block.
OpenAI Responses       ``output_text`` ``annotations``: ``file_citation`` whose ``index`` is where
                       the citation is inserted, matched by ``file_id`` to the ``file_search_call``
                       results (text, attributes); ``url_citation`` and
                       ``container_file_citation`` with a character range.
OpenAI Chat            ``message.annotations`` ``url_citation``: a character range and a URL; the
                       page text is nowhere in the trace.
Cohere v2 chat         ``message.citations``: ``start``/``end`` into the text block
                       ``content_index`` names, the cited phrase, ``sources`` naming the request's
                       ``documents`` by ID; those of the thinking or the plan (``type``) skipped.
Gemini                 ``grounding_metadata.grounding_supports``: a segment in UTF-8 *bytes* of
                       the part it is in (no ``start_index`` when it starts at 0) and
                       ``grounding_chunk_indices`` into ``grounding_chunks`` (``retrieved_context``
                       with the text; ``web`` with a URI only).
=====================  ===========================================================================

A passage's ID is the application's where the request carries one (an Anthropic document's
``title``, a search result's ``source``, a Cohere document's ``id``), else the provider's (a file
ID, a URL, a chunk's document name or title); the application's ID in metadata (OpenAI file
attributes, Gemini custom metadata, Cohere document fields) is kept there, where
``--passage-id-keys`` finds it. A passage the response names but whose text is nowhere (a URL, a
file the results were not included for) is kept with an ID and no text, for the passage store.

An answer whose request asked for citations and that came back with none has an empty citation
list (its claims are uncited: the model cited nothing). Offsets that disagree with the text they
claim to cover (outside the answer, a cited phrase that is not there, a byte offset inside a
character) raise :class:`CitationShapeError`, saying which: explained, never guessed at.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CitationShapeError",
    "NativeAnswer",
    "NativeCitation",
    "Passage",
    "is_openai_search_model",
    "parse_response",
    "to_json",
]

_GEMINI_GROUNDING_TOOLS: Final = frozenset(
    {"file_search", "google_search", "google_search_retrieval", "retrieval", "google_maps"}
)
_MAX_DEPTH: Final = 64


class CitationShapeError(ValueError):
    """A response whose citations disagree with the text they claim to cover."""


@dataclass
class Passage:
    """One passage the model saw: its ID, its text (``""`` when the response names it only)."""

    id: str
    text: str
    source: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "text": self.text}
        for key in ("source", "score", "metadata"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass
class NativeCitation:
    """Characters ``start``..``end`` of the answer (``start == end``: an insertion point) cite
    the passages ``ids``; ``quote`` is what the provider says it quotes from them."""

    start: int
    end: int
    ids: list[str]
    quote: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"start": self.start, "end": self.end, "ids": self.ids}
        if self.quote is not None:
            out["quote"] = self.quote
        return out


@dataclass
class NativeAnswer:
    """What one provider response holds: the answer, the passages, the citations."""

    provider: str
    answer: str
    question: str | None
    passages: list[Passage]
    citations: list[NativeCitation]


def to_json(obj: Any, depth: int = 0) -> Any:
    """A provider SDK's object as plain JSON values, duck-typed: pydantic models
    (``model_dump``: anthropic, openai, cohere, google-genai), ``to_dict``, mappings, lists."""
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deep")
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return to_json(dump(mode="json", exclude_none=True), depth + 1)
        except TypeError:  # pydantic v1's dict() under the v2 name, without mode
            return to_json(dump(), depth + 1)
    if isinstance(obj, Mapping):
        return {str(k): to_json(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v, depth + 1) for v in obj]
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_json(to_dict(), depth + 1)
    raise TypeError(f"cannot read a {type(obj).__name__} as JSON")


def parse_response(
    out: Mapping[str, Any], request: Mapping[str, Any] | None = None
) -> NativeAnswer | None:
    """The native citations of one provider response (JSON: the SDK's dump or the REST body)
    with the request that asked for it (``messages``, ``documents``, ``tools``, ``input``,
    ``contents``: whatever of it is known); ``None`` when the response is none of these
    providers', or neither asked for nor carries citations."""
    for reader in _READERS:
        got = reader(out, request or {})
        if got is not None:
            return got
    return None


# -- shared ---------------------------------------------------------------------------------


def _bad(provider: str, what: str) -> CitationShapeError:
    return CitationShapeError(f"{provider} citations: {what}")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


class _Pool:
    """The answer's passages, in the order the model saw them, with unique IDs (a second
    chunk of one file is ``file-…#2``), and the IDs each provider key names."""

    def __init__(self) -> None:
        self.passages: list[Passage] = []
        self.named: dict[str, list[str]] = {}
        # Kept as we go, not recomputed per passage: a response is untrusted input, and a
        # megabyte of empty results (one file ID, or none) is a quarter million passages.
        self._taken: set[str] = set()
        self._suffix: dict[str, int] = {}
        self._by_text: dict[str, str] = {}

    def add(
        self,
        key: str,
        text: str,
        *,
        pid: str | None = None,
        source: str | None = None,
        score: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        base = pid or key
        unique, n = base, self._suffix.get(base, 1)
        while unique in self._taken:
            n += 1
            unique = f"{base}#{n}"
        self._suffix[base] = n
        self._taken.add(unique)
        if text:
            self._by_text.setdefault(text, unique)
        self.passages.append(
            Passage(
                id=unique,
                text=text,
                source=source,
                score=float(score) if _int(score) is not None or type(score) is float else None,
                metadata=metadata or None,
            )
        )
        self.named.setdefault(key, []).append(unique)
        return unique

    def with_text(self, text: str) -> str | None:
        """The first passage whose text is ``text``."""
        return self._by_text.get(text)

    def ids(self, key: str, *, text: str = "", metadata: dict[str, Any] | None = None) -> list[str]:
        """The passages ``key`` names; one without text (for the passage store) if none."""
        if key not in self.named:
            self.add(key, text, metadata=metadata)
        return self.named[key]


def _texts(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    return "\n".join(
        str(b["text"]) for b in _dicts(blocks) if b.get("type") == "text" and "text" in b
    )


def _last_user_text(messages: Any) -> str | None:
    if isinstance(messages, str):
        return messages
    for message in reversed(_dicts(messages)):
        if message.get("role") not in (None, "user"):
            continue
        content = message.get("content", message.get("parts"))
        if isinstance(content, str):
            return content
        texts = [
            str(b["text"])
            for b in _dicts(content)
            if b.get("type") in (None, "text", "input_text") and isinstance(b.get("text"), str)
        ]
        if texts:
            return "\n".join(texts)
    return None


def _range(provider: str, answer: str, start: Any, end: Any, what: str) -> tuple[int, int]:
    s, e = _int(start), _int(end)
    if s is None or e is None or not 0 <= s <= e <= len(answer):
        raise _bad(
            provider, f"{what} covers {start!r}..{end!r}, outside the answer ({len(answer)} chars)"
        )
    return s, e


# -- Anthropic --------------------------------------------------------------------------------


def _anthropic_blocks(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every content block of the request, tool results' blocks in place, in order."""
    out: list[dict[str, Any]] = []

    def walk(blocks: Any) -> None:
        for b in _dicts(blocks):
            out.append(b)
            if b.get("type") == "tool_result":
                walk(b.get("content"))

    walk(request.get("system"))
    for message in _dicts(request.get("messages")):
        walk(message.get("content"))
    return out


def _anthropic(out: Mapping[str, Any], request: Mapping[str, Any]) -> NativeAnswer | None:
    if out.get("type") != "message" or not isinstance(out.get("content"), list):
        return None
    pool = _Pool()
    documents: list[str] = []
    results: list[str] = []
    asked = False
    for b in _anthropic_blocks(request):
        kind = b.get("type")
        if kind not in ("document", "search_result"):
            continue
        asked |= isinstance(b.get("citations"), dict) and b["citations"].get("enabled") is True
        title = b.get("title") if isinstance(b.get("title"), str) else None
        if kind == "search_result":
            src = b.get("source") if isinstance(b.get("source"), str) else None
            key = f"search_result-{len(results)}"
            meta = {k: v for k, v in (("source", src), ("title", title)) if v}
            results.append(
                pool.add(key, _texts(b.get("content")), pid=src, source=src, metadata=meta)
            )
            continue
        source = _obj(b.get("source"))
        stype = source.get("type")
        text = ""
        if stype == "text" and isinstance(source.get("data"), str):
            text = source["data"]
        elif stype == "content":
            text = _texts(source.get("content"))
        ref = source.get("file_id") or source.get("url")
        key = f"document-{len(documents)}"
        meta = {k: v for k, v in (("title", title), ("context", b.get("context"))) if v}
        documents.append(
            pool.add(key, text, pid=title or (ref if isinstance(ref, str) else None), metadata=meta)
        )
    parts: list[str] = []
    citations: list[NativeCitation] = []
    at = 0
    for block in _dicts(out["content"]):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            continue
        text = block["text"]
        start, at = at, at + len(text)
        parts.append(text)
        for c in _dicts(block.get("citations")):
            kind = c.get("type")
            if kind == "search_result_location":
                i, names, label = _int(c.get("search_result_index")), results, "search_result"
            elif kind in ("char_location", "page_location", "content_block_location"):
                i, names, label = _int(c.get("document_index")), documents, "document"
            elif kind == "web_search_result_location" and isinstance(c.get("url"), str):
                ids = pool.ids(c["url"], metadata={"url": c["url"], "title": c.get("title")})
                citations.append(NativeCitation(start=start, end=at, ids=ids))
                continue
            else:
                continue
            pid = names[i] if i is not None and 0 <= i < len(names) else f"{label}-{i}"
            quote = c.get("cited_text") if isinstance(c.get("cited_text"), str) else None
            citations.append(NativeCitation(start=start, end=at, ids=[pid], quote=quote))
    if not citations and not asked:
        return None
    question = _last_user_text(request.get("messages"))
    return NativeAnswer("anthropic", "".join(parts), question, pool.passages, citations)


# -- OpenAI -----------------------------------------------------------------------------------


def _openai_asked(request: Mapping[str, Any], out: Mapping[str, Any]) -> bool:
    tools = _dicts(request.get("tools")) + _dicts(out.get("tools"))
    return any(str(t.get("type", "")).startswith(("file_search", "web_search")) for t in tools)


def _openai_annotation(
    a: Mapping[str, Any], text: str, base: int, pool: _Pool
) -> NativeCitation | None:
    kind = a.get("type")
    if kind == "file_citation":
        index = _int(a.get("index"))
        if index is None or not 0 <= index <= len(text):
            raise _bad("openai", f"file_citation index {a.get('index')!r} outside the text")
        file_id = str(a.get("file_id", ""))
        ids = pool.ids(file_id, metadata={"file_id": file_id, "filename": a.get("filename")})
        return NativeCitation(start=base + index, end=base + index, ids=ids)
    if kind == "url_citation":
        inner = _obj(a.get("url_citation")) or a
        s, e = _range("openai", text, inner.get("start_index"), inner.get("end_index"), "url")
        url = str(inner.get("url", ""))
        ids = pool.ids(url, metadata={"url": url, "title": inner.get("title")})
        return NativeCitation(start=base + s, end=base + e, ids=ids)
    if kind == "container_file_citation":
        s, e = _range("openai", text, a.get("start_index"), a.get("end_index"), "file")
        file_id = str(a.get("file_id", ""))
        ids = pool.ids(file_id, metadata={"file_id": file_id, "filename": a.get("filename")})
        return NativeCitation(start=base + s, end=base + e, ids=ids)
    return None


def _openai_response(out: Mapping[str, Any], request: Mapping[str, Any]) -> NativeAnswer | None:
    if out.get("object") != "response" or not isinstance(out.get("output"), list):
        return None
    pool = _Pool()
    for item in _dicts(out["output"]):
        if item.get("type") != "file_search_call":
            continue
        for r in _dicts(item.get("results")):
            file_id = str(r.get("file_id") or "")
            attributes = _obj(r.get("attributes"))
            meta = {**attributes, "file_id": file_id, "filename": r.get("filename")}
            text = str(r["text"]) if isinstance(r.get("text"), str) else ""
            pool.add(file_id, text, score=r.get("score"), metadata=meta)
    texts: list[str] = []
    citations: list[NativeCitation] = []
    at = 0
    for item in _dicts(out["output"]):
        if item.get("type") != "message":
            continue
        for part in _dicts(item.get("content")):
            if part.get("type") != "output_text" or not isinstance(part.get("text"), str):
                continue
            if texts:
                at += 2  # parts joined by a blank line
            text = part["text"]
            for a in _dicts(part.get("annotations")):
                c = _openai_annotation(a, text, at, pool)
                if c is not None:
                    citations.append(c)
            texts.append(text)
            at += len(text)
    if not texts or (not citations and not _openai_asked(request, out)):
        return None
    question = _last_user_text(request.get("input"))
    return NativeAnswer("openai", "\n\n".join(texts), question, pool.passages, citations)


def _openai_chat(out: Mapping[str, Any], request: Mapping[str, Any]) -> NativeAnswer | None:
    if out.get("object") != "chat.completion":
        return None
    choices = _dicts(out.get("choices"))
    message = choices[0].get("message") if choices else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return None
    text = message["content"]
    pool = _Pool()
    citations = [
        c
        for a in _dicts(message.get("annotations"))
        if (c := _openai_annotation(a, text, 0, pool)) is not None
    ]
    searched = "web_search_options" in request or is_openai_search_model(out.get("model"))
    if not citations and not searched:
        return None
    question = _last_user_text(request.get("messages"))
    return NativeAnswer("openai", text, question, pool.passages, citations)


def is_openai_search_model(model: Any) -> bool:
    """OpenAI's Chat Completions search models (``gpt-4o-search-preview``,
    ``gpt-4o-mini-search-preview-2025-03-11``, ``gpt-5-search-api``), which search the web on
    every request and cite with ``url_citation``. Not any model whose name holds "search" or
    "research": every OpenAI-compatible server (vLLM, llama.cpp, Ollama) answers
    ``chat.completion``, and its answer is read for inline markers as before."""
    return (
        isinstance(model, str)
        and model.startswith("gpt-")
        and ("-search-" in model or model.endswith("-search"))
    )


# -- Cohere -----------------------------------------------------------------------------------


def _cohere_text(data: Any) -> tuple[str, dict[str, Any]]:
    """A Cohere document's text and the rest of its fields (Cohere shows the model every
    field; the text is under ``text``, ``snippet`` or ``content`` when there is one)."""
    if isinstance(data, str):
        return data, {}
    if not isinstance(data, dict):
        return "", {}
    for key in ("text", "snippet", "content"):
        if isinstance(data.get(key), str):
            return data[key], {k: v for k, v in data.items() if k != key}
    return json.dumps(data, ensure_ascii=False, sort_keys=True), dict(data)


def _cohere(out: Mapping[str, Any], request: Mapping[str, Any]) -> NativeAnswer | None:
    message = out.get("message")
    if not isinstance(message, dict) or "finish_reason" not in out:
        return None
    content = message.get("content")
    if not isinstance(content, list):
        return None
    # Where each content block's text starts in the answer (the text blocks joined); a
    # thinking block holds none of it.
    blocks = [b for b in content if isinstance(b, dict)]
    starts: list[int | None] = []
    answer = ""
    for b in blocks:
        if b.get("type") == "text" and "text" in b:
            starts.append(len(answer))
            answer += str(b["text"])
        else:
            starts.append(None)
    pool = _Pool()
    documents = request.get("documents")
    documents = documents if isinstance(documents, list) else []
    for i, doc in enumerate(documents):
        data = doc.get("data") if isinstance(doc, dict) else doc
        did = doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), str) else None
        text, meta = _cohere_text(data)
        pool.add(did or f"doc:{i}", text, metadata=meta)
    options = request.get("citation_options")
    off = isinstance(options, dict) and str(options.get("mode", "")).upper() == "OFF"
    citations: list[NativeCitation] = []
    for n, c in enumerate(_dicts(message.get("citations"))):
        # A citation of the model's thinking or tool plan (``type``) is not the answer's; its
        # offsets are in the block ``content_index`` names (the first, when it names none).
        if str(c.get("type") or "TEXT_CONTENT").upper() != "TEXT_CONTENT":
            continue
        index = _int(c.get("content_index"))
        base = starts[index] if index is not None and 0 <= index < len(starts) else 0
        if base is None:
            continue  # in a block that is not text: not the answer's
        start, end = c.get("start"), c.get("end")
        s_in, e_in = _int(start), _int(end)
        if s_in is not None and e_in is not None:
            start, end = base + s_in, base + e_in
        s, e = _range("cohere", answer, start, end, f"citation {n}")
        phrase = c.get("text")
        if isinstance(phrase, str) and answer[s:e] != phrase:
            raise _bad(
                "cohere",
                f"citation {n} says it covers {phrase!r} but the answer at {s}..{e} is "
                f"{answer[s:e]!r}",
            )
        ids: list[str] = []
        for src in _dicts(c.get("sources")):
            sid = src.get("id")
            if not isinstance(sid, str):
                continue
            body = src.get("document", src.get("tool_output"))
            text, meta = _cohere_text(body) if body is not None else ("", {})
            if sid not in pool.named and text:
                # A document the request gave without an ID: Cohere names it its own way;
                # the same text is the same passage.
                same = pool.with_text(text)
                if same is not None:
                    pool.named[sid] = [same]
            ids.extend(pool.ids(sid, text=text, metadata=meta))
        citations.append(NativeCitation(start=s, end=e, ids=list(dict.fromkeys(ids))))
    if not citations and (off or not documents):
        return None
    question = _last_user_text(request.get("messages"))
    return NativeAnswer("cohere", answer, question, pool.passages, citations)


# -- Gemini -----------------------------------------------------------------------------------


def _g(d: Mapping[str, Any], snake: str) -> Any:
    """A field of the SDK's dump (snake_case) or of the REST JSON (camelCase)."""
    if snake in d:
        return d[snake]
    head, *rest = snake.split("_")
    return d.get(head + "".join(w.title() for w in rest))


def _gemini_asked(request: Mapping[str, Any]) -> bool:
    config = _obj(request.get("config"))
    tools = _dicts(request.get("tools")) + _dicts(config.get("tools"))
    # A grounding tool by its key, snake_case (the SDK's dump) or camelCase (the REST JSON);
    # function declarations (an agent's own search tool) ask for no grounding.
    return any(_g(t, k) is not None for t in tools for k in _GEMINI_GROUNDING_TOOLS)


def _gemini_chunk(chunk: Mapping[str, Any], i: int, pool: _Pool) -> None:
    ctx = _g(chunk, "retrieved_context")
    web = chunk.get("web")
    if isinstance(ctx, dict):
        meta: dict[str, Any] = {}
        for m in _dicts(_g(ctx, "custom_metadata")):
            key = m.get("key")
            value = next(
                (
                    v
                    for v in (
                        _g(m, "string_value"),
                        _g(m, "numeric_value"),
                        _g(m, "string_list_value"),
                    )
                    if v is not None
                ),
                None,
            )
            if isinstance(key, str) and value is not None:
                meta[key] = value
        for field in ("title", "uri", "document_name", "file_search_store"):
            value = _g(ctx, field)
            if isinstance(value, str):
                meta.setdefault(field, value)
        pid = next(
            (meta[k] for k in ("document_name", "uri", "title") if isinstance(meta.get(k), str)),
            None,
        )
        text = _g(ctx, "text")
        pool.add(f"chunk-{i}", text if isinstance(text, str) else "", pid=pid, metadata=meta)
    elif isinstance(web, dict) and isinstance(web.get("uri"), str):
        pool.add(
            f"chunk-{i}",
            "",
            pid=web["uri"],
            metadata={"url": web["uri"], "title": web.get("title")},
        )
    else:
        pool.add(f"chunk-{i}", "")


def _char_at_byte(text: str) -> Callable[[int], int | None]:
    """``text``'s UTF-8 byte offset → its character offset, None inside a character. Built once
    per answer: decoding the prefix for each of a long answer's thousands of supports was
    quadratic (seconds for a megabyte)."""
    if text.isascii():
        return lambda b: b if 0 <= b <= len(text) else None
    # The byte offset of each character boundary: 1 to 4 bytes per code point (UTF-8's ranges).
    widths = (
        1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4 for o in map(ord, text)
    )
    bounds = list(itertools.accumulate(widths, initial=0))

    def char_at(b: int) -> int | None:
        i = bisect.bisect_left(bounds, b)
        return i if i < len(bounds) and bounds[i] == b else None

    return char_at


def _gemini(out: Mapping[str, Any], request: Mapping[str, Any]) -> NativeAnswer | None:
    candidates = _dicts(out.get("candidates"))
    if not candidates:
        return None
    candidate = candidates[0]
    content = candidate.get("content")
    parts = _dicts(content.get("parts")) if isinstance(content, dict) else []
    # Indexed by the part's place in the content (a segment's ``part_index`` counts every
    # part: a thought summary or a function call takes an index too); None: no answer text.
    texts: list[str | None] = [
        str(p["text"]) if isinstance(p.get("text"), str) and not p.get("thought") else None
        for p in parts
    ]
    grounding = _obj(_g(candidate, "grounding_metadata"))
    if not any(t is not None for t in texts) or not (grounding or _gemini_asked(request)):
        return None
    answer = "".join(t for t in texts if t is not None)
    char_at = _char_at_byte(answer)
    bases = [0]
    for t in texts:
        # surrogatepass: a lone surrogate (JSON's "\ud800") counts 3 bytes, as in char_at, and
        # is left to the text checks (the monitor's invalid_utf8, the shim's U+FFFD) rather
        # than raising here, where it read as a malformed response.
        size = len(t.encode("utf-8", "surrogatepass")) if t is not None else 0
        bases.append(bases[-1] + size)
    pool = _Pool()
    chunks = _dicts(_g(grounding, "grounding_chunks"))
    for i, chunk in enumerate(chunks):
        _gemini_chunk(chunk, i, pool)
    citations: list[NativeCitation] = []
    for n, support in enumerate(_dicts(_g(grounding, "grounding_supports"))):
        segment = _obj(support.get("segment"))
        part = _int(_g(segment, "part_index")) or 0
        start = _g(segment, "start_index")
        start = 0 if start is None else start  # a segment starting at 0 has no start_index
        end = _g(segment, "end_index")
        s_b, e_b = _int(start), _int(end)
        if not 0 <= part < len(texts) or texts[part] is None or s_b is None or e_b is None:
            raise _bad("gemini", f"grounding support {n} has no usable segment ({segment!r})")
        s_b, e_b = bases[part] + s_b, bases[part] + e_b
        if not bases[part] <= s_b <= e_b <= bases[part + 1]:
            raise _bad(
                "gemini", f"grounding support {n} covers bytes {start}..{end}, outside part {part}"
            )
        s, e = char_at(s_b), char_at(e_b)
        if s is None or e is None:
            raise _bad("gemini", f"grounding support {n}'s bytes {start}..{end} cut a character")
        said = _g(segment, "text")
        if isinstance(said, str) and answer[s:e] != said:
            raise _bad(
                "gemini",
                f"grounding support {n} says it covers {said!r} but the answer at bytes "
                f"{start}..{end} is {answer[s:e]!r}",
            )
        ids: list[str] = []
        indices = _g(support, "grounding_chunk_indices")
        for raw_index in indices if isinstance(indices, list) else []:
            index = _int(raw_index)
            key = f"chunk-{index}"
            if index is None or key not in pool.named:
                ids.append(key)  # names no chunk: dangling
                continue
            ids.extend(pool.named[key])
        citations.append(NativeCitation(start=s, end=e, ids=list(dict.fromkeys(ids))))
    contents = request.get("contents")
    question = _last_user_text(contents if isinstance(contents, list) else [{"parts": contents}])
    if isinstance(contents, str):
        question = contents
    return NativeAnswer("gemini", answer, question, pool.passages, citations)


_READERS: Final[Sequence[Callable[[Mapping[str, Any], Mapping[str, Any]], NativeAnswer | None]]] = (
    _anthropic,
    _openai_response,
    _openai_chat,
    _cohere,
    _gemini,
)
