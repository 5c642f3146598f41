"""The architecture page (docs/architecture.md) names only modules that exist, and every module
of ``_service/``.

The page is read, not trusted: each section's heading names its subpackages (`` `service` `` is
``monitor/citemon/_service/``), and every ``*.py`` or ``dir/`` it mentions, in prose, tables or
drawings, must be a file or folder there, in the package, under ``monitor/`` or in the
repository. ``_service/``'s modules are listed from the filesystem, so a module added, renamed
or removed fails this test until the page follows.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "monitor" / "citemon"
PAGE = ROOT / "docs" / "architecture.md"

_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_MODULE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*\w+\.py)\b")
_FOLDER = re.compile(r"(?<![\w./-])(_?[a-z]\w*/)(?=[\s`,)]|$)", re.MULTILINE)


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for the page's ``##`` sections, and ("", the text before the first)."""
    parts = _SECTION.split(text)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def _packages(heading: str, package: Path) -> list[Path]:
    names = _BACKTICKED.findall(heading)
    return [p for n in names for p in (package / f"_{n}", package / n) if p.is_dir()]


def unknown_modules(text: str, root: Path) -> list[str]:
    """Every module or folder the page names that is not there, as ``section: name``."""
    package = root / "monitor" / "citemon"
    missing = []
    for heading, body in sections(text):
        bases = [*_packages(heading, package), package, root / "monitor", root]
        names = set(_MODULE.findall(body)) | set(_FOLDER.findall(body))
        for name in sorted(names):
            if not any((base / name).exists() for base in bases):
                missing.append(f"{heading or '(top)'}: {name}")
    return missing


def unnamed_service_modules(text: str, package: Path) -> list[str]:
    """The modules of ``_service/`` that the page's ``service`` section does not name."""
    bodies = [body for heading, body in sections(text) if "`service`" in heading]
    assert len(bodies) == 1, "the page has one section headed `service`"
    named = {Path(name).name for name in _MODULE.findall(bodies[0])}
    on_disk = sorted(p.name for p in (package / "_service").glob("*.py") if p.name != "__init__.py")
    return [name for name in on_disk if name not in named]


def test_every_module_the_page_names_exists() -> None:
    missing = unknown_modules(PAGE.read_text(encoding="utf-8"), ROOT)
    assert not missing, "docs/architecture.md names what is not there:\n" + "\n".join(missing)


def test_every_service_module_is_on_the_page() -> None:
    unnamed = unnamed_service_modules(PAGE.read_text(encoding="utf-8"), PACKAGE)
    assert not unnamed, "docs/architecture.md's `service` section lacks:\n" + "\n".join(unnamed)


def test_the_page_is_long_enough_to_check() -> None:
    """The checks above see the whole page: its service section, the answer's path and the
    layer rules (a page cut in half would pass them vacuously otherwise)."""
    headings = [heading for heading, _body in sections(PAGE.read_text(encoding="utf-8"))]
    assert any("`service`" in h for h in headings)
    assert any("How the layers are kept" in h for h in headings)
    text = PAGE.read_text(encoding="utf-8")
    assert "### One answer's path" in text
    assert "_service/ledger.py" in text


def _planted(tmp: Path) -> Path:
    for path in (
        "monitor/citemon/_service/intake.py",
        "monitor/citemon/_service/ledger.py",
        "monitor/citemon/_core/records.py",
        "tests/unit/test_layers.py",
    ):
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_text("")
    return tmp


def test_a_missing_module_is_found(tmp_path: Path) -> None:
    root = _planted(tmp_path)
    page = (
        "# Layers\n\n```\n_service/ intake\n_core/\n_gone/\n```\n\n"
        "## `core` — base\n\n`records.py`, `tally.py`\n\n"
        "## `service` — the monitor\n\n| `intake.py` | x |\n\n```\n_service/ledger.py  take\n```\n"
        "\nSee `tests/unit/test_layers.py` and `tests/unit/test_gone.py`.\n"
    )
    assert unknown_modules(page, root) == [
        "(top): _gone/",
        "`core` — base: tally.py",
        "`service` — the monitor: tests/unit/test_gone.py",
    ]
    (root / "monitor/citemon/_service/outputs.py").write_text("")
    assert unnamed_service_modules(page, root / "monitor" / "citemon") == ["outputs.py"]
