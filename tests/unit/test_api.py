"""``citemon`` is the documented public API: every name of ``__all__`` importable and in
docs/api.md, and the page's examples print what it says they print."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

import citemon

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
_EXAMPLE = re.compile(
    r"<!-- api-check: exact output -->\n```python\n(.*?)```\n\n```text\n(.*?)```", re.S
)


def test_every_public_name_is_importable_and_documented() -> None:
    page = PAGE.read_text(encoding="utf-8")
    documented = set(re.findall(r"`(\w+)`", page.split("## The names", 1)[1]))
    assert set(citemon.__all__) <= documented
    for name in citemon.__all__:
        assert getattr(citemon, name) is not None


def test_the_api_page_is_in_the_site_navigation() -> None:
    assert "api.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


EXAMPLES = _EXAMPLE.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_its_examples() -> None:
    assert len(EXAMPLES) == 2


@pytest.mark.parametrize(("code", "expected"), EXAMPLES, ids=["score", "own-judge"])
def test_an_example_prints_what_the_page_says(code: str, expected: str) -> None:
    out = io.StringIO()
    here = Path.cwd()
    os.chdir(ROOT)  # the examples read examples/ as a user's checkout would
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(PAGE), "exec"), {"__name__": "example"})
    finally:
        os.chdir(here)
    assert out.getvalue() == expected
