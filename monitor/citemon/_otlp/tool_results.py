"""A search tool's result, read as retrieved passages (docs/dialects.md, "Agents").

An agent's trace carries what its search tool returned as one string (an OpenInference ``TOOL``
span's ``output.value``, a GenAI ``execute_tool`` span's ``gen_ai.tool.call.result``, the Vercel
AI SDK's ``ai.toolCall.result``). :func:`read_tool_result` turns that string into passages with
their IDs, in the order the model saw them, or says it is not documents (``None``): the first
reader that knows the shape wins.

Built-in readers, tried in this order (:data:`BUILTIN_READERS`):

* **JSON** — a list of objects, each with a text (``text``, ``content``, ``page_content``,
  ``chunk``, ``body``, ``snippet``) and/or an ID (``id``, ``id_``, ``passage_id``, ``doc_id``,
  … or one of those in its ``metadata``); LlamaIndex's node-with-score ``{node: {…}, score}``;
  such a list under ``documents``/``results``/``passages``/… of an object. References (an ID
  and no text, nothing else but a score, metadata, a title or URL) are kept (text ``""``: the
  passage store fills them).
* **Python reprs** — ``[Document(id='p-3310', metadata={…}, page_content='…'), …]`` or a list of
  dicts as ``str()`` prints them (tools whose framework stringifies what they return), read with
  :mod:`ast` (literals only: nothing is evaluated).
* **Headed blocks** — smolagents' ``===== Document p-3310 =====`` then the text.
* **Metadata blocks** — LlamaIndex's ``MetadataMode.LLM`` rendering: ``key: value`` lines, one
  of them an ID key (``passage_id: p-3310``), a blank line, then the text.
* **Bracketed blocks** — LangChain ``document_prompt`` renderings such as ``[p-3310] text``.

A team whose tool renders documents its own way adds a reader without changing citemon
(``--tool-result-reader``, env ``CITEMON_TOOL_RESULT_READER``): ``package.module:factory``,
where ``factory()`` returns a callable ``(text: str) -> list[Passage] | None`` (tried before the
built-ins; an exception in it counts as "not this shape"), or ``re:PATTERN``, a regular
expression with named groups ``id`` and ``text`` whose matches, in order, are the passages.

Which tools are search tools (:class:`ToolSelection`, ``--retrieval-tools``) and the team's
readers travel together as a :class:`ToolReading`, built from the command's settings
(:class:`~citemon._otlp.settings.AgentSettings`) and handed to every span read in
:class:`~citemon._otlp.spans.Limits`: nothing here is process-wide, so two readers with different
settings can share a process.

Nothing here raises on a tool's output: a shape no reader knows is ``None``.
"""

from __future__ import annotations

import ast
import importlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from citemon._core.errors import ConfigError
from citemon._core.records import Passage

__all__ = [
    "BUILTIN_READERS",
    "FINAL_ANSWER_TOOLS",
    "ID_KEYS",
    "TEXT_KEYS",
    "ToolReading",
    "ToolResultReader",
    "ToolSelection",
    "pattern_reader",
    "read_tool_result",
    "reader_from_spec",
    "readers_from_specs",
]

log = logging.getLogger(__name__)

ToolResultReader = Callable[[str], list[Passage] | None]
"""Reads one tool result: its passages in order, or ``None`` when it does not know the shape."""

ID_KEYS: Final = (
    "id",
    "id_",
    "passage_id",
    "doc_id",
    "document_id",
    "chunk_id",
    "source_id",
    "node_id",
    "ref_doc_id",
)
"""Where a document in a tool's result keeps its ID (itself, or its ``metadata``)."""
TEXT_KEYS: Final = ("text", "content", "page_content", "chunk", "body", "snippet", "passage")
"""Where a document in a tool's result keeps its text."""
_REFERENCE_KEYS: Final = frozenset(
    {*ID_KEYS, "score", "metadata", "source", "type", "title", "url"}
)
"""The keys an ID-only document may have (``{"id": …, "score": …}``); an object with others and
no text is some other record (``{"id": 7, "name": "Bob"}``), not a document."""
_LIST_KEYS: Final = ("documents", "results", "passages", "docs", "items", "hits", "chunks", "data")
_MAX_REPR_CHARS: Final = 500_000
_MAX_REPR_MARKS: Final = 30_000
_NODE_MARKS: Final = ",:.([{=+-*/%@&|^~<>!"
"""Python reprs longer than this, or with more of these marks (each can open a node of the
tree: an item, a call, an attribute, an operator; those inside strings count too, a bound that
errs safe), are not parsed: ``ast`` holds about 0.9 kB per node (1 MB of ``1,`` took 476 MB,
and 320 kB of ``a()()…`` 105 MB before failing), and a tool's result is untrusted input."""
_NODE_WORDS: Final = re.compile(r"\b(?:and|or|in|is|not|if|for)\b")
"""The keywords that open a node with no mark (``a or a or …``: 500 kB of it held 90 MB), up
to :data:`_MAX_REPR_MARKS` of them too. A bound of their own, not added to the marks': prose's
words in its strings are no nodes (500 kB of English holds about 5,000), and the marks alone of
a large repr of prose come near their bound."""


# -- JSON and Python reprs ----------------------------------------------------------------------


def _scalar_id(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _passage_of(item: Any) -> Passage | None:
    """One object of a result list → a passage, or ``None`` when it has neither ID nor text."""
    if not isinstance(item, Mapping):
        return None
    score = item.get("score")
    node = item.get("node")
    doc: Mapping[str, Any] = node if isinstance(node, Mapping) else item
    meta = doc.get("metadata")
    metadata = dict(meta) if isinstance(meta, Mapping) else None
    pid = next((i for i in (_scalar_id(doc.get(k)) for k in ID_KEYS) if i is not None), None)
    if pid is None and metadata is not None:
        pid = next((i for i in (_scalar_id(metadata.get(k)) for k in ID_KEYS) if i), None)
    text = next((doc[k] for k in TEXT_KEYS if isinstance(doc.get(k), str)), None)
    if text is None and (pid is None or set(doc) - _REFERENCE_KEYS):
        return None  # no text, and more than a reference: a record of something else
    source = (metadata or {}).get("source", doc.get("source"))
    return Passage(
        id=pid or "",
        text=text or "",
        source=source if isinstance(source, str) else None,
        score=_score(score),
        metadata=metadata,
    )


def _score(value: Any) -> float | None:
    """A document's score, or none (an integer past a float's range is no score)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _passages_of(value: Any) -> list[Passage] | None:
    """A list of document objects (or such a list under one key of an object) → passages;
    ``None`` unless every item reads as a document and at least one has an ID or all text."""
    if isinstance(value, Mapping):
        listed = next((value[k] for k in _LIST_KEYS if isinstance(value.get(k), list)), None)
        if listed is None:
            one = _passage_of(value)  # a single document object
            return [one] if one is not None and one.id and one.text else None
        value = listed
    if not isinstance(value, list) or not value:
        return None
    out: list[Passage] = []
    for item in value:
        p = _passage_of(item)
        if p is None:
            return None
        out.append(p)
    return out


def read_json(text: str) -> list[Passage] | None:
    """A JSON list of document objects (or an object holding one)."""
    s = text.strip()
    if not s.startswith(("[", "{", '"')):
        return None
    try:
        value = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(value, str):  # a tool result JSON-encoded twice
        return read_json(value) if value.strip().startswith(("[", "{")) else None
    return _passages_of(value)


class _NotLiteral(Exception):
    pass


def _literal(node: ast.expr, depth: int = 0) -> Any:
    """A repr's node → a value: literals as :func:`ast.literal_eval` takes them, and calls
    (``Document(…)``) as dicts of their keyword arguments. Nothing is evaluated."""
    if depth > 20:
        raise _NotLiteral
    if isinstance(node, ast.Call):
        if node.args:
            raise _NotLiteral
        return {kw.arg: _literal(kw.value, depth + 1) for kw in node.keywords if kw.arg}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                raise _NotLiteral
            key = _literal(k, depth + 1)
            if not isinstance(key, str | int | float | bool | tuple | None):
                raise _NotLiteral  # a list or dict as a key: no dict of documents
            out[key] = _literal(v, depth + 1)
        return out
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _NotLiteral from None


def read_python_repr(text: str) -> list[Passage] | None:
    """A Python repr of documents: ``[Document(id=…, metadata={…}, page_content=…)]``, a list
    of dicts, a tuple of either."""
    s = text.strip()
    if not s.startswith(("[", "(")) or len(s) > _MAX_REPR_CHARS:
        return None
    if sum(map(s.count, _NODE_MARKS)) > _MAX_REPR_MARKS:
        return None
    if len(_NODE_WORDS.findall(s)) > _MAX_REPR_MARKS:
        return None
    try:
        tree = ast.parse(s, mode="eval")
        value = _literal(tree.body)
    except (SyntaxError, ValueError, MemoryError, RecursionError, _NotLiteral):
        return None
    return _passages_of(value)


# -- text renderings ----------------------------------------------------------------------------

# No lazy group is followed by what it may also match: a tool's result is untrusted input, and
# these run over all of it (no quadratic backtracking on a long line of "=" or spaces).
_HEADED: Final = re.compile(r"^[ \t]*=+[ \t]*Document[ \t]+([^\s=]+)[ \t]*=+[ \t]*$", re.MULTILINE)
_BRACKETED: Final = re.compile(r"^[ \t]*\[([^\[\]\s]{1,200})\][ \t]*", re.MULTILINE)
_META_LINE: Final = re.compile(r"^([A-Za-z_][\w.-]{0,63}):(.*)$")


def _blocks(text: str, starts: Sequence[re.Match[str]]) -> list[Passage]:
    out = []
    for n, m in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else len(text)
        out.append(Passage(id=m.group(1), text=text[m.end() : end].strip()))
    return out


def read_headed_blocks(text: str) -> list[Passage] | None:
    """smolagents' retriever rendering: ``===== Document p-3310 =====`` then the text."""
    starts = list(_HEADED.finditer(text))
    if not starts or text[: starts[0].start()].strip().count("\n") > 2:
        return None  # a heading buried deep in prose is not a list of documents
    return _blocks(text, starts)


def read_bracketed_blocks(text: str) -> list[Passage] | None:
    """``[p-3310] text`` blocks, each starting a line (LangChain ``document_prompt`` and the
    like); the result must start with one."""
    starts = list(_BRACKETED.finditer(text))
    if not starts or text[: starts[0].start()].strip():
        return None
    passages = _blocks(text, starts)
    return passages if all(p.text for p in passages) else None


def read_metadata_blocks(text: str) -> list[Passage] | None:
    """LlamaIndex's ``MetadataMode.LLM`` rendering: ``key: value`` lines (one an ID key), a
    blank line, the text; documents one after another."""
    lines = text.splitlines()
    out: list[Passage] = []
    texts: list[list[str]] = []
    i = 0
    current: list[str] | None = None
    while i < len(lines):
        header: dict[str, str] = {}
        j = i
        while j < len(lines) and (m := _META_LINE.match(lines[j])):
            header[m.group(1)] = m.group(2).strip()
            j += 1
        pid = next((header[k] for k in ID_KEYS if header.get(k)), None)
        if pid is not None and j < len(lines) and not lines[j].strip():
            current = []
            texts.append(current)
            out.append(Passage(id=pid, metadata=dict(header)))
            i = j + 1
            continue
        # Not a header: lines i..j-1 are text (no suffix of them is a header either, as it
        # ends at the same line), so they are not scanned again.
        j = max(j, i + 1)
        if current is None:
            if any(line.strip() for line in lines[i:j]):
                return None  # text before the first header: not this shape
        else:
            current.extend(lines[i:j])
        i = j
    for p, body in zip(out, texts, strict=True):
        p.text = "\n".join(body).strip()
    return out if out and all(p.text for p in out) else None


BUILTIN_READERS: Final[tuple[ToolResultReader, ...]] = (
    read_json,
    read_python_repr,
    read_headed_blocks,
    read_metadata_blocks,
    read_bracketed_blocks,
)
"""The shapes citemon reads by itself, in the order they are tried."""


# -- a team's own readers -----------------------------------------------------------------------


def pattern_reader(pattern: str) -> ToolResultReader:
    """A reader from a regular expression with named groups ``id`` and ``text``: its matches,
    in order, are the passages (none: not this shape). A bad pattern is a ``ConfigError``."""
    try:
        regex = re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise ConfigError(f"tool result pattern {pattern!r} is not a valid regex: {exc}") from None
    if not {"id", "text"} <= set(regex.groupindex):
        raise ConfigError(f"tool result pattern {pattern!r} needs named groups 'id' and 'text'")

    def read(text: str) -> list[Passage] | None:
        found = [
            Passage(id=m.group("id").strip(), text=(m.group("text") or "").strip())
            for m in regex.finditer(text)
            if m.group("id") and m.group("id").strip()
        ]
        return found or None

    read.__name__ = f"pattern {pattern!r}"
    return read


def reader_from_spec(spec: str) -> ToolResultReader:
    """``re:PATTERN`` (:func:`pattern_reader`) or ``package.module:factory`` (``factory()``
    returns the reader); a spec that cannot work is a ``ConfigError``."""
    spec = spec.strip()
    if spec.startswith("re:"):
        return pattern_reader(spec[3:])
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"tool result reader {spec!r}: use package.module:factory or re:PATTERN")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load tool result reader factory {spec!r}: {exc}") from None
    made = factory()
    if not callable(made):
        raise ConfigError(f"{spec}() returned {type(made).__name__}, not a callable reader")
    reader: ToolResultReader = made
    return reader


def readers_from_specs(specs: Iterable[str]) -> tuple[ToolResultReader, ...]:
    """Readers from several specs in the form of ``--tool-result-reader`` (blank ones skipped),
    loaded now."""
    return tuple(reader_from_spec(s) for s in specs if s.strip())


def _safe(reader: ToolResultReader, text: str) -> list[Passage] | None:
    try:
        found = reader(text)
    except Exception:  # a team's reader must never take the monitor down
        log.warning("tool result reader %r failed; trying the next", reader, exc_info=True)
        return None
    if found is None:
        return None
    if not isinstance(found, list) or not all(isinstance(p, Passage) for p in found):
        log.warning("tool result reader %r returned %s, not passages", reader, type(found))
        return None
    return found or None


def read_tool_result(
    text: str, readers: Sequence[ToolResultReader] = BUILTIN_READERS
) -> list[Passage] | None:
    """A tool's result as passages (in the order the model saw them), or ``None`` when no
    reader knows its shape (:meth:`ToolReading.read` puts a team's readers first). Passages
    may have an empty ID (numbered by position later) or an empty text (ID only: the passage
    store fills it)."""
    if not isinstance(text, str) or not text.strip():
        return None
    for reader in readers:
        found = _safe(reader, text)
        if found is not None:
            return found
    return None


FINAL_ANSWER_TOOLS: Final = frozenset({"final_answer"})
"""Tools whose argument is the agent's answer (smolagents ends a run by calling one)."""


@dataclass(frozen=True, slots=True)
class ToolSelection:
    """Which tools are search tools (``--retrieval-tools``, env ``CITEMON_RETRIEVAL_TOOLS``).

    ``*`` (the default; also an empty value): every tool whose result reads as documents.
    ``search_docs,kb``: only those tools — and their results are retrieval even when no reader
    knows the shape (the whole result is then one passage, numbered by position). ``*,-web``
    (or ``-web``): every tool whose result reads as documents except those named.
    """

    named: frozenset[str] = frozenset()
    excluded: frozenset[str] = frozenset()
    any_tool: bool = True

    @classmethod
    def parse(cls, spec: str) -> ToolSelection:
        names = [n.strip() for n in spec.split(",") if n.strip()]
        excluded = frozenset(n[1:].strip() for n in names if n.startswith("-"))
        named = frozenset(n for n in names if not n.startswith("-") and n != "*")
        if "" in excluded:
            raise ConfigError(f"--retrieval-tools {spec!r}: '-' needs a tool name after it")
        return cls(named=named, excluded=excluded, any_tool="*" in names or not named)

    def wants(self, tool: str) -> bool:
        """Whether the result of ``tool`` may be retrieval."""
        if tool in self.excluded or tool in FINAL_ANSWER_TOOLS:
            return False
        return self.any_tool or tool in self.named

    def insists(self, tool: str) -> bool:
        """Whether ``tool`` was named: its result is retrieval whatever its shape."""
        return tool in self.named and tool not in self.excluded

    def __str__(self) -> str:
        parts = ["*"] if self.any_tool else []
        return ",".join([*parts, *sorted(self.named), *(f"-{n}" for n in sorted(self.excluded))])


@dataclass(frozen=True, slots=True)
class ToolReading:
    """How an agent's tool calls are read: which tools are search tools, and a team's own
    readers (tried before the built-ins). The default reads every tool with the built-in
    readers; a command builds its own from its settings
    (:attr:`AgentSettings.reading <citemon._otlp.settings.AgentSettings.reading>`)."""

    selection: ToolSelection = ToolSelection()
    readers: tuple[ToolResultReader, ...] = ()

    def read(self, text: str) -> list[Passage] | None:
        """``text`` as passages: the team's readers first, then the built-ins
        (:func:`read_tool_result`)."""
        return read_tool_result(text, (*self.readers, *BUILTIN_READERS))
