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
from typing import Final

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
            re.escape("../" + "shared"),  # beside the checkout
            re.escape("/" + "work/"),  # this machine's paths
            r"(?<![\w.~])/(?:" + "root|home|Users" + r")/",  # anyone's machine paths
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
    docs/design.md), never a file beside the checkout nor a path of one machine. The labelled
    data sets the data tests, benchmarks and scripts read are found by ``tests/labelled_data.py``
    (an environment variable), not named."""
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


_HEADING = re.compile(r"^(#{1,6})\s+\S")


def empty_sections(text: str) -> list[str]:
    """The headings of ``text`` (Markdown) with nothing under them before the next heading of
    the same or a higher level, or the end: what a merge that drops half a page leaves behind.
    Lines inside fenced blocks are content, never headings."""
    items: list[tuple[int, str] | None] = []  # (level, heading) or None for a content line
    fence = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence:
            fence = "" if stripped.startswith(fence) else fence
            items.append(None)
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            items.append(None)
        elif match := _HEADING.match(line):
            items.append((len(match.group(1)), line.strip()))
        elif line.strip():
            items.append(None)
    empty = []
    for i, item in enumerate(items):
        if item is None:
            continue
        level, heading = item
        for later in items[i + 1 :]:
            if later is None:
                break
            if later[0] <= level:
                empty.append(heading)
                break
        else:
            empty.append(heading)
    return empty


def test_empty_sections_are_found() -> None:
    page = (
        "# Title\n\nIntro.\n\n## Kept\n\n### Sub\n\ntext\n\n## Lost\n\n"
        "## Also lost\n```\n# code\n```\n## End\n"
    )
    assert empty_sections(page) == ["## Lost", "## End"]
    assert empty_sections("# Title\n\ntext\n\n## The second half\n") == ["## The second half"]


def test_no_page_has_an_empty_section() -> None:
    pages = [*sorted((ROOT / "docs").glob("**/*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]
    found = [
        f"{page.relative_to(ROOT)}: {heading}"
        for page in pages
        for heading in empty_sections(page.read_text(encoding="utf-8"))
    ]
    assert not found, "sections with nothing in them (half a page lost?):\n" + "\n".join(found)


# Flags of other programs the pages quote (Prometheus, the Collector, inference servers, Docker),
# and prefixes written for a family of citemon's own (`--ssl-*`, `--review-*`).
_NOT_CITEMONS: Final = frozenset(
    {
        "--enable-feature",
        "--config",
        "--api-key",
        "--gpus",
        "--max-client-batch-size",
        "--max-concurrent-requests",
        "--model-id",
        "--payload-limit",
        "--ssl-",
        "--review-",
    }
)


def test_every_flag_the_pages_name_is_a_flag_of_citemon() -> None:
    """A page naming a flag no command has sends a reader to a usage error (running.md named
    ``--max-uncommitted-records``, a variable without a flag)."""
    import argparse

    from citemon.cli import build_parser

    flags: set[str] = set()
    waiting = [build_parser()]
    while waiting:
        parser = waiting.pop()
        for action in parser._actions:
            flags.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    sub.format_help()  # a command's parser adds its flags when first used
                    waiting.append(sub)
    unknown = sorted(
        f"{page.name}: {flag}"
        for page in [*(ROOT / "docs").glob("**/*.md"), ROOT / "README.md"]
        for flag in set(re.findall(r"`(--[a-z][a-z0-9-]*)", page.read_text(encoding="utf-8")))
        if flag not in flags and flag not in _NOT_CITEMONS
    )
    assert unknown == []
