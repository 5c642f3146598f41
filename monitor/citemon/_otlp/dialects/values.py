"""Helpers every dialect reader shares: limits on text, passages from loose JSON, the text
of an answer inside a JSON value."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any, Final

from pydantic import BaseModel

from citemon._core.errors import DecodeError
from citemon._core.records import Passage
from citemon._otlp.spans import Limits

__all__ = [
    "ID_KEYS",
    "check_context",
    "check_text",
    "check_writable",
    "json_value",
    "make_passage",
    "messages_text",
    "metadata_of",
    "passages_from_items",
    "text_from_json",
    "texts_of",
]

ID_KEYS: Final = ("id", "document_id", "doc_id", "node_id", "chunk_id")
"""Where a document's own ID may sit in its metadata when the dialect has no ID field."""
_TEXT_KEYS: Final = ("content", "text", "output", "answer", "result", "response", "data")


def json_value(value: Any) -> Any:
    """``value`` decoded when it is a JSON object or array in a string, else ``None``."""
    if not isinstance(value, str) or not value.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return None


def check_text(value: str, what: str, limit: int | None = None) -> None:
    """``answer_too_large`` past ``limit`` UTF-8 bytes; ``invalid_utf8`` for lone surrogates."""
    if limit is not None and len(value) > limit:  # chars ≤ bytes: too large without encoding
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({len(value)} chars)")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates, from JSON "\ud800" escapes
        raise DecodeError("invalid_utf8", f"{what} is not valid UTF-8 text") from exc
    if limit is not None and n > limit:
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({n})")


def check_writable(read: object) -> None:
    """``invalid_utf8`` when any text a dialect read holds a lone surrogate, wherever it sits
    (a passage ID, its metadata, a cited ID, a resource label): JSON may escape one (``"\\ud800"``),
    even in JSON inside an attribute, and a record holding one could never be written (the
    results topic) nor its labels exported (``/metrics`` would fail on every scrape after)."""
    for what, text in texts_of(read, "span"):
        if not text.isascii():  # O(1) in CPython: only non-ASCII text is encoded to check
            check_text(text, what)


def texts_of(value: object, where: str) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (models, dataclasses, lists, dicts: keys too), with a name."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from texts_of(getattr(value, name), name)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from texts_of(getattr(value, field.name), field.name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts_of(key, f"{where} key")
            yield from texts_of(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from texts_of(item, where)


def check_context(passages: list[Passage], limit: int) -> None:
    """``answer_too_large`` when the passages' text together is over ``limit`` bytes."""
    chars = sum(len(p.text) for p in passages)
    if chars > limit:  # chars ≤ bytes: too large without encoding 50 MB to find out
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({chars} chars)")
    n = sum(len(p.text.encode("utf-8", "surrogatepass")) for p in passages)
    if n > limit:
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({n})")


def metadata_of(value: Any) -> dict[str, Any] | None:
    """A document's metadata: a dict, or a JSON object in a string; else ``None``."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            obj = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None
    return None


def make_passage(pid: Any, content: Any, score: Any, meta: Any, where: str, i: int) -> Passage:
    """One passage, its ID from ``pid`` or else from its metadata (:data:`ID_KEYS`); a
    mistyped ID or text is ``bad_attribute``."""
    if type(content) is not str:
        raise DecodeError(
            "bad_attribute", f"{where} {i} content is {type(content).__name__}, not a string"
        )
    metadata = metadata_of(meta) if meta is not None else None
    if pid is None and metadata is not None:
        pid = next((metadata[k] for k in ID_KEYS if metadata.get(k) is not None), None)
    if type(pid) is not str and pid is not None:
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise DecodeError(
                "bad_attribute", f"{where} {i} id is {type(pid).__name__}, not a string"
            )
        pid = str(pid)
    source = metadata.get("source") if metadata is not None else None
    return Passage(
        id=pid or "",
        text=content,
        source=source if isinstance(source, str) else None,
        score=float(score) if type(score) is float or (type(score) is int) else None,
        metadata=metadata,
    )


def text_from_json(obj: Any, depth: int = 0) -> str | None:
    """The answer's text inside a framework's JSON output (``{"answer": …}``, chat choices,
    text parts), or ``None``."""
    if depth > 6:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        for k in _TEXT_KEYS:
            if k in obj:
                t = text_from_json(obj[k], depth + 1)
                if t is not None:
                    return t
        for k in ("generations", "messages", "choices"):
            if isinstance(obj.get(k), list) and obj[k]:
                return text_from_json(obj[k][-1] if k == "messages" else obj[k][0], depth + 1)
        if obj.get("type") == "text" and isinstance(obj.get("text"), str):
            return str(obj["text"])
        return None
    if isinstance(obj, list) and obj:
        if all(isinstance(x, dict) and x.get("type") == "text" for x in obj):
            return "".join(str(x.get("text", "")) for x in obj)
        return text_from_json(obj[0], depth + 1)
    return None


def messages_text(value: Any) -> str | None:
    """The text of the last assistant message in OpenTelemetry GenAI messages
    (``gen_ai.output.messages``: a JSON list of ``{role, parts: [{type, content}]}``); ``None``
    when there is none (a tool call, no text part)."""
    messages = json_value(value) if isinstance(value, str) else value
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") not in (None, "assistant"):
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            texts = [
                p["content"]
                for p in parts
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("content"), str)
            ]
            if texts:
                return "".join(texts)
        if isinstance(message.get("content"), str):
            return str(message["content"])
    return None


def passages_from_items(items: list[Any], where: str, limits: Limits) -> list[Passage]:
    """Documents as frameworks serialise them into JSON → passages: LangChain's
    ``{page_content, metadata, id}``, LlamaIndex's node-with-score ``{node: {id_, text,
    metadata}, score}`` (the item itself possibly a JSON string), plain ``{id, content|text,
    score, metadata}``. A document without text becomes a passage with ``text=""``."""
    if len(items) > limits.max_passages:
        raise DecodeError("too_many_passages", f"{len(items)} documents > {limits.max_passages}")
    out: list[Passage] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = json_value(item)
        if not isinstance(item, dict):
            raise DecodeError("bad_attribute", f"{where} document {i} is not an object")
        score = item.get("score")
        node = item.get("node")
        doc: dict[str, Any] = node if isinstance(node, dict) else item
        pid = next((doc[k] for k in ("id", "id_") if doc.get(k) is not None), None)
        text = next((doc[k] for k in ("page_content", "content", "text") if k in doc), "")
        out.append(
            make_passage(pid, "" if text is None else text, score, doc.get("metadata"), where, i)
        )
    check_context(out, limits.max_context_bytes)
    return out
