"""Real RAG pipelines traced by the real instrumentations: the specimen (docs/design.md) as each
framework answers it (only the LLM and the embeddings are fakes), its trace as OTLP bytes.

Run as ``python -m tests.integration.dialect_traces OUTDIR``: every instrumentation patches its
framework process-wide (and MLflow reads its settings from the environment), so the traces are
made in a child process of their own and written as ``OUTDIR/<case>.pb`` (one OTLP
``ExportTraceServiceRequest`` per trace, protobuf) plus ``OUTDIR/versions.json``.

What each real instrumentation emits was looked at before the readers were written (see
docs/dialects.md); the notes below are what a pipeline needs to make a deterministic trace.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.integration.trace_export import (
    Cases,
    captured,
    instrumented,
    versions,
    write_cases,
)

QUESTION = "How long do we keep audit logs, and can I extend it?"
PASSAGES = {
    "p-3310": "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
    "p-3311": "Retention cannot be configured from the dashboard. Contact your account manager "
    "to discuss extensions.",
    "p-3312": "Enterprise agreements may include custom data retention terms negotiated at "
    "contract signing.",
}
ANSWER = (
    "Audit logs are retained for 90 days on the Business plan. [p-3310] "
    "Retention can be extended through a custom term in an Enterprise agreement. [p-3310] "
    "Changing it is not possible from the dashboard. [p-3312]"
)
#: The same answer citing by position, as DSPy programs that number their sources do (and the
#: agents of agent_traces, by the position the model saw each passage at across two searches).
NUMBERED_ANSWER = ANSWER.replace("[p-3310]", "[1]").replace("[p-3312]", "[3]")

#: Distributions whose versions the traces were made with (docs/dialects.md's table).
PACKAGES = (
    "langchain-core",
    "openinference-instrumentation-langchain",
    "llama-index-core",
    "openinference-instrumentation-llama-index",
    "haystack-ai",
    "openinference-instrumentation-haystack",
    "dspy",
    "openinference-instrumentation-dspy",
    "opentelemetry-instrumentation-langchain",
    "opentelemetry-instrumentation-llamaindex",
    "mlflow-tracing",
    "opentelemetry-util-genai",
    "opentelemetry-sdk",
)

CASES = Cases()
case = CASES.case


def _vector(text: str) -> list[float]:
    """A deterministic embedding: every document gets a distinct score (no random ties)."""
    return [b / 255 for b in hashlib.sha256(text.encode()).digest()[:16]]


# -- LangChain ------------------------------------------------------------------------------


def _langchain_chain(docs: Sequence[Any]) -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents(list(docs))
    retriever = store.as_retriever(search_kwargs={"k": len(docs)})
    prompt = ChatPromptTemplate.from_template("Answer from the context.\n{context}\nQ: {question}")
    model = FakeListChatModel(responses=[ANSWER])
    return (
        {"context": retriever, "question": RunnablePassthrough()}
        | prompt
        | model
        | StrOutputParser()
    )


def _langchain_docs() -> list[Any]:
    from langchain_core.documents import Document

    return [
        Document(id=pid, page_content=text, metadata={"passage_id": pid})
        for pid, text in PASSAGES.items()
    ]


@case("openinference-langchain")
def openinference_langchain() -> bytes:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    with instrumented(LangChainInstrumentor()) as encoded:
        _langchain_chain(_langchain_docs()).invoke(QUESTION)
        spans = encoded()
    return spans


@case("openllmetry-langchain")
def openllmetry_langchain() -> bytes:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    with instrumented(LangchainInstrumentor()) as encoded:
        _langchain_chain(_langchain_docs()).invoke(QUESTION)
        spans = encoded()
    return spans


# -- LlamaIndex -----------------------------------------------------------------------------


def _llamaindex_query() -> None:
    """Documents loaded the usual way: the app's passage IDs in metadata, node IDs UUIDs."""
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback

    class FakeEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return _vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return _vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _vector(text)

    class FakeLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="fake")

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=ANSWER)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            yield CompletionResponse(text=ANSWER, delta=ANSWER)

    docs = [Document(text=text, metadata={"passage_id": pid}) for pid, text in PASSAGES.items()]
    index = VectorStoreIndex.from_documents(docs, embed_model=FakeEmbedding())
    index.as_query_engine(llm=FakeLLM(), similarity_top_k=len(docs)).query(QUESTION)


@case("openinference-llamaindex")
def openinference_llamaindex() -> bytes:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    with instrumented(LlamaIndexInstrumentor()) as encoded:
        _llamaindex_query()
        spans = _only_query_trace(encoded())
    return spans


@case("openllmetry-llamaindex")
def openllmetry_llamaindex() -> bytes:
    # Its import needs llama-index-llms-openai installed (no API is called).
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    with instrumented(LlamaIndexInstrumentor()) as encoded:
        _llamaindex_query()
        spans = _only_query_trace(encoded())
    return spans


def _only_query_trace(payload: bytes) -> bytes:
    """Indexing makes traces of its own (node parsing, embedding): keep the query's trace,
    the one whose root ended last."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest.FromString(payload)
    spans = [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    roots = [sp for sp in spans if not sp.parent_span_id]
    keep = max(roots, key=lambda sp: sp.end_time_unix_nano).trace_id
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            kept = [sp for sp in ss.spans if sp.trace_id == keep]
            del ss.spans[:]
            ss.spans.extend(kept)
    return bytes(req.SerializeToString())


# -- Haystack -------------------------------------------------------------------------------


@case("openinference-haystack")
def openinference_haystack() -> bytes:
    from haystack import Document, Pipeline, component
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from openinference.instrumentation.haystack import HaystackInstrumentor

    class FakeChatGenerator:  # "Generator" in the name: the instrumentor's LLM span
        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage]) -> dict[str, Any]:
            return {"replies": [ChatMessage.from_assistant(ANSWER)]}

    # Haystack reads the sockets' types from the annotations (strings in this module).
    FakeChatGenerator.run.__annotations__ = {"messages": list[ChatMessage], "return": dict}
    # The instrumentor wraps each component class by its import path: make it resolvable.
    FakeChatGenerator.__qualname__ = "FakeChatGenerator"
    generator = globals()["FakeChatGenerator"] = component(FakeChatGenerator)

    with instrumented(HaystackInstrumentor()) as encoded:
        # BM25Okapi: the default BM25L drops zero-score documents.
        store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi")
        store.write_documents(
            [Document(content=text, meta={"passage_id": pid}) for pid, text in PASSAGES.items()]
        )
        template = (
            "{% for d in documents %}[{{ d.meta.passage_id }}] {{ d.content }}\n{% endfor %}"
            "Q: {{ question }}"
        )
        pipe = Pipeline()
        pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=len(PASSAGES)))
        pipe.add_component(
            "prompt",
            ChatPromptBuilder(
                template=[ChatMessage.from_user(template)],
                required_variables=["documents", "question"],
            ),
        )
        pipe.add_component("llm", generator())
        pipe.connect("retriever.documents", "prompt.documents")
        pipe.connect("prompt.prompt", "llm.messages")
        pipe.run({"retriever": {"query": QUESTION}, "prompt": {"question": QUESTION}})
        spans = encoded()
    return spans


# -- DSPy -----------------------------------------------------------------------------------


@case("openinference-dspy")
def openinference_dspy() -> bytes:
    import dspy
    from dspy.utils.dummies import DummyLM
    from openinference.instrumentation.dspy import DSPyInstrumentor

    class Search:
        def __call__(self, query: str, k: int = 3, **kw: Any) -> list[Any]:
            return [dspy.dsp.utils.dotdict(long_text=t) for t in list(PASSAGES.values())[:k]]

    class RAG(dspy.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.retrieve = dspy.Retrieve(k=len(PASSAGES))
            self.answer = dspy.Predict("context, question -> answer")

        def forward(self, question: str) -> Any:
            passages = self.retrieve(question).passages
            numbered = [f"[{i}] {text}" for i, text in enumerate(passages, start=1)]
            return self.answer(context=numbered, question=question)

    with instrumented(DSPyInstrumentor()) as encoded:
        with dspy.context(lm=DummyLM([{"answer": NUMBERED_ANSWER}]), rm=Search()):
            RAG()(question=QUESTION)
        spans = encoded()
    return spans


# -- MLflow ---------------------------------------------------------------------------------


@case("mlflow-langchain")
def mlflow_langchain() -> bytes:
    """LangChain autologging, exported by MLflow's own OTLP exporter to a receiver here."""
    import mlflow
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from tests.integration.otlp_receiver import OtlpHttpReceiver

    with OtlpHttpReceiver() as receiver:
        # Without a tracking URI mlflow-tracing fails importing sqlparse; nothing is sent there.
        os.environ["MLFLOW_TRACKING_URI"] = "http://127.0.0.1:9"
        os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{receiver.url}/v1/traces"
        os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
        mlflow.langchain.autolog()
        try:
            _langchain_chain(_langchain_docs()).invoke(QUESTION)
            from mlflow.tracing.provider import provider as mlflow_provider

            mlflow_provider.get().force_flush()
        finally:
            mlflow.langchain.autolog(disable=True)
        merged = ExportTraceServiceRequest()
        for body in receiver.bodies:
            merged.MergeFromString(body)
        return bytes(merged.SerializeToString())


# -- OpenTelemetry GenAI conventions --------------------------------------------------------


def _genai(documents: Callable[[], list[Any]], *, answer: bool = True) -> bytes:
    from opentelemetry.util.genai.handler import TelemetryHandler
    from opentelemetry.util.genai.types import InputMessage, OutputMessage, TextPart

    def said(text: str, role: str) -> Any:
        cls = OutputMessage if role == "assistant" else InputMessage
        return cls(role=role, parts=[TextPart(content=text)])

    with captured() as (provider, encoded):
        handler = TelemetryHandler(tracer_provider=provider)
        with handler.workflow("support-rag") as workflow:
            workflow.input_messages = [said(QUESTION, "user")]
            with handler.retrieval(data_source_id="kb", provider="in-memory") as retrieval:
                retrieval.query_text = QUESTION
                retrieval.documents = documents()
            if answer:
                with handler.inference("fake", request_model="fake-model") as inference:
                    inference.input_messages = [said(QUESTION, "user")]
                    inference.output_messages = [said(ANSWER, "assistant")]
                workflow.output_messages = [said(ANSWER, "assistant")]
        return encoded()


@case("genai")
def genai_with_content() -> bytes:
    """Plain-dict documents carry their text under ``content`` (the util warns: deprecated)."""
    return _genai(
        lambda: [
            {"id": pid, "score": 0.9 - i / 10, "content": text}
            for i, (pid, text) in enumerate(PASSAGES.items())
        ]
    )


@case("genai-typed")
def genai_typed_documents() -> bytes:
    """The typed ``RetrievalDocument``: an ID and a score, no text."""
    from opentelemetry.util.genai.types import RetrievalDocument

    return _genai(
        lambda: [RetrievalDocument(id=pid, score=0.9 - i / 10) for i, pid in enumerate(PASSAGES)]
    )


@case("genai-retrieval-only")
def genai_retrieval_only() -> bytes:
    """A trace with documents and no answer (the model call failed, or is traced elsewhere)."""
    return _genai(
        lambda: [{"id": pid, "content": text} for pid, text in PASSAGES.items()], answer=False
    )


@case("plain-http")
def plain_http() -> bytes:
    """Ordinary traffic: an HTTP server span and a database call, nothing any dialect reads."""
    with captured() as (provider, encoded):
        tracer = provider.get_tracer("web")
        with tracer.start_as_current_span("GET /health", attributes={"http.route": "/health"}):
            tracer.start_span("SELECT 1", attributes={"db.system.name": "postgresql"}).end()
        return encoded()


def main(argv: Sequence[str]) -> int:
    # Message content on GenAI spans is opt-in.
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    warnings.simplefilter("ignore")  # the frameworks' deprecation notices are theirs
    only = set(argv[1:])
    return write_cases(
        Path(argv[0]), CASES, lambda name: not only or name in only, versions(PACKAGES)
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
