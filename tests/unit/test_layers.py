"""The import layers of ``citemon`` (docs/architecture.md), kept by an AST walk of its source.

Bottom to top: ``core`` → ``engine`` → ``judges`` / ``passages`` → ``citemon`` (the package's
``__init__``, the public surface) → ``otlp`` / ``checks`` / ``metrics`` / ``rollout`` /
``demo`` / ``review`` → ``service`` → ``commands`` → ``cli``. A module imports only from its own
package or from a lower layer; the packages sharing a layer do not import each other. Every
import counts, including those inside functions and under ``TYPE_CHECKING``: a lazy import
hides a dependency from the interpreter, not from the design.

Three failures, each listing every offending import: an import that climbs (or crosses) a
layer, an import cycle between modules, and a ``_private`` name imported from another module
(the httpx way: private modules may hold public names, not the reverse).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "monitor" / "citemon"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"_core"}),
    frozenset({"_engine"}),
    frozenset({"judges", "_passages"}),
    frozenset({"citemon"}),  # the package's __init__: the public surface, re-exporting below it
    frozenset({"_otlp", "_checks", "_metrics", "_rollout", "_demo", "_review"}),
    frozenset({"_service"}),
    frozenset({"_commands"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
"""Bottom first. A name is the first part after ``citemon.`` (a subpackage or a module)."""


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # dotted module name
    target: str  # the dotted module imported from
    name: str | None  # the name imported (``from target import name``), None for ``import``
    line: int

    def __str__(self) -> str:
        what = f"from {self.target} import {self.name}" if self.name else f"import {self.target}"
        return f"{self.importer}:{self.line}: {what}"


def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file, for every module under the package directory ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(root: Path) -> list[Import]:
    """Every import of the package ``root`` from itself, resolved to the module it reads."""
    known = modules(root)
    top = root.name
    found = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found += [
                    Import(name, a.name, None, node.lineno)
                    for a in node.names
                    if a.name == top or a.name.startswith(top + ".")
                ]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join([*here, base] if base else here)
                if not (base == top or base.startswith(top + ".")):
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    # ``from citemon import _commands as commands`` imports the module itself
                    if sub in known:
                        found.append(Import(name, sub, None, node.lineno))
                    else:
                        found.append(Import(name, base, alias.name, node.lineno))
    return found


def layer_of(module: str) -> tuple[int, str]:
    parts = module.split(".")
    group = parts[1] if len(parts) > 1 else parts[0]
    for index, names in enumerate(LAYERS):
        if group in names:
            return index, group
    raise AssertionError(f"{module}: {group!r} is in no layer; add it to LAYERS")


def climbing(found: Iterable[Import]) -> list[Import]:
    """Imports of a higher layer, or of another package of the same layer."""
    bad = []
    for imp in found:
        (mine, my_group), (theirs, their_group) = layer_of(imp.importer), layer_of(imp.target)
        if theirs > mine or (theirs == mine and their_group != my_group and mine > 0):
            bad.append(imp)
    return bad


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if imp.target != imp.importer:
            graph.setdefault(imp.importer, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def private(found: Iterable[Import]) -> list[Import]:
    """``_name`` imported from another module (dunders such as ``__version__`` are public)."""
    return [
        imp
        for imp in found
        if imp.name is not None
        and imp.name.startswith("_")
        and not imp.name.startswith("__")
        and imp.target != imp.importer
    ]


def _report(title: str, items: Sequence[object]) -> str:
    return f"{title} ({len(items)}):\n" + "\n".join(f"  {item}" for item in items)


@pytest.fixture(scope="module")
def citemon_imports() -> list[Import]:
    return imports(PACKAGE)


def test_every_package_has_a_layer() -> None:
    for module in modules(PACKAGE):
        layer_of(module)  # raises for a package missing from LAYERS


def test_imports_only_go_down(citemon_imports: list[Import]) -> None:
    bad = climbing(citemon_imports)
    assert not bad, _report("imports that climb or cross a layer", bad)


def test_no_import_cycles(citemon_imports: list[Import]) -> None:
    found = cycles(citemon_imports)
    assert not found, _report("import cycles", found)


def test_no_private_names_across_modules(citemon_imports: list[Import]) -> None:
    bad = private(citemon_imports)
    assert not bad, _report("private names imported from another module", bad)


def test_the_walk_sees_the_package(citemon_imports: list[Import]) -> None:
    """Guards the guard: an empty walk would pass everything above."""
    edges = {(imp.importer, imp.target) for imp in citemon_imports}
    assert ("citemon._engine.scoring", "citemon._core.records") in edges
    assert ("citemon.cli", "citemon") in edges
    assert len(modules(PACKAGE)) > 60


# -- the checks themselves, on a planted package --------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _planted(tmp_path: Path) -> list[Import]:
    pkg = _write(
        tmp_path / "citemon",
        {
            "__init__.py": "from citemon._core.records import Verdict\n",
            "_core/__init__.py": "",
            "_core/records.py": "class Verdict: ...\n",
            "_core/text.py": "from citemon._engine.scoring import Scorer\n",  # climbs
            "_engine/__init__.py": "",
            "_engine/scoring.py": (
                "from citemon._core.records import Verdict\n"
                "from .claims import extract\n"
                "class Scorer: ...\n"
            ),
            "_engine/claims.py": (
                "def extract() -> None:\n"
                "    from citemon._engine import scoring  # a lazy import still closes a cycle\n"
            ),
            "_metrics/__init__.py": "from citemon._checks.probe import _count\n",  # crosses
            "_checks/__init__.py": "",
            "_checks/probe.py": "_count = 0\n",
        },
    )
    return imports(pkg)


def test_planted_upward_and_sideways_imports_are_caught(tmp_path: Path) -> None:
    bad = climbing(_planted(tmp_path))
    assert [str(b) for b in bad] == [
        "citemon._core.text:1: from citemon._engine.scoring import Scorer",
        "citemon._metrics:1: from citemon._checks.probe import _count",
    ]


def test_planted_cycle_is_caught(tmp_path: Path) -> None:
    assert cycles(_planted(tmp_path)) == [["citemon._engine.claims", "citemon._engine.scoring"]]


def test_planted_private_import_is_caught(tmp_path: Path) -> None:
    assert [str(b) for b in private(_planted(tmp_path))] == [
        "citemon._metrics:1: from citemon._checks.probe import _count"
    ]
