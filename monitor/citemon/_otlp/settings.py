"""How agents' traces are read, as settings (``score`` and ``run``): which tools are search
tools, and a team's own reader of tool results (docs/dialects.md, "Agents"). The command hands
:attr:`AgentSettings.reading` to the decoder; nothing is set process-wide."""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import PrivateAttr, field_validator, model_validator

from citemon._core.errors import ConfigError
from citemon._core.settings import Flag, FlagSettings
from citemon._otlp.tool_results import ToolReading, ToolSelection, reader_from_spec

__all__ = ["AGENT_FLAGS", "AgentSettings"]

AGENT_FLAGS: tuple[Flag, ...] = (
    Flag(
        "--retrieval-tools",
        "retrieval_tools",
        "which tools' results are retrieved passages: * (default) any whose result reads as "
        "documents; NAME,NAME only those (read whatever their shape); *,-NAME all but those",
        metavar="TOOLS",
    ),
    Flag(
        "--tool-result-reader",
        "tool_result_reader",
        "your own reader of search tools' results, tried first: package.module:factory "
        "(factory() returns a callable text -> list of Passage or None) or re:PATTERN (named "
        "groups id and text)",
        metavar="SPEC",
    ),
)
"""The agent-reading flags."""


class AgentSettings(FlagSettings):
    """How agents' tool calls are read. Field ``x`` ⇔ env ``CITEMON_X``."""

    FLAGS: ClassVar[tuple[Flag, ...]] = AGENT_FLAGS
    TITLE: ClassVar[str] = "agents"

    retrieval_tools: str = "*"
    """``CITEMON_RETRIEVAL_TOOLS``."""
    tool_result_reader: str = ""
    """``CITEMON_TOOL_RESULT_READER``; empty: the built-in readers only."""

    _reading: ToolReading = PrivateAttr(default_factory=ToolReading)

    @field_validator("retrieval_tools")
    @classmethod
    def _a_selection(cls, value: str) -> str:
        try:
            ToolSelection.parse(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _load(self) -> Self:
        # The reader is loaded here, once, so that one that cannot work stops the command
        # before it reads anything (a ConfigError from ``from_args``).
        spec = self.tool_result_reader.strip()
        try:
            readers = (reader_from_spec(spec),) if spec else ()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        self._reading = ToolReading(ToolSelection.parse(self.retrieval_tools), readers)
        return self

    @property
    def reading(self) -> ToolReading:
        """These settings as the decoder takes them (:attr:`Limits.tools
        <citemon._otlp.spans.Limits.tools>`)."""
        return self._reading
