"""Screenshots for the docs, taken in headless Chromium (Debian's package, driven by Playwright) as a user sees them.

Usage: python scripts/screenshots.py [STUDIES_DIR [OUT_DIR]]

STUDIES_DIR holds a quickstart study (it is AUTOTUNE_STUDIES_DIR for the CLI); without it, a short quickstart study is
run first in a temporary directory. OUT_DIR defaults to docs/screenshots. One function per page shot; each returns the
files it wrote. The dashboard's crashed trial comes from a scripted-engine study, run in STUDIES_DIR where it has none.
"""

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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as `python scripts/screenshots.py`: the tests' dashboard helper is shared

from autotune.testing.browser import dashboard_server  # noqa: E402

VIEWPORT = {"width": 1200, "height": 800}  # small PNGs: one figure, at a laptop's width
PARETO_FIGURE = "Throughput per GPU vs interactivity"


def autotune(*args: str, studies_dir: Path) -> None:
    """Run the CLI as a user would, on the studies in ``studies_dir``."""
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies_dir)}
    done = subprocess.run([sys.executable, "-m", "autotune", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"autotune {' '.join(args)} failed:\n{done.stderr}")


@contextlib.contextmanager
def chromium_page() -> Iterator[object]:
    """A fresh page in headless Chromium (the pattern of autotune.testing.browser, without pytest)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs Debian's chromium: apt-get install chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport=VIEWPORT)
        finally:
            browser.close()


def report_screenshots(studies_dir: Path, out_dir: Path, study: str = "quickstart") -> list[Path]:
    """The report of ``study`` (`autotune study report`): its Pareto figure, as report-pareto.png in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shot = out_dir / "report-pareto.png"
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.html"
        autotune("study", "report", "--study", study, "--out", str(report), studies_dir=studies_dir)
        with chromium_page() as page:
            page.goto(report.as_uri())
            figure = page.locator(f"section.figure[data-title='{PARETO_FIGURE}']")
            figure.locator(".main-svg").first.wait_for()
            figure.screenshot(path=str(shot))
    return [shot]


DASHBOARD_VIEWPORT = {"width": 1400, "height": 1000}  # a trial's page: its note and the start of its attributes
# The scripted stand-in engine exits at start-up on speculative decoding: a crashed launch with its log (the
# quickstart's simulated engines do not crash).
SCRIPTED_SPACE = REPO / "tests" / "study" / "scripted.yaml"
SCRIPTED_ENGINE = "python -m autotune.testing.scripted"


def dashboard_screenshots(studies_dir: Path, out_dir: Path) -> list[Path]:
    """optuna-dashboard's page of a rejected and a measured trial of the quickstart study, and of a crashed one of the
    scripted study (run first where ``studies_dir`` has none), each showing its note: dashboard-{rejected,measured,
    crashed}.png in ``out_dir``."""
    from autotune.errors import FailureKind

    if not (studies_dir / "scripted.db").exists():
        _run_scripted_study(studies_dir)
    launch_failures = {kind.value for kind in FailureKind} - {FailureKind.REJECTED.value}
    wanted = {
        "quickstart": {"rejected": {"rejected"}, "measured": {"measured"}},
        "scripted": {"crashed": launch_failures},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    shots = []
    for study, shown in wanted.items():
        outcomes = _outcomes(studies_dir, study)
        with dashboard_server(studies_dir, study) as url, chromium_page() as page:
            page.set_viewport_size(DASHBOARD_VIEWPORT)
            for name, kinds in shown.items():
                number = next(n for n, outcome in outcomes.items() if outcome in kinds)
                page.goto(url)
                page.get_by_text(study).first.click()
                page.wait_for_url("**/studies/*")
                page.goto(page.url.rstrip("/") + "/trials")
                page.get_by_text(f"Trial {number}", exact=True).first.click()
                page.locator("h5:text-is('Note') + div").get_by_text("Outcome:").wait_for()
                shots.append(out_dir / f"dashboard-{name}.png")
                page.screenshot(path=str(shots[-1]))
    return shots


def _run_scripted_study(studies_dir: Path) -> None:
    """The scripted study, its engine found on PATH (this Python's directory first): the launch commands the pictures
    show name no path of this machine."""
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies_dir),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    argv = [sys.executable, "-m", "autotune", "study", "run", str(SCRIPTED_SPACE), "--n-trials", "8", "--seed", "1",
            "--executable", SCRIPTED_ENGINE]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the scripted study failed:\n{done.stderr}")


def _outcomes(studies_dir: Path, study: str) -> dict[int, str | None]:
    """Each trial's ``outcome`` attribute, by trial number."""
    import optuna

    from autotune.search.study import default_storage

    loaded = optuna.load_study(study_name=study, storage=default_storage(study, studies_dir))
    return {t.number: t.user_attrs.get("outcome") for t in loaded.trials}


def main(argv: list[str]) -> None:
    out_dir = Path(argv[1]) if len(argv) > 1 else REPO / "docs" / "screenshots"
    if argv:
        shots = report_screenshots(Path(argv[0]), out_dir) + dashboard_screenshots(Path(argv[0]), out_dir)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            studies_dir = Path(scratch) / "studies"
            autotune("study", "run", "--n-trials", "16", "--seed", "2", studies_dir=studies_dir)
            shots = report_screenshots(studies_dir, out_dir) + dashboard_screenshots(studies_dir, out_dir)
    for shot in shots:
        print(shot)


if __name__ == "__main__":
    main(sys.argv[1:])
