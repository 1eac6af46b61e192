"""Headless Chromium (Debian's package) driven by Playwright, for tests that must see a page as a user does, and
`autotune dashboard` served for it (also used by scripts/screenshots.py: ``dashboard_server`` needs no pytest;
``chromium_page`` skips the calling test where Playwright or Chromium is missing)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import autotune

# the directory that holds the autotune package: `python -m autotune` started there imports this very copy
PACKAGE_ROOT = Path(autotune.__file__).resolve().parent.parent

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextlib.contextmanager
def chromium_page() -> Iterator[tuple[object, list[str]]]:
    """A fresh page and the list its console errors and uncaught exceptions are collected in (for a pytest test)."""
    import pytest  # only a test asks for a page; the dashboard server below is used without pytest too

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


@contextlib.contextmanager
def dashboard_server(studies_dir: Path, study: str, timeout_s: float = 60.0) -> Iterator[str]:
    """`autotune dashboard` on ``study`` of ``studies_dir``, in its own session (its process group stopped at the end);
    yields its URL once it listens.

    Raises:
        RuntimeError: it exited or did not listen within ``timeout_s`` (with what it printed).
    """
    from autotune.serving.process import free_port

    port = free_port()
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies_dir)}
    with tempfile.TemporaryFile() as output:  # a file, not a pipe: a chatty server never blocks on a full pipe
        process = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", "--study", study, "--port", str(port)],
                                   cwd=PACKAGE_ROOT, env=env, start_new_session=True, stdout=output,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            while not _listening(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    output.seek(0)
                    printed = output.read().decode(errors="replace")
                    raise RuntimeError(f"autotune dashboard --study {study} did not start: {printed}")
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/dashboard"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
