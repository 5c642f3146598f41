"""The review page in a real browser: Debian's Chromium, headless, driven by Playwright.

`citemon review serve` runs as its own process; a reviewer labels the whole set with the
keyboard, reloads mid-way, undoes twice, and the labels file holds exactly what was typed, in
order, with the verdicts revealed. A missing browser fails under CI=true (``make browser``
installs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from citemon._review.model import read_labels
from tests.conftest import REPO
from tests.integration.browser_support import chromium_browser
from tests.review_sets import HOSTILE, write_long_answer_set, write_review_set

WAIT_MS = 15_000

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def review_page(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`citemon review serve` on a free loopback port, as a reviewer starts it."""
    labels = tmp_path / "labels.jsonl"
    with _serve(write_review_set(tmp_path / "set.jsonl"), labels) as url:
        yield url, labels


@contextmanager
def _serve(review_set: Path, labels: Path) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "citemon", "review", "serve", "--set", str(review_set),
         "--labels", str(labels), "--reviewer", "ann", "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("review page: http://127.0.0.1:"), first + proc.stderr.read()
        yield first.split()[2]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _at(page: Any, phase: str, task: tuple[str, int] | None = None) -> None:
    """Wait until the page is in ``phase`` (on ``task``): the page sets both on <body>."""
    page.wait_for_function(
        "([phase, task]) => document.body.dataset.phase === phase"
        " && (task === null || document.body.dataset.task === task)",
        arg=[phase, json.dumps(list(task), separators=(",", ":")) if task else None],
        timeout=WAIT_MS,
    )


def _label(page: Any, key: str, task: tuple[str, int], then: tuple[str, int] | None) -> None:
    """Press ``key`` on ``task``; citemon agrees, so the label is saved and ``then`` opens."""
    _at(page, "label", task)
    page.keyboard.press(key)
    _at(page, "label" if then else "done", then)


def _disagree(page: Any, key: str, task: tuple[str, int], verdict: str) -> None:
    _at(page, "label", task)
    page.keyboard.press(key)
    _at(page, "why", task)
    assert page.locator("#verdict").inner_text() == verdict  # shown only now, after the label


def test_label_a_set_with_the_keyboard_reload_midway_and_the_file_is_exact(
    chromium: Any, review_page: tuple[str, Path], tmp_path: Path
) -> None:
    url, labels = review_page
    page = chromium.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    _at(page, "label", (A, 0))
    assert page.locator("#progress").inner_text() == "0 / 8"
    assert page.locator("#reveal").is_hidden()  # no verdict before a label

    # The hostile passage is shown as text: nothing ran, no element was made from it.
    passage = page.locator("#passages .passage").first
    assert HOSTILE in passage.inner_text()
    assert page.locator("#passages script, #passages img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#passages mark").all_inner_texts()[:2] == ["Eiffel", "Tower"]

    _label(page, "1", (A, 0), then=(A, 1))  # entailed; citemon said correct
    _disagree(page, "1", (A, 1), "unsupported")
    page.keyboard.press("u")  # back to the label: nothing written yet
    _label(page, "3", (A, 1), then=(B, 0))  # not entailed agrees with unsupported
    _disagree(page, "2", (B, 0), "correct")  # partial vs correct: why?
    page.keyboard.press("s")
    _at(page, "label", (B, 1))
    assert page.locator("#progress").inner_text() == "3 / 8"

    page.reload()  # mid-way: the page resumes at the first unlabelled claim
    _at(page, "label", (B, 1))
    assert page.locator("#progress").inner_text() == "3 / 8"

    _disagree(page, "1", (B, 1), "multi hop")
    page.screenshot(path=str(tmp_path / "why.png"))
    page.keyboard.press("o")
    _label(page, "3", (C, 0), then=(D, 0))
    page.keyboard.press("u")  # reopen c0: the new label replaces the one given
    _disagree(page, "4", (C, 0), "dangling")
    page.keyboard.press("Enter")  # no reason
    _label(page, "1", (D, 0), then=(D, 1))
    _disagree(page, "1", (D, 1), "misattributed (overlapping chunk)")
    page.keyboard.press("f")
    _label(page, "2", (D, 2), then=None)  # unjudged: nothing to disagree with
    assert page.locator("#progress").inner_text() == "8 / 8"
    assert (tmp_path / "why.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.close()

    lines = [json.loads(line) for line in labels.read_text().splitlines()]
    assert [(x["trace_id"], x["claim"], x["label"], x["checker"], x["verdict"]) for x in lines] == [
        (A, 0, "entailed", None, "correct"),
        (A, 1, "not_entailed", None, "unsupported"),
        (B, 0, "partial", "strict", "correct"),
        (B, 1, "entailed", "overlap", "multi_hop"),
        (C, 0, "not_entailed", None, "dangling"),
        (C, 0, "not_a_claim", None, "dangling"),
        (D, 0, "entailed", None, "correct"),
        (D, 1, "entailed", "fused", "misattributed"),
        (D, 2, "partial", None, "unjudged"),
    ]
    assert {x["reviewer"] for x in lines} == {"ann"}
    final = read_labels(labels)
    assert len(final) == 8  # every cited claim once
    assert [(x.key, x.label) for x in final if x.trace_id == C] == [((C, 0), "not_a_claim")]


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (1100, 860)])
def test_a_long_answer_keeps_the_claim_and_its_passages_in_view(
    chromium: Any, tmp_path: Path, width: int, height: int
) -> None:
    """A 200-sentence answer scrolls in its own box; the claim, its cited passages and the
    claim's sentence in the answer are all on screen, above the key bar, without scrolling."""
    with _serve(write_long_answer_set(tmp_path / "set.jsonl"), tmp_path / "labels.jsonl") as url:
        page = chromium.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(WAIT_MS)
        page.goto(url)
        for task, passages in (((A, 0), ["p-1"]), ((A, 1), ["p-2"])):
            _at(page, "label", task)
            assert page.evaluate("window.scrollY") == 0
            top = page.locator("header").bounding_box()["height"]
            bottom = page.locator("footer").bounding_box()["y"]  # fixed: the key bar
            assert bottom < height

            def on_screen(box: dict[str, float]) -> bool:
                return top <= box["y"] and box["y"] + box["height"] <= bottom  # noqa: B023

            claim = page.locator("#claim").bounding_box()
            assert on_screen(claim), (claim, top, bottom)
            shown = page.locator("#passages .passage")
            assert [p.split("\n")[0] for p in shown.all_inner_texts()] == passages
            for box in (shown.nth(i).bounding_box() for i in range(shown.count())):
                assert on_screen(box), (box, top, bottom)
            # The whole answer is there, in a box that scrolls, at the claim's own sentence.
            answer = page.locator("#answer")
            assert "Filler sentence 0 " in answer.inner_text()
            assert "Filler sentence 199 " in answer.inner_text()
            assert page.evaluate("$('answer').scrollHeight > 10 * $('answer').clientHeight")
            assert page.locator("#answer-more").is_visible()
            box, mark = answer.bounding_box(), page.locator("#answer mark").bounding_box()
            assert box["y"] <= mark["y"] and mark["y"] + mark["height"] <= box["y"] + box["height"]
            assert on_screen(box)
            page.keyboard.press("1" if task == (A, 0) else "3")  # citemon agrees both times
        _at(page, "done")
        page.close()
