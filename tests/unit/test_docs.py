"""The documentation's pasted output stays true.

A fenced block preceded by ``<!-- docs-check: exact output -->`` starts with ``$ COMMAND`` (an
offline citemon command, optionally prefixed by ``VAR=value`` assignments) and holds exactly what
that command prints: the test runs it from the repository root and compares. Blocks whose output
needs servers (Kafka, Prometheus) or varies from run to run are left to the integration tests that
produce them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- docs-check: exact output -->"
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _checked_blocks() -> list[tuple[str, str, str]]:
    """(page, command, expected output) for every marked block under docs/."""
    found: list[tuple[str, str, str]] = []
    for page in sorted((ROOT / "docs").glob("**/*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            assert lines[i + 1].startswith("```"), (
                f"{page.name}:{i + 2}: the mark must precede a fence"
            )
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            command, *output = lines[i + 2 : end]
            assert command.startswith("$ "), f"{page.name}:{i + 3}: a checked block starts with $"
            found.append((page.name, command[2:], "\n".join(output) + "\n"))
    return found


BLOCKS = _checked_blocks()


def test_the_docs_check_at_least_the_specimen() -> None:
    assert any("specimen.jsonl" in command for _page, command, _out in BLOCKS)


@pytest.mark.parametrize(("page", "command", "expected"), BLOCKS, ids=[b[1][:60] for b in BLOCKS])
def test_pasted_output_matches_the_command(page: str, command: str, expected: str) -> None:
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEMON_")}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = str(ROOT / value) if value == "." else value
    assert words[0] == "citemon", f"{page}: only citemon commands are checked, not {words[0]!r}"
    run = subprocess.run(
        [sys.executable, "-m", "citemon", *words[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.stdout == expected, f"{page}: `{command}` prints something else now:\n{run.stdout}"


# Built from parts, so that this file does not match itself.
_OUTSIDE = re.compile(
    "|".join(
        (
            r"\b" + "DES" + "IGN" + r"\b",  # a design document the repository does not hold
            r"\b(?:NO" + "TES|STY" + r"LE)\.md\b",  # notes and a style guide it does not hold
            re.escape("../" + "shared") + r"(?!/data\b)",  # beside the checkout, but the data
            re.escape("/" + "work/"),  # this machine's paths
            r"\b" + "farm" + "-",
        )
    )
)


def _repository_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_the_repository_points_only_inside_itself() -> None:
    """Code, help texts, docs and tests cite the repository's own pages (the contract is
    docs/design.md), never a file beside the checkout. The one exception is ``../shared/data``,
    the labelled data sets that the data tests, benchmarks and scripts read."""
    found = []
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images
        for n, line in enumerate(text.splitlines(), 1):
            if match := _OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {match.group()!r}")
    assert not found, "points outside the repository:\n" + "\n".join(found)
