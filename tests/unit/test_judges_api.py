"""``citemon.judges`` is the judge API: what it exports, and the judges docs page's examples."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import citemon
import citemon._core.errors
import citemon._core.judge
import citemon._core.records
import citemon.judges
from citemon._demo.data import specimen
from citemon._engine.scoring import Scorer
from citemon.judges import BatchJudge, Judge, load_judge

DOCS = Path(__file__).resolve().parents[2] / "docs" / "judges.md"


def test_every_exported_name_resolves_to_its_definition() -> None:
    for name in citemon.judges.__all__:
        value = getattr(citemon.judges, name)
        for home in (citemon._core.judge, citemon._core.errors, citemon._core.records):
            if hasattr(home, name):
                assert value is getattr(home, name), name  # a re-export, not a copy
    shared = {"Judge", "Verdict", "BatchJudge", "CitedVerdict", "SupportVerdict", "JudgeError"}
    assert shared <= set(citemon.judges.__all__) & set(citemon.__all__)
    for name in set(citemon.judges.__all__) & set(citemon.__all__):
        assert getattr(citemon.judges, name) is getattr(citemon, name), name
    with pytest.raises(AttributeError, match="no attribute 'EntailsBatch'"):
        _ = citemon.judges.EntailsBatch


def test_the_offline_judges_load_no_http_client() -> None:
    code = (
        "import asyncio, sys\n"
        "from citemon.judges import load_judge\n"
        "judge = load_judge('lexical')\n"
        "asyncio.run(judge.entails('x', {'p': 'x'}))\n"
        "print(sorted(m for m in sys.modules if m == 'httpx' or m.endswith('.transport')))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "[]"


def _doc_examples() -> str:
    """The python blocks of the docs page's "Writing a judge" section, in order."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Writing a judge", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2
    return "\n".join(blocks)


async def test_the_documented_judges_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _doc_examples()
    assert "citemon._core" not in source  # a judge author imports from citemon.judges only
    (tmp_path / "doc_judges.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    judge = load_judge("doc_judges:factory")
    assert isinstance(judge, Judge) and not isinstance(judge, BatchJudge)
    verdict = await judge.entails("A claim.", {"p-1": "A passage."})
    assert verdict.entailed and verdict.confidence == 0.9
    assert not (await judge.entails("A claim.", {})).entailed

    import doc_judges  # the module just written

    batch = doc_judges.MyBatchJudge()
    assert isinstance(batch, BatchJudge)
    # The scorer takes it through its batch path, as it takes a built-in judge.
    score = await Scorer(batch).score(specimen())
    assert [c.verdict for c in score.claims] == ["correct", "correct", "correct"]
