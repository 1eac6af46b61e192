"""`autotune dashboard NAME` serves optuna-dashboard on the study: in headless Chromium a user finds the study, a trial,
the trial's server-log and launch-command artifacts, and its note saying why it was rejected or how it crashed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from autotune.search.study import default_storage
from autotune.testing.browser import chromium_page, dashboard_server
from tests.conftest import REPO
from tests.study.outcome_study import CRASH_LINE, NAME, outcome_study


@contextlib.contextmanager
def serving(studies: Path, study: str) -> Iterator[str]:
    """`autotune dashboard` on ``study`` in ``studies``; yields its URL."""
    pytest.importorskip("optuna_dashboard", reason="needs optuna-dashboard (the dashboard extra)")
    with dashboard_server(studies, study, timeout_s=30) as url:
        yield url


@pytest.fixture
def dashboard(quickstart_studies):
    with serving(quickstart_studies, "quickstart") as url:
        yield url


def open_trial(page, url: str, study: str, number: int):
    """Open trial ``number`` of ``study`` as a user does (study, trials, the trial); returns its note's card."""
    page.goto(url)
    page.get_by_text(study).first.click()
    page.wait_for_url("**/studies/*")
    page.goto(page.url.rstrip("/") + "/trials")
    page.get_by_text(f"Trial {number}", exact=True).first.click()
    note = page.locator("h5:text-is('Note') + div")
    note.get_by_text("Outcome:").wait_for(timeout=15000)
    return note


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


def test_a_trial_note_names_the_rule_that_rejected_it_and_the_error_line_of_a_crash(quickstart_studies, tmp_path):
    quickstart = optuna.load_study(study_name="quickstart", storage=default_storage("quickstart", quickstart_studies))
    rejected = next(t for t in quickstart.trials if t.user_attrs.get("outcome") == "rejected")
    with serving(quickstart_studies, "quickstart") as url, chromium_page() as (page, errors):
        note = open_trial(page, url, "quickstart", rejected.number)
        assert note.get_by_text("Outcome: rejected").is_visible()
        assert note.get_by_text(rejected.user_attrs["rejected_by"], exact=True).is_visible()
        assert errors == []
    # the quickstart's simulated engines do not crash; a replayed performance table does
    outcomes = outcome_study(tmp_path / "studies")
    crashed = next(t for t in outcomes.trials if t.user_attrs["outcome"] == "crash")
    with serving(tmp_path / "studies", NAME) as url, chromium_page() as (page, errors):
        note = open_trial(page, url, NAME, crashed.number)
        assert note.get_by_text(CRASH_LINE).is_visible()
        assert errors == []


def test_dashboard_without_study_is_a_clear_error(tmp_path) -> None:
    pytest.importorskip("optuna_dashboard", reason="needs optuna-dashboard (without it the error is the install hint)")
    done = subprocess.run([sys.executable, "-m", "autotune", "dashboard", "--study", "nope"], cwd=REPO, capture_output=True,
                          text=True, env=os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path)}, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("autotune: error: no artifacts at")
