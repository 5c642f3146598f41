"""What a passage is to the shim: whatever a RAG framework hands it (a dict, a pydantic model or
object with the same fields, an ``(id, text)`` pair), normalised to (id, text, score, metadata)
strings that UTF-8 can carry."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["Passage", "PassageLike", "normalize", "utf8"]

PassageLike = Mapping[str, Any] | tuple[Any, Any] | Any
"""A dict (``id``, ``text``/``content``/``page_content``, optional ``score``, ``source``,
``metadata``), a pydantic model or object with the same fields (a LangChain ``Document`` works),
or an ``(id, text)`` pair."""

Passage = tuple[str, str, float | None, str | None]  # id, text, score, metadata (JSON text)

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD.

    Python strings may hold them (``surrogateescape``-decoded bytes, JSON ``"\\ud800"``); UTF-8
    cannot. The OTLP encoder drops such an attribute at export, logging a traceback each time,
    and an answer that loses its ``output.value`` is not scored at all. ``isascii`` is O(1).
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def _field(obj: Any, *names: str) -> Any:
    if isinstance(obj, Mapping):
        for n in names:
            v = obj.get(n)
            if v is not None:
                return v
        return None
    for n in names:
        v = getattr(obj, n, None)
        if v is not None:
            return v
    return None


def normalize(p: PassageLike, index: int) -> Passage:
    if type(p) is dict:  # the common case, without the slower Mapping/getattr probing
        pid = p.get("id")
        if pid is None:
            pid = p.get("document_id") or p.get("doc_id")
        text = p.get("text")
        if text is None:
            text = p.get("content") or p.get("page_content")
        score, meta, source = p.get("score"), p.get("metadata"), p.get("source")
    elif isinstance(p, tuple) and len(p) == 2:
        pid, text, score, meta, source = p[0], p[1], None, None, None
    else:
        pid = _field(p, "id", "document_id", "doc_id")
        text = _field(p, "text", "content", "page_content")
        score = _field(p, "score")
        meta = _field(p, "metadata")
        source = _field(p, "source")
    if pid is None and meta and isinstance(meta, Mapping):
        pid = _field(meta, "id", "document_id", "doc_id")
    metadata: str | None = None
    if source is not None or meta:
        md: dict[str, Any] = dict(meta) if isinstance(meta, Mapping) else {}
        if source is not None:
            md["source"] = source
        metadata = utf8(json.dumps(md, default=str, ensure_ascii=False)) if md else None
    return (
        utf8(pid if type(pid) is str else (str(pid) if pid is not None else str(index + 1))),
        utf8(text if type(text) is str else ("" if text is None else str(text))),
        float(score) if type(score) is float or type(score) is int else None,
        metadata,
    )
