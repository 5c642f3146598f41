"""A search tool's result read as passages (:mod:`citemon._otlp.tool_results`): each built-in
shape, a team's own readers (a plugin and a pattern), and results that are not documents."""

from __future__ import annotations

import ast
import json
import sys
import types
from collections.abc import Iterator

import pytest

from citemon._core.errors import ConfigError
from citemon._core.records import Passage
from citemon._otlp import tool_results
from citemon._otlp.tool_results import (
    ToolReading,
    pattern_reader,
    read_python_repr,
    read_tool_result,
    reader_from_spec,
    readers_from_specs,
)

TEXTS = {
    "p-3310": "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
    "p-3311": "Retention cannot be configured from the dashboard.",
    "p-3312": "Enterprise agreements may include custom data retention terms.",
}


def pairs(found: list[Passage] | None) -> list[tuple[str, str]] | None:
    return None if found is None else [(p.id, p.text) for p in found]


WANT = list(TEXTS.items())


@pytest.mark.parametrize("key", ["text", "content", "page_content"])
def test_a_json_list_of_documents_under_any_text_key(key: str) -> None:
    result = json.dumps([{"id": i, key: t, "score": 0.5} for i, t in TEXTS.items()])
    found = read_tool_result(result)
    assert pairs(found) == WANT
    assert found is not None and found[0].score == 0.5


def test_json_ids_in_metadata_nodes_with_scores_and_wrapping_objects() -> None:
    langchain = [{"page_content": t, "metadata": {"passage_id": i}} for i, t in TEXTS.items()]
    assert pairs(read_tool_result(json.dumps(langchain))) == WANT
    nodes = [{"node": {"id_": i, "text": t}, "score": 1.0} for i, t in TEXTS.items()]
    assert pairs(read_tool_result(json.dumps(nodes))) == WANT
    wrapped = {"results": [{"doc_id": i, "snippet": t} for i, t in TEXTS.items()]}
    assert pairs(read_tool_result(json.dumps(wrapped))) == WANT
    twice = json.dumps(json.dumps([{"id": i, "text": t} for i, t in TEXTS.items()]))
    assert pairs(read_tool_result(twice)) == WANT


def test_ids_only_are_passages_without_text() -> None:
    """For the passage store to fill."""
    assert pairs(read_tool_result('[{"id": "p-3310"}, {"id": 7, "score": 0.4}]')) == [
        ("p-3310", ""),
        ("7", ""),
    ]


def test_python_reprs_of_documents_and_dicts() -> None:
    docs = ", ".join(
        f"Document(id={i!r}, metadata={{'source': 'kb'}}, page_content={t!r})"
        for i, t in TEXTS.items()
    )
    found = read_tool_result(f"[{docs}]")
    assert pairs(found) == WANT
    assert found is not None and found[0].source == "kb"
    assert pairs(read_tool_result(str([{"id": i, "text": t} for i, t in TEXTS.items()]))) == WANT
    # Only literals: a call inside an argument, or a positional argument, is not evaluated.
    assert read_tool_result("[Document(page_content=open('/etc/passwd').read())]") is None
    assert read_tool_result("[Document('p-3310')]") is None


def test_smolagents_headed_blocks() -> None:
    result = "\nRetrieved documents:\n" + "".join(
        f"\n\n===== Document {i} =====\n{t}" for i, t in TEXTS.items()
    )
    assert pairs(read_tool_result(result)) == WANT


def test_llamaindex_metadata_blocks() -> None:
    result = "\n\n".join(f"passage_id: {i}\nsource: kb\n\n{t}" for i, t in TEXTS.items())
    found = read_tool_result(result)
    assert pairs(found) == WANT
    assert found is not None and found[1].metadata == {"passage_id": "p-3311", "source": "kb"}


def test_langchain_document_prompt_blocks() -> None:
    result = "\n\n".join(f"[{i}] {t}" for i, t in TEXTS.items())
    assert pairs(read_tool_result(result)) == WANT


@pytest.mark.parametrize(
    "result",
    [
        "",
        "   ",
        "It is 21 °C and sunny in Paris.",
        '{"temperature": 21, "unit": "C"}',
        '[{"city": "Paris", "temperature": 21}]',
        '[{"id": 7, "name": "Bob", "email": "bob@example.com"}]',  # a record, not a reference
        "[]",
        '{"id": "call_1"}',
        "[1, 2, 3]",
        "[" * 100_000,
        "[" + "1," * 400_000 + "]",  # not parsed: the tree would take hundreds of MB
        "prose first\n" * 5 + "[p-1] a bracket late in prose",
        "line\n" * 5 + "===== Document p-1 =====\na heading buried in prose",
    ],
)
def test_what_is_not_documents(result: str) -> None:
    assert read_tool_result(result) is None


@pytest.mark.parametrize(
    "result",
    [
        "[" + "1," * 40_000 + "]",
        "[a" + "()" * 40_000 + "]",  # calls: no comma, yet a node each (105 MB at 160,000)
        "[a" + ".b" * 40_000 + "]",
        "[1" + "+1" * 40_000 + "]",
        "[a" + " or a" * 40_000 + "]",  # no mark at all: 90 MB at 100,000
        "[a" + " and a" * 40_000 + "]",
        "[a" + " in a" * 40_000 + "]",
        "[a" + " is a" * 40_000 + "]",
        "['a'" + "or'a'" * 40_000 + "]",  # no space either
    ],
    ids=["items", "calls", "attributes", "operators", "or", "and", "in", "is", "or-unspaced"],
)
def test_a_repr_with_too_many_nodes_is_not_parsed(
    result: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    recording = types.SimpleNamespace(**vars(ast))  # this module's ast only, not pytest's
    recording.parse = lambda text, **kw: parsed.append(text)
    monkeypatch.setattr(tool_results, "ast", recording)
    assert read_python_repr(result) is None
    assert parsed == []  # refused before ast holds its tree: about 0.9 kB per node


@pytest.mark.parametrize("count", [300, 470])
def test_a_large_repr_of_prose_documents_is_still_read(count: int) -> None:
    prose = "Audit logs are kept for 90 days, then archived; see the policy (section 4.2). " * 12
    docs = [
        f"Document(id='p-{n}', metadata={{'source': 'kb'}}, page_content={prose!r})"
        for n in range(count)
    ]
    result = "[" + ", ".join(docs) + "]"
    # 300: 300 kB, 17,400 marks and 3,600 keywords; 470: 471 kB, 27,260 marks (most of their
    # bound) and 5,640 keywords, which have a bound of their own: prose's words in its strings
    # are no nodes, and the marks alone filled the budget.
    assert len(result) > count * 1000
    found = read_tool_result(result)
    assert found is not None and len(found) == count and found[-1].text == prose


def test_long_lines_read_in_linear_time() -> None:
    """Untrusted text: a long line of "=" or of spaces must not backtrack quadratically
    (100,000 characters each would take minutes if it did)."""
    assert read_tool_result("===== Document " + "=" * 100_000 + "x") is None
    assert read_tool_result("passage_id: p-1" + " " * 100_000 + "x\n\ntext") is not None
    assert pairs(read_tool_result("passage_id: p-1  \n\ntext")) == [("p-1", "text")]
    lines = "passage_id: p-1\n\n" + "k: v\n" * 50_000 + "end"
    found = read_tool_result(lines)
    assert found is not None and found[0].text.endswith("k: v\nend")


def test_a_pattern_with_id_and_text_groups() -> None:
    reader = pattern_reader(r"^#(?P<id>\S+)\s*\|\s*(?P<text>.+)$")
    result = "\n".join(f"#{i} | {t}" for i, t in TEXTS.items())
    assert pairs(read_tool_result(result, [reader])) == WANT
    assert read_tool_result("no match here", [reader]) is None
    with pytest.raises(ConfigError, match="named groups 'id' and 'text'"):
        pattern_reader(r"(?P<id>\S+)")
    with pytest.raises(ConfigError, match="not a valid regex"):
        pattern_reader(r"(?P<id>")


@pytest.fixture
def plugin_module() -> Iterator[str]:
    """A team's reader, importable as a module (removed after)."""
    module = types.ModuleType("team_reader_plugin")

    def factory() -> tool_results.ToolResultReader:
        def read(text: str) -> list[Passage] | None:
            if not text.startswith("KB:"):
                return None
            return [Passage(id=i.strip(), text=TEXTS[i.strip()]) for i in text[3:].split(",")]

        return read

    def broken() -> tool_results.ToolResultReader:
        def read(text: str) -> list[Passage] | None:
            raise RuntimeError("the team's bug")

        return read

    module.factory = factory  # type: ignore[attr-defined]
    module.broken = broken  # type: ignore[attr-defined]
    module.not_callable = lambda: 42  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        yield module.__name__
    finally:
        del sys.modules[module.__name__]


def test_a_plugin_reader_comes_before_the_built_ins(plugin_module: str) -> None:
    team = ToolReading(readers=readers_from_specs([f"{plugin_module}:factory", " "]))
    assert pairs(team.read("KB: p-3310, p-3312")) == [WANT[0], WANT[2]]
    # The built-ins still read what the plugin does not know.
    assert pairs(team.read(json.dumps([{"id": "p-3311", "text": "t"}]))) == [("p-3311", "t")]
    # Without the team's reading, nothing else knows the shape.
    assert ToolReading().read("KB: p-3310, p-3312") is None
    assert read_tool_result("KB: p-3310, p-3312") is None


def test_a_failing_plugin_is_not_this_shape(
    plugin_module: str, caplog: pytest.LogCaptureFixture
) -> None:
    team = ToolReading(readers=readers_from_specs([f"{plugin_module}:broken"]))
    assert pairs(team.read("[p-3310] text")) == [("p-3310", "text")]
    assert "failed; trying the next" in caplog.text


def test_specs_that_cannot_work_are_config_errors(plugin_module: str) -> None:
    with pytest.raises(ConfigError, match=r"package\.module:factory or re:PATTERN"):
        reader_from_spec("nocolon")
    with pytest.raises(ConfigError, match="cannot load tool result reader"):
        reader_from_spec(f"{plugin_module}:missing")
    with pytest.raises(ConfigError, match="not a callable reader"):
        reader_from_spec(f"{plugin_module}:not_callable")
    assert reader_from_spec("re:(?P<id>x)(?P<text>y)")("xy") == [Passage(id="x", text="y")]


def test_odd_values_in_a_result_are_read_or_refused_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool's result is untrusted: a score past a float's range is no score (the documents
    are still read), and a repr with an unhashable dict key is not documents. Neither is a
    built-in reader's failure, logged with a traceback for every such span."""
    huge = "9" * 400
    got = read_tool_result(f'[{{"id": "p-1", "text": "Logs: 90 days.", "score": {huge}}}]')
    assert got == [Passage(id="p-1", text="Logs: 90 days.")]
    got = read_tool_result(f"[{{'id': 'p-1', 'text': 'Logs: 90 days.', 'score': {huge}}}]")
    assert got == [Passage(id="p-1", text="Logs: 90 days.")]
    assert read_tool_result("[{['id']: 'p-1', 'text': 'Logs: 90 days.'}]") is None
    assert "failed" not in caplog.text
