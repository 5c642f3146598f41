"""Citations an instrumentation dropped: an answer whose request asked the provider for
citations, traced by an instrumentation that records the answer's text and not its citations
(docs/dialects.md, "Native citations").

Such an answer was not left uncited by the model, and scoring it would count every claim
``uncited`` and lower coverage for a fault of the tracing. It is counted under the trace outcome
``citations_not_recorded`` instead and explained: which instrumentation, and what records the
citations. Seen in real traces (tests/integration/native_traces.py):

* OpenLLMetry's anthropic instrumentation keeps the request's ``document`` /
  ``search_result`` blocks (with ``citations.enabled``) in ``gen_ai.input.messages`` and the
  answer's text blocks in ``gen_ai.output.messages``, without their ``citations``;
* ``opentelemetry-instrumentation-google-genai`` records the grounding tool
  (``gen_ai.tool.definitions``: ``file_search``, ``google_search``, …) and the answer's text,
  not the grounding metadata;
* ``opentelemetry-instrumentation-openai-v2`` records a Chat Completions answer's text, not its
  ``annotations``: an OpenAI search model (``gpt-4o-search-preview``, ``…-search-api``) searches
  the web on every request and cites with ``url_citation``, and the request's model is recorded.

* citemon's own shim, when a ``record_*_citations`` helper could not record the offsets (a
  redact hook that changes the answer's length, an answer over the attribute length limit): it
  says so in ``citemon.citations_dropped``;

Not detectable, so not flagged: Cohere under OpenLLMetry records neither the documents nor the
citations (a ``no_passages`` trace); the anthropic SDK's own tracing records neither content
nor documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from citemon._otlp.dialects.values import json_value
from citemon._otlp.spans import RawSpan, TraceSpan
from citemon_instrumentation import attributes as A
from citemon_instrumentation._native import is_openai_search_model

__all__ = ["citations_dropped", "dropped_citations"]

_GROUNDING_TOOLS: Final = frozenset(
    {"file_search", "google_search", "google_search_retrieval", "retrieval", "google_maps"}
)
_RECORDS_THEM: Final = {
    "anthropic": (
        "openinference-instrumentation-anthropic records them (the whole response in "
        "output.value), or add them to your answer span with "
        "citemon_instrumentation.record_anthropic_citations"
    ),
    "openai": (
        "openinference-instrumentation-openai records them (the whole response in "
        "output.value), or add them to your answer span with "
        "citemon_instrumentation.record_openai_citations"
    ),
    "gemini": (
        "openinference-instrumentation-google-genai records them (the whole response in "
        "output.value), or add them to your answer span with "
        "citemon_instrumentation.record_gemini_citations"
    ),
}


def _shown(value: str) -> str:
    """A string from the trace as an explanation shows it: as is when printable, else its
    repr (a terminal escape in a trace never reaches the terminal)."""
    return value if value.isprintable() else repr(value)


def _who(raw: RawSpan) -> str:
    return _shown(raw.scope) if raw.scope else "this instrumentation"


def _parts(messages: Any) -> Iterable[Mapping[str, Any]]:
    if not isinstance(messages, list):
        return
    for message in messages:
        if not isinstance(message, dict):
            continue
        for key in ("parts", "content"):
            value = message.get(key)
            if isinstance(value, list):
                yield from (p for p in value if isinstance(p, dict))


def _anthropic_sources(attrs: Mapping[str, Any]) -> int:
    """How many request blocks asked Anthropic for citations (``citations.enabled``)."""
    n = 0
    for part in _parts(json_value(attrs.get("gen_ai.input.messages"))):
        cfg = part.get("citations")
        if part.get("type") in ("document", "search_result") and isinstance(cfg, dict):
            n += cfg.get("enabled") is True
    return n


def _grounding_tools(attrs: Mapping[str, Any]) -> list[str]:
    tools = json_value(attrs.get("gen_ai.tool.definitions"))
    if not isinstance(tools, list):
        return []
    out = []
    for tool in tools:
        # A function declaration ({"type": "function", "name": …}) grounds nothing, whatever
        # the application named it (an agent's own `retrieval` function).
        if isinstance(tool, dict) and tool.get("type") != "function":
            name = next(
                (str(tool[k]) for k in ("type", "name") if str(tool.get(k)) in _GROUNDING_TOOLS),
                None,
            )
            if name is not None and name not in out:
                out.append(name)
    return out


def citations_dropped(raw: RawSpan) -> str | None:
    """Why the answer a dialect read from ``raw`` has citations the trace does not carry, or
    ``None`` when nothing says its request asked for any."""
    attrs = raw.attrs
    shim = attrs.get(A.CITEMON_CITATIONS_DROPPED)
    if isinstance(shim, str) and A.CITEMON_CITATIONS not in attrs:
        return f"{_shown(shim)}; fix that and the helper records them"
    provider = str(attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system") or "").lower()
    n = _anthropic_sources(attrs)
    if n:
        return (
            f"the request gave Anthropic {n} document/search-result block(s) with citations "
            f"enabled, and {_who(raw)} records the answer's text without its citations; "
            + _RECORDS_THEM["anthropic"]
        )
    tools = _grounding_tools(attrs)
    if tools and ("gemini" in provider or "vertex" in provider or "google" in provider):
        return (
            f"the request asked Gemini to ground its answer ({', '.join(tools)}), and "
            f"{_who(raw)} records the answer's text without its grounding metadata; "
            + _RECORDS_THEM["gemini"]
        )
    model = str(attrs.get("gen_ai.request.model") or "")
    if provider == "openai" and is_openai_search_model(model):
        return (
            f"the request asked OpenAI's search model {_shown(model)}, which cites the pages it "
            f"searched (url_citation annotations), and {_who(raw)} records the answer's text "
            "without them; " + _RECORDS_THEM["openai"]
        )
    return None


def dropped_citations(parts: Iterable[TraceSpan]) -> TraceSpan | None:
    """The answer part of a trace whose citations were dropped, when no part carries any."""
    held = list(parts)
    if any(p.citations is not None for p in held):
        return None
    return next((p for p in held if p.citations_dropped), None)
