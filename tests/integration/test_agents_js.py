"""Agents built with the JavaScript frameworks, read from traces their real instrumentations made
(docs/design.md, "Agents: passages that come back from a tool call"; docs/dialects.md).

``tests/js/agents.mjs`` answers the specimen with real agents — the Vercel AI SDK's
``generateText``, ``streamText`` and ``ToolLoopAgent`` with ``experimental_telemetry``; a
LangGraph.js ReAct agent (with a retriever tool, and with a tool that renders the documents
itself) and LangChain.js's ``createAgent``, traced by OpenInference's LangChain.js
instrumentation — whose search tool returns the specimen's three passages, with only the LLM
faked (each framework's own: ``MockLanguageModelV3`` from ``ai/test``, ``fakeModel()`` from
``@langchain/core/testing``). It runs once per session under Node.js with the packages of
``tests/js/package-lock.json`` (``make js-traces``), writing one OTLP/JSON request per case, as
the OTLP/HTTP JSON exporter sends them. Each must score the specimen exactly, offline (``citemon
score --input-format otlp-json``) and through Kafka (``citemon run``).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from citemon._otlp.dialects.vercel import Vercel
from citemon._otlp.spans import Limits
from citemon._otlp.wire import parse_otlp_json
from tests.conftest import REPO, need_server
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import metric_sum
from tests.integration.trace_cases import (
    assert_specimen_metrics,
    explain_input,
    generate,
    kafka_leg,
    read_traces,
    score_offline,
    score_specimen,
)

JS_DIR = REPO / "tests" / "js"

#: Cases that are the whole specimen: one answer, accuracy 0.33, faithfulness 1.00.
SPECIMEN_CASES = (
    "vercel-generate-text",
    "vercel-generate-text-preamble",
    "vercel-two-searches",
    "vercel-numeric-markers",
    "vercel-rendered-text",
    "vercel-stream-text",
    "vercel-tool-loop-agent",
    "langgraph-react-agent",
    "langchain-create-agent",
    "langgraph-plain-tool",
)
#: The markers as cited: the IDs, except where the tool returned texts only and the model cited
#: by number (the numbering it saw: positions across both searches, [3] the second's first).
CITED = {"vercel-numeric-markers": [["1"], ["1"], ["3"]]}
SPECIMEN_CITED = [["p-3310"], ["p-3310"], ["p-3312"]]
#: Traces recorded with content capture off (the Vercel AI SDK's recordInputs/recordOutputs
#: false; OpenInference's hideInputs/hideOutputs).
CONTENT_OFF_CASES = ("vercel-content-off", "langgraph-content-off")
#: Every search tool returns the specimen's order: the second claim cites the top passage
#: (first_retrieved), the third cites p-3312 for p-3311's sentence (other).
PATTERNS = ["first_retrieved", "other"]
#: Seconds Node.js may take to load the frameworks and make every trace (about 1 s here).
GENERATE_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def js_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory where ``agents.mjs`` wrote every case's trace, made once: ``<case>.json``
    (OTLP/JSON) and ``<case>.pb`` (protobuf), as the JavaScript SDK serialises them."""
    node = shutil.which("node")
    if node is None:
        need_server("Node.js", "node is not on PATH (Node.js 20 or later; then `make js-traces`)")
    modules = JS_DIR / "node_modules"
    if not (modules / "ai" / "package.json").is_file():
        need_server("tests/js/node_modules", "run `make js-traces` (npm ci, cached)")
    # scripts/js_agents.sh installs each lock into a directory named by its hash.
    lock = hashlib.sha256((JS_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]
    if modules.resolve().parent.name != lock:
        need_server("tests/js/node_modules", "it is another lock's install: run `make js-traces`")
    command = [str(node), str(JS_DIR / "agents.mjs")]
    return generate(
        tmp_path_factory, "js-traces", command, cwd=JS_DIR, timeout_s=GENERATE_TIMEOUT_S
    )


@pytest.fixture(scope="session")
def js_traces(js_out: Path) -> dict[str, bytes]:
    """Every case's trace in OTLP/JSON."""
    traces = read_traces(js_out, "json")
    assert sorted(traces) == sorted((*SPECIMEN_CASES, *CONTENT_OFF_CASES))
    return traces


@pytest.fixture(scope="session")
def js_protobuf(js_out: Path) -> dict[str, bytes]:
    """Every case's trace in OTLP protobuf (what a Collector's kafka exporter writes by
    default)."""
    traces = read_traces(js_out, "pb")
    assert sorted(traces) == sorted((*SPECIMEN_CASES, *CONTENT_OFF_CASES))
    return traces


@pytest.mark.parametrize("case", SPECIMEN_CASES)
def test_each_js_agent_scores_the_specimen_offline(
    js_traces: dict[str, bytes], case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = score_specimen(tmp_path, capsys, js_traces[case], PATTERNS)
    claims = answer["claims"]
    assert [c["cited_ids"] for c in claims] == CITED.get(case, SPECIMEN_CITED)
    assert [c["resolved_ids"] for c in claims] == CITED.get(case, SPECIMEN_CITED)
    assert answer["service"] == "kb-agent"


@pytest.mark.parametrize(
    ("case", "passages_from", "answer_from"),
    [
        ("vercel-generate-text", "'ai.toolCall'", "'ai.generateText'"),
        ("vercel-stream-text", "'ai.toolCall'", "'ai.streamText'"),
        ("vercel-rendered-text", "'ai.toolCall'", "'ai.generateText'"),
        ("langgraph-react-agent", "'KnowledgeBase'", "'FakeBuiltModel'"),
        ("langchain-create-agent", "'KnowledgeBase'", "'FakeBuiltModel'"),
        ("langgraph-plain-tool", "'search_docs'", "'FakeBuiltModel'"),
    ],
)
def test_explain_input_names_the_tool_call_and_the_final_turn(
    js_traces: dict[str, bytes],
    case: str,
    passages_from: str,
    answer_from: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = explain_input(tmp_path, capsys, js_traces[case])
    assert lines[1].startswith(f"  passages:  span {passages_from} ")
    assert lines[1].endswith(": 3 document(s)")
    assert lines[2].startswith(f"  answer:    span {answer_from} ")
    if case.startswith("vercel"):
        assert lines[1].endswith("(vercel tool search_docs): 3 document(s)")
    elif case == "langgraph-plain-tool":  # no retriever: the tool's ToolMessage, unwrapped
        assert lines[1].endswith("(openinference TOOL): 3 document(s)")
    else:  # the retriever inside the tool (its documents' own IDs); the tool's result gives way
        assert lines[1].endswith("(openinference RETRIEVER): 3 document(s)")
    assert [line for line in lines if line.startswith("  marker ")] == [
        "  marker [p-3310] → p-3310 (by document ID)",
        "  marker [p-3312] → p-3312 (by document ID)",
    ]


def test_two_searches_before_the_answer_are_both_retrieved(
    js_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent searches twice (p-3310 and p-3311, then p-3312) before answering: both
    results are the answer's passages, in the order the model saw them, and the markers
    resolve across them (the specimen's score: the offline test above)."""
    lines = explain_input(tmp_path, capsys, js_traces["vercel-two-searches"])
    first, second = lines[1].removeprefix("  passages:  ").split("; ")
    assert first.startswith("span 'ai.toolCall' ")
    assert first.endswith("(vercel tool search_docs): 2 document(s)")
    assert second.startswith("span 'ai.toolCall' ")
    assert second.endswith("(vercel tool search_docs): 1 document(s)")
    assert [line[:12] for line in lines[3:6]] == ["  [1] p-3310", "  [2] p-3311", "  [3] p-3312"]
    assert [line for line in lines if line.startswith("  marker ")] == [
        "  marker [p-3310] → p-3310 (by document ID)",
        "  marker [p-3312] → p-3312 (by document ID)",
    ]


@pytest.mark.parametrize(
    ("case", "setting"),
    [
        ("vercel-content-off", "experimental_telemetry recordInputs and recordOutputs"),
        ("langgraph-content-off", "OpenInference's OPENINFERENCE_HIDE_OUTPUTS=false"),
    ],
)
def test_content_capture_off_is_counted_and_explained(
    js_traces: dict[str, bytes],
    case: str,
    setting: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Recorded with content capture off (the SDK's ``recordInputs``/``recordOutputs: false``;
    OpenInference's ``hideInputs``/``hideOutputs``, whose ``__REDACTED__`` placeholder is no
    answer): no answer, explained, naming the setting that turns capture on."""
    code, out, err = score_offline(tmp_path, capsys, [js_traces[case]], "--format", "json")
    assert code == 1
    assert out["summary"]["answers"] == 0 and out["answers"] == []
    first, last = err.split("citemon: ")[1:]
    assert "gave no answer (no_content)" in first
    assert "recorded with content capture off" in first and setting in first
    assert "__REDACTED__" not in err
    assert last.startswith("no answers in ") and "1 trace(s) gave none" in last


def test_retrieval_tools_says_which_vercel_tools_search(
    js_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--retrieval-tools`` applies to the SDK's tool calls as to every dialect's: the tool
    left out, its result is no retrieval (the trace has an answer and no passages); named, it
    is."""
    trace = [js_traces["vercel-generate-text"]]
    code, _, err = score_offline(tmp_path, capsys, trace, "--retrieval-tools", "*,-search_docs")
    assert code == 1 and "gave no answer (no_passages)" in err
    code, out, err = score_offline(
        tmp_path, capsys, trace, "--retrieval-tools", "search_docs", "--format", "json"
    )
    assert (code, err) == (0, "")
    assert out["summary"]["citation_accuracy"] == 0.3333


def test_vercel_intermediate_turns_are_not_answers(js_traces: dict[str, bytes]) -> None:
    """The model turn that calls the tool (here also saying something beside the call) is a
    ``doGenerate`` span with its own ``ai.response.text``; only the top ``ai.generateText``
    span's text, the final step's, is the answer, and its question is the user's."""
    spans = list(parse_otlp_json(js_traces["vercel-generate-text-preamble"]))
    readings: dict[str, list[Any]] = {}
    for raw in spans:
        readings.setdefault(raw.name, []).append(Vercel().read_span(raw, Limits()))
    turns = [raw for raw in spans if raw.name == "ai.generateText.doGenerate"]
    assert [raw.attrs["ai.response.text"][:20] for raw in turns] == [
        "Let me search the kn",  # said beside the tool call: an intermediate turn
        "Audit logs are retai",
    ]
    assert readings["ai.generateText.doGenerate"] == [None, None]
    (top,) = readings["ai.generateText"]
    assert top.answer.startswith("Audit logs are retained for 90 days")
    assert top.answer.endswith("[p-3312]") and "Let me search" not in top.answer
    assert top.question == "How long do we keep audit logs, and can I extend it?"
    (tool,) = readings["ai.toolCall"]
    assert [(p.id, p.text[:16]) for p in tool.documents] == [
        ("p-3310", "Audit log retent"),
        ("p-3311", "Retention cannot"),
        ("p-3312", "Enterprise agree"),
    ]


def test_stream_text_reads_the_question_from_its_messages(js_traces: dict[str, bytes]) -> None:
    """``streamText`` called with ``messages`` (not ``prompt``): the question is the last user
    message's text."""
    (top,) = [
        Vercel().read_span(raw, Limits())
        for raw in parse_otlp_json(js_traces["vercel-stream-text"])
        if raw.name == "ai.streamText"
    ]
    assert (
        top is not None and top.question == "How long do we keep audit logs, and can I extend it?"
    )


async def test_every_js_agent_through_kafka(
    js_traces: dict[str, bytes],
    js_protobuf: dict[str, bytes],
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
) -> None:
    """``citemon run`` on the real broker: each trace one message keyed by its trace ID, as the
    JavaScript SDK serialised it (OTLP/JSON or protobuf); the content-off traces counted as
    such."""
    # Every other trace in each encoding: the JSON an OTLP/HTTP JSON exporter (or a Collector
    # with encoding otlp_json) sends, the protobuf a Collector writes by default.
    cases = (*SPECIMEN_CASES, *CONTENT_OFF_CASES)
    payloads = {case: (js_traces if n % 2 else js_protobuf)[case] for n, case in enumerate(cases)}
    n = len(SPECIMEN_CASES)
    async with kafka_leg(
        kafka_bootstrap,
        kafka_topic,
        payloads,
        answers=n,
        outcomes={"no_content": 2},
        results=True,
    ) as leg:
        r = leg.registry
        trace_ids = {trace_id: case for case, trace_id in leg.trace_ids.items()}
        # Each answer's results record: the markers as cited, the specimen's verdicts and patterns.
        bodies = await leg.results()
        assert {trace_ids[t] for t in bodies} == set(SPECIMEN_CASES)
        for body in bodies.values():
            claims = body["claims"]
            case = trace_ids[body["trace_id"]]
            assert [c["cited_ids"] for c in claims] == CITED.get(case, SPECIMEN_CITED)
            assert [c.get("pattern") for c in claims] == [None, *PATTERNS], (case, claims)
        assert_specimen_metrics(r, n, {pattern: n for pattern in PATTERNS})
        for verdict in ("unjudged", "dangling", "uncited", "unsupported"):
            assert metric_sum(r, "citemon_claims_total", verdict=verdict) == 0
        assert metric_sum(r, "citemon_traces_total", outcome="completed") == n
        for outcome in ("unrecognized", "no_passages", "no_answer"):
            assert metric_sum(r, "citemon_traces_total", outcome=outcome) == 0
