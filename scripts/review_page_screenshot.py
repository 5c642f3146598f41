"""Take docs/img/review-page.png: the review page in Debian's Chromium, at a disagreement.

    .venv/bin/python scripts/review_page_screenshot.py [OUT.png]

Serves the test review set (tests/review_sets.py) for reviewer "ann", labels the first claim
(entailed; citemon agrees), then labels the second one entailed, where citemon said unsupported,
so the page shows the revealed verdict and asks why; the screenshot is taken there.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from playwright.sync_api import sync_playwright  # noqa: E402

from citemon.review.page import ReviewPage, ReviewServer  # noqa: E402
from citemon.review.tasks import load_review_set  # noqa: E402
from tests.review_sets import write_review_set  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img" / "review-page.png"
    with tempfile.TemporaryDirectory() as tmp:
        review_set = load_review_set(write_review_set(Path(tmp) / "set.jsonl"))
        server = ReviewServer(ReviewPage(review_set, Path(tmp) / "labels.jsonl", "ann"))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1100, "height": 860})
            page.goto(server.url)
            page.wait_for_selector("body[data-phase=label]")
            page.keyboard.press("1")
            page.wait_for_function("() => document.body.dataset.task.includes(',1]')")
            page.wait_for_selector("body[data-phase=label]")
            page.keyboard.press("1")
            page.wait_for_selector("body[data-phase=why]")
            page.screenshot(path=str(out))
            browser.close()
        server.shutdown()
        server.server_close()
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
