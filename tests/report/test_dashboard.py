"""`autotune dashboard NAME` serves optuna-dashboard on the study: in headless Chromium a user finds the study, a trial,
and the trial's server-log and launch-command artifacts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from autotune.server import free_port
from tests.browser import chromium_page
from tests.conftest import REPO


@pytest.fixture
def dashboard(quickstart_studies):
    pytest.importorskip("optuna_dashboard", reason="needs optuna-dashboard (the dashboard extra)")
    port = free_port()
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(quickstart_studies)}
    process = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", "--study", "quickstart", "--port", str(port)],
                               cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stdout.read().decode()
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/dashboard"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def test_dashboard_shows_study_trial_and_artifacts(dashboard) -> None:
    with chromium_page() as (page, errors):
        page.goto(dashboard)
        page.get_by_text("quickstart").first.click()
        page.wait_for_url("**/studies/*")
        page.goto(page.url.rstrip("/") + "/trials")
        page.get_by_text("Trial 0", exact=True).first.click()  # the vLLM baseline: launched, measured
        page.get_by_text("server.log").first.wait_for(timeout=15000)
        assert page.get_by_text("command.sh").count() >= 1
        assert page.get_by_text("benchmark.json").count() >= 1
        assert errors == []


def test_dashboard_without_study_is_a_clear_error(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "autotune", "dashboard", "--study", "nope"], cwd=REPO, capture_output=True,
                          text=True, env=os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path)}, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("autotune: error: no artifacts at")
