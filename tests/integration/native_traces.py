"""The specimen answered by each provider's real SDK with the provider's own citations, traced by
the real instrumentations: a local HTTP server (127.0.0.1) returns the provider's documented
response JSON, so only the model is fake.

The specimen without markers: sentence 1 cites p-3310; sentence 2 cites p-3310 where p-3312
supports it; sentence 3 cites p-3312 where p-3311 supports it. The passages reach the model in
the order p-3311, p-3310, p-3312, so a provider's document index is not the passage number.

Run as ``python -m tests.integration.native_traces OUTDIR [CASE …]``: each instrumentation patches
its SDK process-wide, so the traces are made in a child process and written as
``OUTDIR/<case>.pb`` (one OTLP ``ExportTraceServiceRequest`` per trace) plus
``OUTDIR/versions.json``.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.integration.dialect_traces import PASSAGES, QUESTION
from tests.integration.trace_export import (
    Cases,
    JsonServer,
    captured,
    traced,
    versions,
    write_cases,
)

SENTENCES = (
    "Audit logs are retained for 90 days on the Business plan.",
    "Retention can be extended through a custom term in an Enterprise agreement.",
    "Changing it is not possible from the dashboard.",
)
ANSWER = " ".join(SENTENCES)
ORDER = ("p-3311", "p-3310", "p-3312")
"""The order the passages reach the model in (a document index is not the passage number)."""
CITED = ("p-3310", "p-3310", "p-3312")
"""What each sentence cites."""
FILE_IDS = {pid: f"file-{pid[2:]}aa" for pid in ORDER}
URLS = {pid: f"https://kb.example.com/{pid}" for pid in ORDER}

PACKAGES = (
    "anthropic",
    "openai",
    "cohere",
    "google-genai",
    "openinference-instrumentation-anthropic",
    "openinference-instrumentation-openai",
    "openinference-instrumentation-cohere",
    "openinference-instrumentation-google-genai",
    "opentelemetry-instrumentation-anthropic",
    "opentelemetry-instrumentation-cohere",
    "opentelemetry-instrumentation-google-genai",
    "opentelemetry-instrumentation-openai-v2",
    "opentelemetry-util-genai",
    "opentelemetry-sdk",
)


def _offsets() -> list[tuple[int, int]]:
    out, at = [], 0
    for s in SENTENCES:
        out.append((at, at + len(s)))
        at += len(s) + 1
    return out


def _quote(pid: str) -> str:
    """What Anthropic's ``cited_text`` holds: a span of the cited document."""
    return PASSAGES[pid].split(". ")[0]


# -- the providers' documented responses ---------------------------------------------------------


def anthropic_message(kind: str) -> dict[str, Any]:
    """Messages API: one text block per cited sentence (Anthropic splits text at citations),
    ``char_location`` into ``document`` blocks or ``search_result_location`` into
    ``search_result`` blocks, with ``cited_text``."""
    content: list[dict[str, Any]] = []
    for i, (sentence, pid) in enumerate(zip(SENTENCES, CITED, strict=True)):
        index = ORDER.index(pid)
        quote = _quote(pid)
        if kind == "documents":
            citation: dict[str, Any] = {
                "type": "char_location",
                "cited_text": quote,
                "document_index": index,
                "document_title": pid,
                "start_char_index": 0,
                "end_char_index": len(quote),
                "file_id": None,
            }
        else:
            citation = {
                "type": "search_result_location",
                "cited_text": PASSAGES[pid],
                "search_result_index": index,
                "source": URLS[pid],
                "title": pid,
                "start_block_index": 0,
                "end_block_index": 1,
            }
        if i:
            content.append({"type": "text", "text": " "})
        content.append({"type": "text", "text": sentence, "citations": [citation]})
    return {
        "id": "msg_01specimen",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 310, "output_tokens": 42},
    }


def openai_response() -> dict[str, Any]:
    """Responses API after ``file_search`` with ``include=["file_search_call.results"]``:
    ``file_citation`` annotations whose ``index`` is where the citation is inserted (the end of
    the sentence it supports), matched to the search results by file ID."""
    annotations = [
        {
            "type": "file_citation",
            "index": end,
            "file_id": FILE_IDS[pid],
            "filename": f"{pid}.md",
        }
        for (_, end), pid in zip(_offsets(), CITED, strict=True)
    ]
    return {
        "id": "resp_specimen",
        "object": "response",
        "created_at": 1764900000,
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "id": "fs_specimen",
                "type": "file_search_call",
                "status": "completed",
                "queries": [QUESTION],
                "results": [
                    {
                        "file_id": FILE_IDS[pid],
                        "filename": f"{pid}.md",
                        "score": round(0.9 - 0.1 * n, 2),
                        "text": PASSAGES[pid],
                        "attributes": {"passage_id": pid},
                    }
                    for n, pid in enumerate(ORDER)
                ],
            },
            {
                "id": "msg_specimen",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": ANSWER,
                        "annotations": annotations,
                        "logprobs": [],
                    }
                ],
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_kb"]}],
        "usage": {
            "input_tokens": 300,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 340,
        },
    }


def openai_chat_completion() -> dict[str, Any]:
    """Chat Completions with web search: ``url_citation`` annotations with a character range
    and a URL, and no page text anywhere."""
    annotations = [
        {
            "type": "url_citation",
            "url_citation": {
                "start_index": start,
                "end_index": end,
                "url": URLS[pid],
                "title": pid,
            },
        }
        for (start, end), pid in zip(_offsets(), CITED, strict=True)
    ]
    return {
        "id": "chatcmpl-specimen",
        "object": "chat.completion",
        "created": 1764900000,
        "model": "gpt-4o-search-preview",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": ANSWER,
                    "refusal": None,
                    "annotations": annotations,
                },
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
    }


def cohere_chat() -> dict[str, Any]:
    """v2 chat with ``documents``: ``message.citations`` with ``start``/``end`` into the
    answer, the cited phrase and the source documents (the request's document IDs)."""
    citations = []
    for (start, end), pid in zip(_offsets(), CITED, strict=True):
        citations.append(
            {
                "start": start,
                "end": end,
                "text": ANSWER[start:end],
                "type": "TEXT_CONTENT",
                "sources": [
                    {
                        "type": "document",
                        "id": pid,
                        "document": {"id": pid, "text": PASSAGES[pid]},
                    }
                ],
            }
        )
    return {
        "id": "cohere-specimen",
        "finish_reason": "COMPLETE",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": ANSWER}],
            "citations": citations,
        },
        "usage": {
            "billed_units": {"input_tokens": 300, "output_tokens": 40},
            "tokens": {"input_tokens": 310, "output_tokens": 40},
        },
    }


def gemini_response() -> dict[str, Any]:
    """generateContent with file search grounding (REST, camelCase): ``groundingSupports``
    segments in UTF-8 byte offsets (a segment starting at 0 has no ``startIndex``) pointing at
    ``groundingChunks`` with the retrieved text."""
    supports = []
    for (start, end), pid in zip(_offsets(), CITED, strict=True):
        segment: dict[str, Any] = {
            "endIndex": len(ANSWER[:end].encode()),
            "text": ANSWER[start:end],
        }
        if start:
            segment["startIndex"] = len(ANSWER[:start].encode())
        supports.append({"segment": segment, "groundingChunkIndices": [ORDER.index(pid)]})
    chunks = [
        {
            "retrievedContext": {
                "title": f"{pid}.md",
                "text": PASSAGES[pid],
                "fileSearchStore": "fileSearchStores/kb",
                "customMetadata": [{"key": "passage_id", "stringValue": pid}],
            }
        }
        for pid in ORDER
    ]
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": ANSWER}]},
                "finishReason": "STOP",
                "index": 0,
                "groundingMetadata": {"groundingChunks": chunks, "groundingSupports": supports},
            }
        ],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 40},
        "modelVersion": "gemini-2.5-flash",
    }


# -- a local server speaking each provider's API -------------------------------------------------


class _Server(JsonServer):
    """127.0.0.1 HTTP server answering every POST with ``reply`` (set per case)."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__()
        self.reply = reply
        self.requests: list[dict[str, Any]] = []

    def respond(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append({"path": path, "body": body})
        return self.reply


@contextmanager
def serving(reply: dict[str, Any]) -> Iterator[_Server]:
    with _Server(reply) as server:
        yield server


# -- the applications' calls ---------------------------------------------------------------------


def _anthropic_documents() -> list[dict[str, Any]]:
    return [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": PASSAGES[pid]},
            "title": pid,
            "citations": {"enabled": True},
        }
        for pid in ORDER
    ]


def _anthropic_search_results() -> list[dict[str, Any]]:
    return [
        {
            "type": "search_result",
            "source": URLS[pid],
            "title": pid,
            "content": [{"type": "text", "text": PASSAGES[pid]}],
            "citations": {"enabled": True},
        }
        for pid in ORDER
    ]


def call_anthropic(kind: str, **client_options: Any) -> None:
    import anthropic

    blocks = _anthropic_documents() if kind == "documents" else _anthropic_search_results()
    with serving(anthropic_message(kind)) as server:
        client = anthropic.Anthropic(api_key="test", base_url=server.url, **client_options)
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=512,
            messages=[{"role": "user", "content": [*blocks, {"type": "text", "text": QUESTION}]}],
        )


def call_openai_responses() -> None:
    import openai

    with serving(openai_response()) as server:
        client = openai.OpenAI(api_key="test", base_url=f"{server.url}/v1")
        client.responses.create(
            model="gpt-4.1",
            input=QUESTION,
            tools=[{"type": "file_search", "vector_store_ids": ["vs_kb"]}],
            include=["file_search_call.results"],
        )


def call_openai_chat() -> None:
    import openai

    with serving(openai_chat_completion()) as server:
        client = openai.OpenAI(api_key="test", base_url=f"{server.url}/v1")
        client.chat.completions.create(
            model="gpt-4o-search-preview",
            web_search_options={},
            messages=[{"role": "user", "content": QUESTION}],
        )


def call_cohere() -> None:
    import cohere

    with serving(cohere_chat()) as server:
        client = cohere.ClientV2(api_key="test", base_url=server.url)
        client.chat(
            model="command-a-03-2025",
            messages=[{"role": "user", "content": QUESTION}],
            documents=[{"id": pid, "data": {"text": PASSAGES[pid]}} for pid in ORDER],
        )


def call_gemini() -> None:
    from google import genai
    from google.genai import types

    with serving(gemini_response()) as server:
        client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
        client.models.generate_content(
            model="gemini-2.5-flash",
            contents=QUESTION,
            config=types.GenerateContentConfig(
                tools=[
                    types.Tool(
                        file_search=types.FileSearch(
                            file_search_store_names=["fileSearchStores/kb"]
                        )
                    )
                ]
            ),
        )


# -- the cases: one SDK call under one instrumentation ------------------------------------------

CASES = Cases()
case = CASES.case


@case("openinference-anthropic-documents")
def oi_anthropic_documents() -> bytes:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    return traced(
        AnthropicInstrumentor(), lambda: call_anthropic("documents", open_telemetry=False)
    )


@case("openinference-anthropic-search-results")
def oi_anthropic_search_results() -> bytes:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    return traced(
        AnthropicInstrumentor(), lambda: call_anthropic("search_results", open_telemetry=False)
    )


@case("openinference-openai-responses")
def oi_openai_responses() -> bytes:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return traced(OpenAIInstrumentor(), call_openai_responses)


@case("openinference-openai-chat-url")
def oi_openai_chat() -> bytes:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return traced(OpenAIInstrumentor(), call_openai_chat)


@case("openinference-cohere")
def oi_cohere() -> bytes:
    from openinference.instrumentation.cohere import CohereInstrumentor

    return traced(CohereInstrumentor(), call_cohere)


@case("openinference-google-genai")
def oi_gemini() -> bytes:
    from openinference.instrumentation.google_genai import GoogleGenAIInstrumentor

    return traced(GoogleGenAIInstrumentor(), call_gemini)


@case("openllmetry-anthropic")
def openllmetry_anthropic() -> bytes:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    return traced(
        AnthropicInstrumentor(), lambda: call_anthropic("documents", open_telemetry=False)
    )


@case("anthropic-own-tracing")
def anthropic_own() -> bytes:
    from opentelemetry import trace

    with captured() as (provider, encoded):
        trace.set_tracer_provider(provider)
        call_anthropic("documents")
        return encoded()


@case("openllmetry-cohere")
def openllmetry_cohere() -> bytes:
    from opentelemetry.instrumentation.cohere import CohereInstrumentor

    return traced(CohereInstrumentor(), call_cohere)


@case("otel-google-genai")
def otel_gemini() -> bytes:
    from opentelemetry.instrumentation.google_genai import GoogleGenAiSdkInstrumentor

    return traced(GoogleGenAiSdkInstrumentor(), call_gemini)


@case("otel-openai-v2")
def otel_openai_v2() -> bytes:
    """Made in a venv of its own: opentelemetry-instrumentation-openai-v2 2.4b0 imports a module
    that opentelemetry-util-genai ≥ 1.2b0 renamed, and the dialect tests need util-genai 1.3b0.
    ``make otel-openai-v2`` makes that venv (tests/otel-openai-v2/requirements.txt);
    test_native_citations.py runs ``python -m tests.integration.native_traces OUT
    otel-openai-v2`` with its interpreter."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return traced(OpenAIInstrumentor(), call_openai_chat)


#: Cases made only when named (their instrumentation does not install beside the others).
SEPARATE = frozenset({"otel-openai-v2"})


def main(argv: Sequence[str]) -> int:
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
    warnings.simplefilter("ignore")  # the SDKs' deprecation notices are theirs
    only = set(argv[1:])
    return write_cases(
        Path(argv[0]),
        CASES,
        lambda name: name in only or (not only and name not in SEPARATE),
        versions(PACKAGES, absent="absent"),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
