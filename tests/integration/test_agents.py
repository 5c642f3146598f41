"""Agents: passages that come back from a tool call (docs/design.md, "Agents"; docs/dialects.md).

Each case is the specimen answered by a real agent — LangGraph, the OpenAI Agents SDK, Pydantic
AI, LlamaIndex's ``FunctionAgent``, smolagents — traced by its real instrumentation
(OpenInference, the OpenTelemetry GenAI instrumentation of the Agents SDK, Pydantic AI's own),
with only the LLM faked (:mod:`tests.integration.agent_traces`, run once per module in a child
process). Each must score the specimen exactly, offline (``citemon score --input-format
otlp-json``) and through Kafka (``citemon run``): accuracy 0.33, coverage 1.00, faithfulness
1.00, 2 misattributed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from citemon._otlp.decoding import decode_otlp_proto
from tests.integration.conftest import TopicFactory
from tests.integration.dialect_traces import PASSAGES
from tests.integration.monitor_support import metric_sum
from tests.integration.trace_cases import (
    JUDGE,
    assert_specimen_metrics,
    explain_input,
    kafka_leg,
    score_offline,
    score_specimen,
    traces_fixture,
)

#: Cases that are the whole specimen: one answer, accuracy 0.33, faithfulness 1.00. Every agent
#: saw the passages in the specimen's order, so the second claim cites the top passage
#: (first_retrieved) and the third is other.
SPECIMEN_CASES = (
    "langgraph-retriever-tool",
    "langchain-create-agent",
    "langgraph-tool",
    "langgraph-two-searches",
    "langgraph-numbered",
    "openai-agents",
    "openai-agents-retriever-kind",
    "openai-agents-v2",
    "pydantic-ai",
    "pydantic-ai-v6",
    "pydantic-ai-v2",
    "pydantic-ai-two-searches",
    "llamaindex-agent",
    "smolagents",
    "smolagents-two-searches",
)
CONTENT_OFF = {
    "pydantic-ai-content-off": "InstrumentationSettings(include_content=True)",
    "openai-agents-v2-content-off": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "langgraph-hidden": "OPENINFERENCE_HIDE_OUTPUTS=false",
}
#: Every agent saw the passages in the specimen's order.
PATTERNS = ["first_retrieved", "other"]
agent_traces = traces_fixture("agent_traces", "agent_traces")


@pytest.mark.parametrize("case", SPECIMEN_CASES)
def test_each_agent_scores_the_specimen_offline(
    agent_traces: dict[str, bytes], case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claims = score_specimen(tmp_path, capsys, agent_traces[case], PATTERNS)["claims"]
    # The passages are the three the tool returned, with the IDs the model saw.
    if case == "langgraph-numbered":
        assert [c["cited_ids"] for c in claims] == [["1"], ["1"], ["3"]]
    elif case != "llamaindex-agent":  # LlamaIndex: node UUIDs, the app's IDs in metadata
        assert [c["resolved_ids"] for c in claims] == [["p-3310"], ["p-3310"], ["p-3312"]]


@pytest.mark.parametrize(
    ("case", "passages", "answer"),
    [
        # A retriever span inside the tool is the better source: the tool's result is not
        # counted again.
        ("langgraph-retriever-tool", "'KnowledgeBase' ", "(openinference CHAIN)"),
        ("openai-agents", "'search_docs' ", "'generation' "),
        ("openai-agents-v2", "'execute_tool search_docs' ", "'invoke_agent support' "),
        ("pydantic-ai-v2", "'running tool' ", "'chat function:model:' "),
        # The root's output is a repr cut with "...": the whole last model turn wins.
        ("llamaindex-agent", "'KnowledgeBase.aretrieve' ", "'MockFunctionCallingLLM.astream_chat'"),
        ("smolagents", "'RetrieverTool' ", "'ToolCallingAgent.run' "),
    ],
)
def test_explain_input_names_the_tool_and_the_final_turn(
    agent_traces: dict[str, bytes],
    case: str,
    passages: str,
    answer: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = explain_input(tmp_path, capsys, agent_traces[case])
    assert lines[1].startswith(f"  passages:  span {passages}"), lines[1]
    assert lines[1].endswith(": 3 document(s)") and ";" not in lines[1], lines[1]
    assert lines[2].startswith("  answer:    span ") and answer in lines[2], lines[2]
    assert "cut short" not in lines[2]


@pytest.mark.parametrize(
    ("case", "shape"),
    [
        ("langgraph-retriever-tool", "[ID] text blocks in a serialised ToolMessage"),
        ("langchain-create-agent", "[ID] text blocks in a serialised ToolMessage"),
        ("langgraph-tool", "a Python repr of Documents"),
        ("llamaindex-agent", "LlamaIndex's metadata rendering in a ToolOutput"),
        ("openai-agents", "a JSON list"),
        ("openai-agents-v2", "a JSON list"),
        ("pydantic-ai-v2", "a JSON list"),
        ("smolagents", "smolagents' headed blocks"),
    ],
)
def test_each_tools_own_result_reads_as_the_three_passages(
    agent_traces: dict[str, bytes], case: str, shape: str
) -> None:
    """The tool span's result, in each framework's real rendering, reads as the passages the
    model saw, in order, even where a retriever span inside the tool is taken instead."""
    spans = decode_otlp_proto(agent_traces[case]).spans
    tools = [s for s in spans if s.tool == "search_docs" and not s.from_messages]
    assert len(tools) == 1, shape
    docs = tools[0].documents or []
    assert [(d.id, d.text) for d in docs] == list(PASSAGES.items()), shape


@pytest.mark.parametrize("case", ["pydantic-ai", "pydantic-ai-v2", "pydantic-ai-two-searches"])
def test_tool_results_in_the_chat_messages_read_alike(
    agent_traces: dict[str, bytes], case: str
) -> None:
    """Pydantic AI's last chat span carries every ``tool_call_response`` in its input: the same
    passages, in order (used only when no tool span is there)."""
    spans = decode_otlp_proto(agent_traces[case]).spans
    last = max((s for s in spans if s.from_messages), key=lambda s: s.start_ns)
    assert [(d.id, d.text) for d in last.documents or []] == list(PASSAGES.items())


def test_two_searches_are_both_retrieved_in_the_order_the_model_saw_them(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for case, span in (
        ("langgraph-two-searches", "'search_docs'"),
        ("pydantic-ai-two-searches", "'execute_tool search_docs'"),
        ("smolagents-two-searches", "'RetrieverTool'"),
    ):
        lines = explain_input(tmp_path, capsys, agent_traces[case])
        searches = lines[1].removeprefix("  passages:  ").split("; ")
        assert [s.split(" (")[0].rsplit(" ", 1)[0] for s in searches] == [f"span {span}"] * 2
        assert [s.rsplit(": ", 1)[1] for s in searches] == ["2 document(s)", "1 document(s)"]
        markers = [line for line in lines if line.startswith("  marker ")]
        assert [m.split(" → ")[0] for m in markers] == ["  marker [p-3310]", "  marker [p-3312]"]


def test_numeric_markers_resolve_by_the_numbering_the_model_saw(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The results carry no IDs: [3] is the third document the model saw, the one the second
    search returned."""
    _, out, _ = score_offline(
        tmp_path, capsys, [agent_traces["langgraph-numbered"]], "--format", "json"
    )
    claims = out["answers"][0]["claims"]
    assert [c["resolved_ids"] for c in claims] == [["1"], ["1"], ["3"]]
    _, text, _ = score_offline(
        tmp_path, capsys, [agent_traces["langgraph-numbered"]], "--explain-input"
    )
    # Numbered by the assembler in the order the results came, so [3] is that document's ID.
    assert "  [3] 3: Enterprise agreements may include" in text
    assert "  marker [3] → 3 (by document ID)" in text


def test_id_only_results_are_filled_from_the_passage_store(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = [agent_traces["pydantic-ai-ids-only"]]
    code, out, _ = score_offline(tmp_path, capsys, payload, "--format", "json")
    assert code == 1 and out["summary"]["verdicts"]["unjudged"] == 3
    assert {c["unjudged_cause"] for c in out["answers"][0]["claims"]} == {"no_passage_text"}
    store = tmp_path / "kb.jsonl"
    store.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in PASSAGES.items()))
    score_specimen(tmp_path, capsys, payload[0], PATTERNS, "--passage-store", str(store))


def test_content_capture_off_is_explained_with_the_setting(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for case, setting in CONTENT_OFF.items():
        code, _, err = score_offline(tmp_path, capsys, [agent_traces[case]])
        assert code == 1
        assert "gave no answer (no_content)" in err, err
        assert "recorded with content capture off" in err and setting in err, err
        assert "1 trace(s) gave none" in err


def test_retrieval_tools_narrow_and_widen(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = [agent_traces["openai-agents"]]
    # Excluded: the tool's result is not retrieval, and the trace has no passages.
    code, _, err = score_offline(tmp_path, capsys, payload, "--retrieval-tools", "*,-search_docs")
    assert code == 1 and "gave no answer (no_passages)" in err
    code, _, err = score_offline(tmp_path, capsys, payload, "--retrieval-tools", "kb_lookup")
    assert code == 1 and "gave no answer (no_passages)" in err
    score_specimen(tmp_path, capsys, payload[0], PATTERNS, "--retrieval-tools", "search_docs")


def test_a_teams_reader_reads_its_own_shape(
    agent_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pattern with named groups takes precedence over the built-in readers: here it reads
    only the first document of the JSON result, so the third claim's citation dangles and the
    second, citing p-3310 for what p-3312 says, is unsupported by what was retrieved."""
    pattern = r're:\{"id": "(?P<id>p-3310)", "text": "(?P<text>[^"]*)"\}'
    _code, out, _ = score_offline(
        tmp_path,
        capsys,
        [agent_traces["openai-agents"]],
        "--format",
        "json",
        "--tool-result-reader",
        pattern,
    )
    assert out["summary"]["verdicts"]["dangling"] == 1
    assert [c["verdict"] for c in out["answers"][0]["claims"]] == [
        "correct",
        "unsupported",
        "dangling",
    ]


async def test_every_agent_through_kafka(
    agent_traces: dict[str, bytes], kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """``citemon run`` on the real broker, one monitor for every trace (each one message keyed
    by its trace ID, as the Collector's kafka exporter writes them); the content-off traces
    counted as ``no_content``."""
    cases = [*SPECIMEN_CASES, *CONTENT_OFF]
    n = len(SPECIMEN_CASES)
    async with kafka_leg(
        kafka_bootstrap,
        kafka_topic,
        {case: agent_traces[case] for case in cases},
        answers=n,
        outcomes={"no_content": len(CONTENT_OFF)},
    ) as leg:
        r = leg.registry
        assert_specimen_metrics(r, n, {pattern: n for pattern in PATTERNS})
        for verdict in ("unjudged", "dangling", "uncited"):
            assert metric_sum(r, "citemon_claims_total", verdict=verdict) == 0
        for outcome in ("no_passages", "no_answer", "unrecognized"):
            assert metric_sum(r, "citemon_traces_total", outcome=outcome) == 0


async def test_run_reads_tools_with_its_own_settings(
    agent_traces: dict[str, bytes],
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``citemon run``'s ``--retrieval-tools`` reaches its decoder (``settings.agents``), and a
    ``score`` earlier in the same process with other settings changes nothing for it."""
    payload = agent_traces["openai-agents"]
    code, out, _ = await asyncio.to_thread(  # score runs an event loop of its own
        score_offline,
        tmp_path,
        capsys,
        [payload],
        "--format",
        "json",
        "--retrieval-tools",
        "search_docs",
    )
    assert code == 0 and out["summary"]["answers"] == 1
    async with kafka_leg(
        kafka_bootstrap,
        kafka_topic,
        {"openai-agents": payload},
        answers=0,
        outcomes={"no_passages": 1},
        flags=("--judge", JUDGE, "--retrieval-tools", "*,-search_docs"),
        partitions=1,
    ) as leg:
        assert metric_sum(leg.registry, "citemon_answers_total") == 0
