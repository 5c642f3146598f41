"""``citemon --help`` comes from a table (:data:`citemon.cli.COMMANDS`), not from importing
every command: the chosen command alone is imported."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

from citemon import _commands as commands
from citemon.cli import COMMANDS, main

_IMPORTED = """
import json, sys
from citemon.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("citemon", "aiokafka")))))
"""


def _imported_by(*argv: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv], capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_help_imports_no_command() -> None:
    loaded = _imported_by("--help")
    assert "citemon.cli" in loaded
    assert not {m for m in loaded if m.startswith("citemon._commands.")}
    assert not {m for m in loaded if m.startswith(("citemon._service", "citemon.judges"))}
    assert not {m for m in loaded if m.startswith("aiokafka")}


def test_a_command_imports_itself_only() -> None:
    loaded = _imported_by("score", "--help")
    assert "citemon._commands.score" in loaded
    assert (
        not {"citemon._commands.run", "citemon._commands.demo", "citemon._service.pipeline"}
        & loaded
    )


def test_the_table_lists_every_command_with_its_docstring_line() -> None:
    modules = {
        f"citemon._commands.{m.name}"
        for m in pkgutil.iter_modules(commands.__path__)
        if not m.name.startswith("_")
    }
    assert {module for module, _ in COMMANDS.values()} == modules
    for name, (module, help_line) in COMMANDS.items():
        assert module.rsplit(".", 1)[1] == name
        doc = importlib.import_module(module).__doc__ or ""
        assert doc.strip().splitlines()[0] == help_line


def test_a_command_help_is_its_full_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["selftest", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: citemon selftest")
    assert "Exit\nstatus 1 when it does not" in out
