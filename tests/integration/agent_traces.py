"""Real agents traced by the real instrumentations: the specimen (docs/design.md) answered by an
agent whose search tool returns its three passages, with only the LLM faked (the framework's own
mock model, or a local stub of the OpenAI HTTP API), its trace as OTLP bytes.

Run as ``python -m tests.integration.agent_traces OUTDIR [CASE…]``, as
:mod:`tests.integration.dialect_traces` is (instrumentations patch their framework process-wide):
writes ``OUTDIR/<case>.pb`` (one OTLP ``ExportTraceServiceRequest`` per trace) and
``OUTDIR/versions.json``. ``--dump CASE`` prints a case's spans instead (for looking at what a
real instrumentation emits).

Cases: ``<framework>`` answers from one search with the specimen's passage IDs in its markers;
``-two-searches`` searches twice (p-3310 and p-3311, then p-3312); ``-numbered`` cites by the
position the model saw the documents in across both searches ([1], [3]); ``-content-off`` runs
with the instrumentation's content capture off.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.integration.dialect_traces import ANSWER, NUMBERED_ANSWER, PASSAGES, QUESTION
from tests.integration.trace_export import Cases, JsonServer, captured, versions, write_cases

#: The two-search agent's queries and what each returns, in order.
SEARCHES = (("audit log retention", ["p-3310", "p-3311"]), ("custom retention terms", ["p-3312"]))

PACKAGES = (
    "langchain-core",
    "langgraph",
    "langchain",
    "openinference-instrumentation-langchain",
    "openai-agents",
    "openinference-instrumentation-openai-agents",
    "opentelemetry-instrumentation-openai-agents-v2",
    "pydantic-ai-slim",
    "llama-index-core",
    "openinference-instrumentation-llama-index",
    "smolagents",
    "openinference-instrumentation-smolagents",
    "opentelemetry-sdk",
)

CASES = Cases()
case = CASES.case


def _docs_json(ids: Sequence[str]) -> str:
    return json.dumps([{"id": pid, "text": PASSAGES[pid]} for pid in ids])


def _search_for(query: str) -> list[str]:
    """Which passages a search returns: the two-search agent's queries their own, any other
    query all three."""
    return next((ids for q, ids in SEARCHES if q == query), list(PASSAGES))


# -- LangGraph (OpenInference) -------------------------------------------------------------


def _scripted_chat(turns: Sequence[Any]) -> Any:
    """A chat model that plays ``turns`` (one per model call, chosen by how many tool results
    it has seen) and takes tools as LangGraph's agents bind them."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChat(BaseChatModel):
        script: list[Any]

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kw: Any) -> Any:
            return self

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            n = sum(isinstance(m, ToolMessage) for m in messages)
            return ChatResult(generations=[ChatGeneration(message=self.script[n])])

    return ScriptedChat(script=list(turns))


def _tool_turns(queries: Sequence[str], answer: str, tool: str = "search_docs") -> list[Any]:
    from langchain_core.messages import AIMessage

    turns: list[Any] = [
        AIMessage(
            content="",
            tool_calls=[{"name": tool, "args": {"query": q}, "id": f"call_{n}"}],
        )
        for n, q in enumerate(queries)
    ]
    return [*turns, AIMessage(content=answer)]


def _langchain_retriever() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class KnowledgeBase(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [
                Document(id=pid, page_content=PASSAGES[pid], metadata={"passage_id": pid})
                for pid in _search_for(query)
            ]

    return KnowledgeBase()


def _langgraph(
    tools: list[Any], queries: Sequence[str], answer: str = ANSWER, *, langchain: bool = False
) -> bytes:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    if langchain:  # LangChain 1.x's agent, built on LangGraph
        from langchain.agents import create_agent as create
    else:
        from langgraph.prebuilt import create_react_agent as create

    instrumentor = LangChainInstrumentor()
    with captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider)
        try:
            agent = create(_scripted_chat(_tool_turns(queries, answer)), tools)
            agent.invoke({"messages": [("user", QUESTION)]})
            return encoded()
        finally:
            instrumentor.uninstrument()


@case("langgraph-retriever-tool")
def langgraph_retriever_tool() -> bytes:
    """``create_retriever_tool`` rendering each document as ``[passage_id] text``."""
    from langchain_core.prompts import PromptTemplate
    from langchain_core.tools import create_retriever_tool

    tool = create_retriever_tool(
        _langchain_retriever(),
        "search_docs",
        "Search the knowledge base.",
        document_prompt=PromptTemplate.from_template("[{passage_id}] {page_content}"),
    )
    return _langgraph([tool], [QUESTION])


@case("langchain-create-agent")
def langchain_create_agent() -> bytes:
    """``langchain.agents.create_agent`` with the same retriever tool."""
    from langchain_core.prompts import PromptTemplate
    from langchain_core.tools import create_retriever_tool

    tool = create_retriever_tool(
        _langchain_retriever(),
        "search_docs",
        "Search the knowledge base.",
        document_prompt=PromptTemplate.from_template("[{passage_id}] {page_content}"),
    )
    return _langgraph([tool], [QUESTION], langchain=True)


@case("langgraph-hidden")
def langgraph_hidden() -> bytes:
    """OpenInference told to hide inputs and outputs (``OPENINFERENCE_HIDE_*``): the retriever's
    documents stay, every output is ``__REDACTED__``."""
    hide = ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES")
    os.environ.update({f"OPENINFERENCE_HIDE_{k}": "true" for k in hide})
    try:
        return langgraph_retriever_tool()
    finally:
        for k in hide:
            del os.environ[f"OPENINFERENCE_HIDE_{k}"]


def _documents_tool() -> Any:
    from langchain_core.tools import tool

    retriever = _langchain_retriever()

    @tool
    def search_docs(query: str) -> list[Any]:  # Documents (a string annotation is resolved late)
        """Search the knowledge base."""
        return list(retriever.invoke(query))

    return search_docs


@case("langgraph-tool")
def langgraph_tool() -> bytes:
    """A plain ``@tool`` returning the ``Document``s."""
    return _langgraph([_documents_tool()], [QUESTION])


def _json_tool(render: Callable[[Sequence[str]], str]) -> Any:
    """A plain ``@tool`` answering with text it renders itself (no retriever span)."""
    from langchain_core.tools import tool

    @tool
    def search_docs(query: str) -> str:
        """Search the knowledge base."""
        return render(_search_for(query))

    return search_docs


@case("langgraph-two-searches")
def langgraph_two_searches() -> bytes:
    """Two searches, each a JSON list of ``{id, text}``; the answer cites by ID."""
    return _langgraph([_json_tool(_docs_json)], [q for q, _ in SEARCHES])


@case("langgraph-numbered")
def langgraph_numbered() -> bytes:
    """Two searches whose results carry no IDs; the answer cites [1]..[3] by the order the
    model saw the documents in, across both results."""

    def texts(ids: Sequence[str]) -> str:
        return json.dumps([{"text": PASSAGES[pid]} for pid in ids])

    return _langgraph([_json_tool(texts)], [q for q, _ in SEARCHES], NUMBERED_ANSWER)


# -- a stub of the OpenAI chat completions API (the OpenAI Agents SDK, smolagents) -----------


class ChatStub(JsonServer):
    """A local stand-in for ``POST /v1/chat/completions``: answers each request with the next
    turn of a script, chosen by how many turns the request carries. A turn is a text,
    or ``(tool name, arguments)`` for a tool call."""

    def __init__(self, turns: Sequence[str | tuple[str, dict[str, Any]]]) -> None:
        super().__init__()
        self.turns = list(turns)
        self.url += "/v1"

    def respond(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        # One assistant message per turn already taken (smolagents sends its tool results as
        # user messages, the Agents SDK as tool messages).
        return self.completion(sum(m.get("role") == "assistant" for m in body.get("messages", [])))

    def completion(self, n: int) -> dict[str, Any]:
        turn = self.turns[min(n, len(self.turns) - 1)]
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if isinstance(turn, str):
            message["content"] = turn
            finish = "stop"
        else:
            name, args = turn
            message["tool_calls"] = [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ]
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_780_000_000,
            "model": "gpt-stub",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }


def _script(queries: Sequence[str], answer: str, tool: str = "search_docs") -> list[Any]:
    return [*((tool, {"query": q}) for q in queries), answer]


# -- OpenAI Agents SDK ---------------------------------------------------------------------


def _openai_agent(stub: ChatStub) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def search_docs(query: str) -> str:
        """Search the knowledge base."""
        return _docs_json(_search_for(query))

    client = AsyncOpenAI(base_url=stub.url, api_key="not-a-key")
    return Agent(
        name="support",
        instructions="Answer from the knowledge base, citing passage IDs.",
        model=OpenAIChatCompletionsModel(model="gpt-stub", openai_client=client),
        tools=[search_docs],
    )


def _openai_agents_run(
    instrumentor: Any, queries: Sequence[str], answer: str = ANSWER, **kw: Any
) -> bytes:
    from agents import Runner

    with ChatStub(_script(queries, answer)) as stub, captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider, **kw)
        try:
            Runner.run_sync(_openai_agent(stub), QUESTION)
            return encoded()
        finally:
            instrumentor.uninstrument()


@case("openai-agents")
def openai_agents() -> bytes:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return _openai_agents_run(OpenAIAgentsInstrumentor(), [QUESTION])


@case("openai-agents-retriever-kind")
def openai_agents_retriever_kind() -> bytes:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return _openai_agents_run(
        OpenAIAgentsInstrumentor(), [QUESTION], tool_span_kinds={"search_docs": "RETRIEVER"}
    )


@case("openai-agents-v2")
def openai_agents_v2() -> bytes:
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return _openai_agents_run(OpenAIAgentsInstrumentor(), [QUESTION])


@case("openai-agents-v2-content-off")
def openai_agents_v2_content_off() -> bytes:
    """The package's capture variable set to ``false`` (it captures by default)."""
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "false"
    try:
        return _openai_agents_run(OpenAIAgentsInstrumentor(), [QUESTION])
    finally:
        del os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]


# -- Pydantic AI ---------------------------------------------------------------------------


def _pydantic_ai(
    queries: Sequence[str],
    answer: str = ANSWER,
    *,
    version: int = 5,
    include_content: bool = True,
    ids_only: bool = False,
) -> bytes:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(
            part.part_kind == "tool-return" for m in messages for part in getattr(m, "parts", ())
        )
        if n < len(queries):
            return ModelResponse(parts=[ToolCallPart("search_docs", {"query": queries[n]})])
        return ModelResponse(parts=[TextPart(answer)])

    with captured() as (provider, encoded):
        Agent.instrument_all(
            InstrumentationSettings(
                tracer_provider=provider, version=version, include_content=include_content
            )
        )
        agent = Agent(FunctionModel(model), name="support")

        @agent.tool_plain
        def search_docs(query: str) -> list[dict[str, str]]:
            """Search the knowledge base."""
            if ids_only:  # the app's search returns references; the text is in its store
                return [{"id": pid} for pid in _search_for(query)]
            return [{"id": pid, "text": PASSAGES[pid]} for pid in _search_for(query)]

        try:
            agent.run_sync(QUESTION)
            return encoded()
        finally:
            Agent.instrument_all(False)


@case("pydantic-ai")
def pydantic_ai() -> bytes:
    return _pydantic_ai([QUESTION])


@case("pydantic-ai-v6")
def pydantic_ai_v6() -> bytes:
    return _pydantic_ai([QUESTION], version=6)


@case("pydantic-ai-v2")
def pydantic_ai_v2() -> bytes:
    return _pydantic_ai([QUESTION], version=2)


@case("pydantic-ai-two-searches")
def pydantic_ai_two_searches() -> bytes:
    return _pydantic_ai([q for q, _ in SEARCHES])


@case("pydantic-ai-ids-only")
def pydantic_ai_ids_only() -> bytes:
    return _pydantic_ai([QUESTION], ids_only=True)


@case("pydantic-ai-content-off")
def pydantic_ai_content_off() -> bytes:
    return _pydantic_ai([QUESTION], include_content=False)


# -- LlamaIndex (OpenInference) ------------------------------------------------------------


def _llamaindex_agent(queries: Sequence[str], answer: str = ANSWER) -> bytes:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.core.tools import RetrieverTool
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    class KnowledgeBase(BaseRetriever):
        """The app's passage IDs in metadata, node IDs LlamaIndex's own (UUIDs)."""

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [
                NodeWithScore(
                    node=TextNode(text=PASSAGES[pid], metadata={"passage_id": pid}), score=1.0
                )
                for pid in _search_for(query_bundle.query_str)
            ]

    def respond(messages: Sequence[ChatMessage], **kw: Any) -> ChatMessage:
        n = sum(m.role == MessageRole.TOOL for m in messages)
        if n < len(queries):
            call = ToolCallBlock(
                tool_call_id=f"call_{n}", tool_name="search_docs", tool_kwargs={"input": queries[n]}
            )
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content=answer)

    tool = RetrieverTool.from_defaults(
        retriever=KnowledgeBase(), name="search_docs", description="Search the knowledge base."
    )
    llm = MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)
    agent = FunctionAgent(tools=[tool], llm=llm, system_prompt="Answer citing passage IDs.")
    instrumentor = LlamaIndexInstrumentor()
    with captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider)
        try:
            asyncio.run(_run_agent(agent))
            return encoded()
        finally:
            instrumentor.uninstrument()


async def _run_agent(agent: Any) -> Any:
    return await agent.run(user_msg=QUESTION)  # the workflow starts inside the running loop


@case("llamaindex-agent")
def llamaindex_agent() -> bytes:
    return _llamaindex_agent([QUESTION])


# -- smolagents (OpenInference) ------------------------------------------------------------


def _smolagents(queries: Sequence[str], answer: str = ANSWER) -> bytes:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIModel, Tool, ToolCallingAgent

    class RetrieverTool(Tool):  # as smolagents' own RAG example writes it
        name = "search_docs"
        description = "Search the knowledge base."
        inputs = {"query": {"type": "string", "description": "what to look for"}}  # noqa: RUF012
        output_type = "string"

        def forward(self, query: str) -> str:
            return "\nRetrieved documents:\n" + "".join(
                f"\n\n===== Document {pid} =====\n{PASSAGES[pid]}" for pid in _search_for(query)
            )

    script = [*_script(queries, answer)[:-1], ("final_answer", {"answer": answer})]
    instrumentor = SmolagentsInstrumentor()
    with ChatStub(script) as stub, captured() as (provider, encoded):
        instrumentor.instrument(tracer_provider=provider)
        try:
            model = OpenAIModel(model_id="gpt-stub", api_base=stub.url, api_key="not-a-key")
            agent = ToolCallingAgent(tools=[RetrieverTool()], model=model, verbosity_level=0)
            agent.run(QUESTION)
            return encoded()
        finally:
            instrumentor.uninstrument()


@case("smolagents")
def smolagents_agent() -> bytes:
    return _smolagents([QUESTION])


@case("smolagents-two-searches")
def smolagents_two_searches() -> bytes:
    return _smolagents([q for q, _ in SEARCHES])


def dump(payload: bytes) -> None:
    """Every span of a trace: name, parent, and its attributes (long values cut)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest.FromString(payload)
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            print(f"## scope {ss.scope.name}")
            for sp in ss.spans:
                print(
                    f"- {sp.name!r} id={sp.span_id.hex()[:6]} parent={sp.parent_span_id.hex()[:6]} "
                    f"t=[{sp.start_time_unix_nano % 10**9}, {sp.end_time_unix_nano % 10**9}]"
                )
                for kv in sp.attributes:
                    v = kv.value
                    val = str(getattr(v, v.WhichOneof("value") or "string_value"))
                    print(f"    {kv.key} = {val[:400]!r}")


def main(argv: Sequence[str]) -> int:
    warnings.simplefilter("ignore")  # the frameworks' deprecation notices are theirs
    if argv[:1] == ["--dump"]:
        for name in argv[1:]:
            print(f"# {name}")
            dump(CASES[name]())
        return 0
    only = set(argv[1:])
    return write_cases(
        Path(argv[0]), CASES, lambda name: not only or name in only, versions(PACKAGES)
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
