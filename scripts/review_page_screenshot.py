"""Take docs/img/review-page.png and review-page-long-answer.png: the review page in Debian's
Chromium, at a disagreement, and on an answer of 200 sentences.

    .venv/bin/python scripts/review_page_screenshot.py [OUT_DIR]

Serves the test review set (tests/review_sets.py) for reviewer "ann", labels the first claim
(entailed; citemon agrees), then labels the second one entailed, where citemon said unsupported,
so the page shows the revealed verdict and asks why; the first screenshot is taken there. The
second is the first task of the long-answer set, at a 1280 x 720 window.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from playwright.sync_api import sync_playwright  # noqa: E402

from citemon._review.page import ReviewPage, ReviewServer  # noqa: E402
from citemon._review.tasks import load_review_set  # noqa: E402
from tests.review_sets import write_long_answer_set, write_review_set  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
        )
        with _served(write_review_set) as url:
            page = browser.new_page(viewport={"width": 1100, "height": 860})
            page.goto(url)
            page.wait_for_selector("body[data-phase=label]")
            page.keyboard.press("1")
            page.wait_for_function("() => document.body.dataset.task.includes(',1]')")
            page.wait_for_selector("body[data-phase=label]")
            page.keyboard.press("1")
            page.wait_for_selector("body[data-phase=why]")
            page.screenshot(path=str(out / "review-page.png"))
        with _served(write_long_answer_set) as url:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(url)
            page.wait_for_selector("body[data-phase=label]")
            page.screenshot(path=str(out / "review-page-long-answer.png"))
        browser.close()
    print(out / "review-page.png", out / "review-page-long-answer.png")
    return 0


@contextmanager
def _served(write: Callable[[Path], Path]) -> Iterator[str]:
    """The review page on the set ``write`` makes, for reviewer "ann", on a free port."""
    with tempfile.TemporaryDirectory() as tmp:
        review_set = load_review_set(write(Path(tmp) / "set.jsonl"))
        server = ReviewServer(ReviewPage(review_set, Path(tmp) / "labels.jsonl", "ann"))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server.url
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    raise SystemExit(main())
