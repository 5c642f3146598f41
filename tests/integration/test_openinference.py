"""A real langchain-core RAG chain under the real OpenInference LangChain instrumentor.

No server: the chain runs in-process (fake chat model, in-memory vector store, deterministic fake
embedding); the spans are captured with ``InMemorySpanExporter``, encoded to OTLP exactly as an
exporter would, and decoded by the monitor. What the instrumentor really emits (checked below):
documents on a ``RETRIEVER`` span as ``retrieval.documents.{i}.document.content``/``.metadata``
with **no** ``document.id`` (LangChain's ``Document.id`` only appears in the retriever's JSON
``output.value``); the final answer on the root ``CHAIN`` span's ``output.value`` — plain text
after a ``StrOutputParser``, a JSON-serialised ``AIMessage`` when the chain ends at the model.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp_proto

# The instrumentor calls a LangChain API that langchain-core 1.x deprecates; with warnings as
# errors that would abort its span updates. Its warning, not ours: let it through.
pytestmark = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

ANSWER = "Audit logs are retained for 90 days on the Business plan. [p-3310]"
DOCS = [
    Document(
        id="p-3310",
        page_content="Audit log retention is 90 days on the Business plan.",
        metadata={"source": "security/audit-logs.md"},
    ),
    Document(
        id="p-3311",
        page_content="Retention cannot be configured from the dashboard.",
        metadata={"source": "security/retention.md"},
    ),
]


@pytest.fixture
def captured() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "lc-bot", "service.version": "3"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()  # it patches langchain globally: restore it


def _chain(docs: list[Document], *, parser: bool) -> Runnable[str, object]:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents(docs)
    retriever = store.as_retriever(search_kwargs={"k": len(docs)})
    prompt = ChatPromptTemplate.from_template("Answer from the context.\n{context}\nQ: {question}")
    model = FakeListChatModel(responses=[ANSWER])
    chain: Runnable[str, object] = (
        {"context": retriever, "question": RunnablePassthrough()} | prompt | model
    )
    return chain | StrOutputParser() if parser else chain


def _assemble(exporter: InMemorySpanExporter, *, one_span_per_message: bool) -> list[AnswerRecord]:
    spans = exporter.get_finished_spans()
    messages = [[s] for s in spans] if one_span_per_message else [list(spans)]
    assembler = TraceAssembler()
    out: list[AnswerRecord] = []
    for m in messages:
        try:
            batch = decode_otlp_proto(encode_spans(m).SerializeToString())
        except DecodeError as exc:
            assert exc.reason == "no_answer_spans"  # e.g. the PROMPT span alone: skipped
            continue
        assert batch.records == []  # no self-contained answer span in an OpenInference trace
        out += assembler.add(batch.spans)
    assert assembler.dropped_incomplete == 0 and len(assembler) == 0
    return out


@pytest.mark.parametrize("parser", [True, False], ids=["str-parser", "ends-at-model"])
@pytest.mark.parametrize("split", [False, True], ids=["one-message", "span-per-message"])
def test_langchain_chain_becomes_one_record(
    captured: InMemorySpanExporter, parser: bool, split: bool
) -> None:
    _chain(DOCS, parser=parser).invoke("How long do we keep audit logs?")

    retriever = next(
        s
        for s in captured.get_finished_spans()
        if (s.attributes or {}).get("openinference.span.kind") == "RETRIEVER"
    )
    attrs = dict(retriever.attributes or {})
    # What the real instrumentor emits: content and metadata, no document.id.
    assert "retrieval.documents.0.document.content" in attrs
    assert "retrieval.documents.0.document.metadata" in attrs
    assert not any(k.endswith(".document.id") for k in attrs)

    (record,) = _assemble(captured, one_span_per_message=split)
    assert record.answer == ANSWER
    assert record.question == "How long do we keep audit logs?"
    assert sorted((p.id, p.text, p.source) for p in record.passages) == sorted(
        (d.id, d.page_content, d.metadata["source"]) for d in DOCS
    )
    assert (record.service, record.version, record.truncated) == ("lc-bot", "3", False)
    root = captured.get_finished_spans()[-1]
    assert root.parent is None and record.span_id == f"{root.context.span_id:016x}"


def test_document_ids_come_from_metadata_or_the_stores_own_ids(
    captured: InMemorySpanExporter,
) -> None:
    """No ``Document.id``: a ``doc_id`` in metadata wins; otherwise the ID the vector store
    assigned (it appears only in the retriever's JSON output) is used."""
    docs = [
        Document(page_content="Audit log retention is 90 days.", metadata={"doc_id": "kb-7"}),
        Document(page_content="Contact your account manager."),
    ]
    _chain(docs, parser=True).invoke("How long?")
    (record,) = _assemble(captured, one_span_per_message=False)
    by_text = {p.text: p.id for p in record.passages}
    assert by_text["Audit log retention is 90 days."] == "kb-7"
    assert uuid.UUID(by_text["Contact your account manager."]).version == 4
