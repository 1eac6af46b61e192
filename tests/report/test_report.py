"""`autotune study report` on a quickstart study: one self-contained HTML file that renders in headless Chromium
without console errors and holds every figure; the trials export as CSV."""

from __future__ import annotations

import pandas as pd

from tests.browser import chromium_page
from tests.study.conftest import autotune, show

FIGURES = ("Optimization history", "Parallel coordinates", "Parameter importances", "Throughput vs P99 latency",
           "Per-engine comparison", "Where the time went")  # fmt: skip


def test_report_renders_every_figure(quickstart_studies, tmp_path) -> None:
    out, csv = tmp_path / "report.html", tmp_path / "trials.csv"
    done = autotune(
        "study", "report", "--study", "quickstart", "--out", str(out), "--csv", str(csv), studies=quickstart_studies
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "<script src=" not in text  # plotly is inlined: the file opens offline
    trials = show("quickstart", quickstart_studies)["trials"]
    frame = pd.read_csv(csv)
    assert list(frame.number) == [t["number"] for t in trials]
    assert set(frame.outcome) <= {"measured", "pruned", "rejected", "oom", "unsupported", "no_data", "crash"}
    with chromium_page() as (page, errors):
        page.goto(out.as_uri())
        page.wait_for_selector(".plotly-graph-div .main-svg")
        titles = [page.locator("section.figure").nth(i).get_attribute("data-title") for i in range(len(FIGURES))]
        assert titles == list(FIGURES)
        for index in range(len(FIGURES)):  # every figure was drawn, not just declared
            assert page.locator(f"#figure-{index} .main-svg").count() >= 1, FIGURES[index]
        assert "--port" in page.locator("#best-command").inner_text()
        assert page.locator("table.baseline tr").count() == 5  # header, three baselines, best
        assert errors == []
