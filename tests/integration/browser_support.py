"""Debian's Chromium, headless, driven by Playwright (``make browser`` installs the browser).

``playwright install`` would download a browser build of its own, which cannot happen here, so
Playwright launches the system's ``/usr/bin/chromium``. A missing browser fails under CI=true.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.conftest import need_server

__all__ = ["CHROMIUM", "chromium_browser"]

CHROMIUM = "/usr/bin/chromium"


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """A headless Chromium (Playwright's sync ``Browser``)."""
    if shutil.which(CHROMIUM) is None:
        need_server("Chromium", f"{CHROMIUM} is missing (make browser installs Debian's)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        need_server("Playwright", f"cannot import it ({exc}); make install")
    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            browser.close()
