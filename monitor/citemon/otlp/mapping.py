"""One span → one :class:`~citemon.core.records.AnswerRecord`: resource labels, passages from
OpenInference's per-document attributes and citemon's overflow, the answer text, the limits."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from citemon.core.errors import DecodeError
from citemon.core.records import AnswerRecord, Passage
from citemon.otlp.spans import DecodedBatch, RawSpan, ResourceInfo, TraceSpan
from citemon_instrumentation import attributes as A

_ANSWER_KINDS: Final = frozenset({"CHAIN", "LLM", "AGENT"})
_DOC_PREFIX_LEN: Final = len(A.RETRIEVAL_DOCUMENTS_PREFIX)
_ID_KEYS: Final = ("id", "document_id", "doc_id", "node_id", "chunk_id")
_TEXT_KEYS: Final = ("content", "text", "output", "answer", "result", "response", "data")


# -- spans → records ----------------------------------------------------------------------------


def resource_info(attrs: Mapping[str, Any]) -> ResourceInfo:
    def s(*keys: str) -> str | None:
        for k in keys:
            v = attrs.get(k)
            if isinstance(v, str) and v:
                return v
        return None

    return ResourceInfo(
        service=s(A.SERVICE_NAME),
        version=s(A.SERVICE_VERSION),
        environment=s(A.DEPLOYMENT_ENVIRONMENT, A.DEPLOYMENT_ENVIRONMENT_OLD),
    )


def _check_text(value: str, what: str, limit: int | None = None) -> None:
    if limit is not None and len(value) > limit:  # chars ≤ bytes: too large without encoding
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({len(value)} chars)")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates, from JSON "\ud800" escapes
        raise DecodeError("invalid_utf8", f"{what} is not valid UTF-8 text") from exc
    if limit is not None and n > limit:
        raise DecodeError("answer_too_large", f"{what} over {limit} bytes ({n})")


def _check_context(passages: list[Passage], limit: int) -> None:
    chars = sum(len(p.text) for p in passages)
    if chars > limit:  # chars ≤ bytes: too large without encoding 50 MB to find out
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({chars} chars)")
    n = sum(len(p.text.encode("utf-8", "surrogatepass")) for p in passages)
    if n > limit:
        raise DecodeError("answer_too_large", f"passages over {limit} bytes ({n})")


def _metadata(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            obj = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None
    return None


def _passage(pid: Any, content: Any, score: Any, meta: Any, where: str, i: int) -> Passage:
    if type(content) is not str:
        raise DecodeError(
            "bad_attribute", f"{where} {i} content is {type(content).__name__}, not a string"
        )
    metadata = _metadata(meta) if meta is not None else None
    if pid is None and metadata is not None:
        pid = next((metadata[k] for k in _ID_KEYS if metadata.get(k) is not None), None)
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


def _documents(attrs: Mapping[str, Any], max_passages: int) -> tuple[list[Passage], bool]:
    """``retrieval.documents.{i}.document.*`` (plus the shim's packed overflow) → passages;
    also whether any document came without content (then it cannot be judged)."""
    docs: dict[str, dict[str, Any]] = {}
    prefix = A.RETRIEVAL_DOCUMENTS_PREFIX
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        dot = key.find(".document.", _DOC_PREFIX_LEN)
        if dot < 0:
            continue
        index = key[_DOC_PREFIX_LEN:dot]
        d = docs.get(index)
        if d is None:
            if not index.isdigit():
                continue
            if len(docs) >= max_passages:
                raise DecodeError("too_many_passages", f"more than {max_passages} documents")
            d = docs[index] = {}
        d[key[dot + 10 :]] = value
    overflow: list[Any] = []
    packed = attrs.get(A.CITEMON_PASSAGES_OVERFLOW)
    if packed is not None:
        try:
            overflow = json.loads(packed) if isinstance(packed, str) else None  # type: ignore[assignment]
        except (json.JSONDecodeError, RecursionError):
            overflow = None  # type: ignore[assignment]
        if not isinstance(overflow, list):
            raise DecodeError("bad_attribute", f"{A.CITEMON_PASSAGES_OVERFLOW} is not a JSON array")
    if len(docs) + len(overflow) > max_passages:
        raise DecodeError(
            "too_many_passages", f"{len(docs) + len(overflow)} documents > {max_passages}"
        )
    missing = False
    out: list[Passage] = []
    for index in sorted(docs, key=int):
        d = docs[index]
        content = d.get(A.DOCUMENT_CONTENT)
        if content is None:
            missing, content = True, ""
        out.append(
            _passage(
                d.get(A.DOCUMENT_ID),
                content,
                d.get(A.DOCUMENT_SCORE),
                d.get(A.DOCUMENT_METADATA),
                "document",
                int(index),
            )
        )
    for j, d in enumerate(overflow):
        if not isinstance(d, dict):
            raise DecodeError("bad_attribute", f"overflow document {j} is not an object")
        out.append(
            _passage(
                d.get("id"),
                d.get("content", ""),
                d.get("score"),
                d.get("metadata"),
                "overflow document",
                j,
            )
        )
    return out, missing


def _ids_from_output(attrs: Mapping[str, Any], docs: list[Passage]) -> None:
    """LangChain's instrumentor leaves ``document.id`` out but puts the retriever's output
    (``{"documents": [{"id": ..., ...}]}``) in ``output.value``: take the IDs from there."""
    if all(d.id for d in docs):
        return
    out = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(out, str) or not out.startswith("{"):
        return
    try:
        obj = json.loads(out)
    except (json.JSONDecodeError, RecursionError):
        return
    listed = obj.get("documents") if isinstance(obj, dict) else None
    if not isinstance(listed, list) or len(listed) != len(docs):
        return
    for d, item in zip(docs, listed, strict=True):
        if not d.id and isinstance(item, dict):
            pid = item.get("id")
            if pid is None and isinstance(item.get("metadata"), dict):
                pid = next(
                    (item["metadata"][k] for k in _ID_KEYS if item["metadata"].get(k) is not None),
                    None,
                )
            if isinstance(pid, str | int) and not isinstance(pid, bool):
                d.id = str(pid)


def _text_from_json(obj: Any, depth: int = 0) -> str | None:
    if depth > 6:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        for k in _TEXT_KEYS:
            if k in obj:
                t = _text_from_json(obj[k], depth + 1)
                if t is not None:
                    return t
        for k in ("generations", "messages", "choices"):
            if isinstance(obj.get(k), list) and obj[k]:
                return _text_from_json(obj[k][-1] if k == "messages" else obj[k][0], depth + 1)
        if obj.get("type") == "text" and isinstance(obj.get("text"), str):
            return str(obj["text"])
        return None
    if isinstance(obj, list) and obj:
        if all(isinstance(x, dict) and x.get("type") == "text" for x in obj):
            return "".join(str(x.get("text", "")) for x in obj)
        return _text_from_json(obj[0], depth + 1)
    return None


def _answer_text(kind: str, attrs: Mapping[str, Any]) -> str | None:
    if kind == "LLM":
        content = attrs.get(A.LLM_OUTPUT_MESSAGE_CONTENT)
        if isinstance(content, str):
            return content
    value = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(value, str):
        return None
    if attrs.get(A.OUTPUT_MIME_TYPE) == "application/json" or value.startswith(("{", "[")):
        try:
            return _text_from_json(json.loads(value))
        except (json.JSONDecodeError, RecursionError):
            pass
    return value


def _plain(attrs: Mapping[str, Any], key: str, mime_key: str) -> str | None:
    v = attrs.get(key)
    if isinstance(v, str) and attrs.get(mime_key) != "application/json":
        return v
    return None


def _classify(
    res: ResourceInfo,
    raw: RawSpan,
    max_passages: int,
    max_answer_bytes: int,
    max_context_bytes: int,
) -> AnswerRecord | TraceSpan | None:
    attrs = raw.attrs
    kind_v = attrs.get(A.SPAN_KIND)
    kind = kind_v.upper() if isinstance(kind_v, str) else ""
    has_docs = A.CITEMON_PASSAGES_COUNT in attrs or any(
        k.startswith(A.RETRIEVAL_DOCUMENTS_PREFIX) for k in attrs
    )
    is_answer = raw.name == A.ANSWER_SPAN_NAME or (
        has_docs and kind != "RETRIEVER" and A.OUTPUT_VALUE in attrs
    )
    if is_answer:
        return _record(res, raw, max_passages, max_answer_bytes, max_context_bytes)
    base = TraceSpan(
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        parent_span_id=raw.parent_span_id,
        kind=kind,
        start_ns=raw.start_ns,
        end_ns=raw.end_ns,
        resource=res,
        truncated=raw.dropped_attributes > 0,
    )
    if kind == "RETRIEVER" and has_docs:
        docs, missing = _documents(attrs, max_passages)
        _check_context(docs, max_context_bytes)
        _ids_from_output(attrs, docs)
        base.documents = docs
        base.truncated |= missing
        base.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
        if base.question is not None:
            _check_text(base.question, "question", max_answer_bytes)
        base.nbytes += sum(len(d.text) for d in docs)
        return base
    if kind in _ANSWER_KINDS:
        answer = _answer_text(kind, attrs)
        if answer is not None:
            _check_text(answer, "answer", max_answer_bytes)
            base.answer = answer
            base.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
            if base.question is not None:
                _check_text(base.question, "question", max_answer_bytes)
            base.nbytes += len(answer) + len(base.question or "")
            return base
    if not raw.parent_span_id:
        return base
    return None


def _record(
    res: ResourceInfo,
    raw: RawSpan,
    max_passages: int,
    max_answer_bytes: int,
    max_context_bytes: int,
) -> AnswerRecord | None:
    attrs = raw.attrs
    answer = attrs.get(A.OUTPUT_VALUE)
    if answer is None:
        if raw.error:
            return None  # the handler failed before answering: nothing to score
        raise DecodeError("bad_attribute", f"answer span {raw.span_id} has no {A.OUTPUT_VALUE}")
    if not isinstance(answer, str):
        raise DecodeError(
            "bad_attribute", f"{A.OUTPUT_VALUE} is {type(answer).__name__}, not a string"
        )
    question = attrs.get(A.INPUT_VALUE, "")
    if not isinstance(question, str):
        raise DecodeError(
            "bad_attribute", f"{A.INPUT_VALUE} is {type(question).__name__}, not a string"
        )
    _check_text(answer, "answer", max_answer_bytes)
    _check_text(question, "question", max_answer_bytes)
    passages, missing = _documents(attrs, max_passages)
    _check_context(passages, max_context_bytes)
    for i, p in enumerate(passages):
        _check_text(p.text, "document")
        if not p.id:
            p.id = str(i + 1)
    count = attrs.get(A.CITEMON_PASSAGES_COUNT)
    truncated = (
        attrs.get(A.CITEMON_TRUNCATED) is True
        or raw.dropped_attributes > 0
        or missing
        or (isinstance(count, int) and count != len(passages))
    )
    return AnswerRecord(
        id=raw.span_id,
        question=question,
        answer=answer,
        passages=passages,
        service=res.service,
        version=res.version,
        environment=res.environment,
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        truncated=truncated,
    )


def decode_spans(
    spans: Iterable[tuple[ResourceInfo, RawSpan | DecodeError]],
    max_passages: int,
    max_answer_bytes: int,
    max_context_bytes: int,
) -> DecodedBatch:
    batch = DecodedBatch()
    answered: set[str] = set()
    for res, raw in spans:
        batch.span_count += 1
        if isinstance(raw, DecodeError):
            batch.errors.append(raw)
            continue
        try:
            out = _classify(res, raw, max_passages, max_answer_bytes, max_context_bytes)
        except DecodeError as exc:
            batch.errors.append(exc)
            continue
        if out is None:
            batch.skipped += 1
        elif isinstance(out, AnswerRecord):
            batch.records.append(out)
            answered.add(raw.trace_id)
        else:
            batch.spans.append(out)
    if answered:
        # A trace with a self-contained answer is scored once: tell the assembler to let go of
        # any OpenInference parts of it (they may have arrived in an earlier message).
        batch.spans = [s for s in batch.spans if s.trace_id not in answered]
        for r in batch.records:
            if r.trace_id is not None:
                batch.spans.append(
                    TraceSpan(
                        trace_id=r.trace_id,
                        span_id=r.span_id or "",
                        parent_span_id="-",
                        kind="",
                        start_ns=0,
                        end_ns=0,
                        resource=ResourceInfo(),
                        answered=True,
                    )
                )
    useful = batch.records or any(
        s.documents is not None or s.answer is not None for s in batch.spans
    )
    if not useful:
        if batch.errors:
            raise batch.errors[0]
        if not any(s.is_root for s in batch.spans):
            raise DecodeError("no_answer_spans", f"{batch.span_count} spans, none an answer")
    return batch
