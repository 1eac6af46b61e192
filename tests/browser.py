"""Headless Chromium (Debian's package) driven by Playwright, for tests that must see a page as a user does."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextlib.contextmanager
def chromium_page() -> Iterator[tuple[object, list[str]]]:
    """A fresh page and the list its console errors and uncaught exceptions are collected in."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    if not shutil.which(CHROMIUM):
        pytest.skip("needs Debian's chromium (apt-get install chromium; .ci/run installs it)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page, errors
        finally:
            browser.close()
