"""The demo's table: appended as plain text when piped, redrawn in place on a terminal.

The terminal case runs the renderer in a child process on a real pseudo-terminal and reads the
screen through a terminal emulator (pyte): what a user sees, not the escape codes.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios

import pyte

from citemon._demo.live_table import AppendedTable, open_table
from tests.conftest import REPO

COLUMNS, ROWS = 100, 30

# The demo's way of using it: a table every interval, a line printed from the traffic thread
# in between, the last table left on screen and the final summary printed after it.
CHILD = r"""
import threading
from citemon._demo.live_table import open_table

table = open_table()
print(type(table).__name__, flush=True)
for i in range(1, 5):
    table.show(f"t={i:4d}s  answers sent {10 * i}\nversion  answers\nv1       {9 * i:>7}")
    if i == 2:
        notice = threading.Thread(target=print, args=(">>> t=2s: deploy [v2] ships\n",))
        notice.start()
        notice.join()
table.close()
print("final, from the monitor's Prometheus counters:")
"""


def _screen_of(code: str) -> list[str]:
    """Run ``code`` with stdout and stderr on a pseudo-terminal; the screen's lines at exit."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env,
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    output = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert child.wait(timeout=60) == 0, output.decode(errors="replace")
    screen = pyte.Screen(COLUMNS, ROWS)
    pyte.ByteStream(screen).feed(bytes(output))
    return [line.rstrip() for line in screen.display if line.strip()]


def test_on_a_terminal_the_table_is_redrawn_in_place() -> None:
    lines = _screen_of(CHILD)
    assert lines == [
        "TerminalTable",
        ">>> t=2s: deploy [v2] ships",
        "t=   4s  answers sent 40",
        "version  answers",
        "v1            36",
        "final, from the monitor's Prometheus counters:",
    ]


def test_piped_each_table_is_appended_as_plain_text() -> None:
    stream = io.StringIO()
    table = open_table(stream)
    assert isinstance(table, AppendedTable)
    table.show("t=   3s  answers sent 30\nversion  answers\nv1            27")
    table.show("t=   6s  answers sent 60\nversion  answers\nv1            54")
    table.close()
    assert stream.getvalue() == (
        "t=   3s  answers sent 30\nversion  answers\nv1            27\n\n"
        "t=   6s  answers sent 60\nversion  answers\nv1            54\n\n"
    )
