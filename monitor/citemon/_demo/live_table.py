"""The demo's live table: refreshed in place on a terminal, appended when piped.

On a terminal a user expects a table that updates where it stands, so each new copy replaces
the last through rich's :class:`~rich.live.Live` display; lines printed meanwhile (the deploy
notice) appear above it. Piped to a file or another program there is no screen to redraw: each
copy is appended, as plain text, exactly as ``render`` made it (what the tests and a log read).
"""

from __future__ import annotations

import sys
from typing import IO, Protocol

__all__ = ["AppendedTable", "LiveTable", "TerminalTable", "open_table"]


class LiveTable(Protocol):
    """Where the demo shows its latest table."""

    def show(self, text: str) -> None:
        """Show ``text`` (the heading line and the table) as the current table."""

    def close(self) -> None:
        """Leave the last table where it is and give the stream back."""


class AppendedTable:
    """Each table appended to ``stream``, followed by a blank line."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def show(self, text: str) -> None:
        self._stream.write(text + "\n\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


class TerminalTable:
    """The table redrawn in place on a terminal (rich's live display, refreshed on ``show``).

    The text is shown as it is, never read as rich markup: version names come from the spans.
    """

    def __init__(self, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=stream, force_terminal=True, highlight=False)
        # Refreshed when a table comes, not on a timer; what is printed meanwhile goes above it.
        self._live = Live(console=self._console, auto_refresh=False)
        self._live.start()

    def show(self, text: str) -> None:
        from rich.text import Text

        self._live.update(Text(text + "\n"), refresh=True)

    def close(self) -> None:
        self._live.stop()


def open_table(stream: IO[str] | None = None) -> LiveTable:
    """A :class:`TerminalTable` when ``stream`` (default stdout) is a terminal, else an
    :class:`AppendedTable`."""
    stream = stream if stream is not None else sys.stdout
    return TerminalTable(stream) if stream.isatty() else AppendedTable(stream)
