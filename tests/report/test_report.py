"""`autotune study report` on a quickstart study: one self-contained HTML file that renders in headless Chromium
without console errors and holds every figure; the trials export as CSV. The figures follow the study: parallel
coordinates over the parameters that vary, the Pareto front of the measured loads, the cost spent."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest

from autotune.evidence.report import baseline_rows, cost_line, figures, gain_column, pareto_front, trials_frame
from autotune.search.ranking import best_trial, feasible
from autotune.search.study import default_storage
from autotune.testing.browser import chromium_page
from tests.study.conftest import autotune, show

FIGURES = ("Optimization history", "Throughput per GPU vs interactivity", "Throughput per GPU vs TTFT",
           "Best configurations against load", "Parallel coordinates", "Parameter importances",
           "Per-engine comparison", "Where the time went")  # fmt: skip


@pytest.fixture(scope="module")
def quickstart(quickstart_studies) -> optuna.Study:
    return optuna.load_study(study_name="quickstart", storage=default_storage("quickstart", quickstart_studies))


def test_report_renders_every_figure(quickstart_studies, tmp_path) -> None:
    out, csv = tmp_path / "report.html", tmp_path / "trials.csv"
    done = autotune(
        "study", "report", "--study", "quickstart", "--out", str(out), "--csv", str(csv), studies=quickstart_studies
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "<script src=" not in text  # plotly is inlined: the file opens offline
    assert "node-hours in all" in text and "failed launches" in text
    trials = show("quickstart", quickstart_studies)["trials"]
    frame = pd.read_csv(csv)
    assert list(frame.number) == [t["number"] for t in trials]
    assert set(frame.outcome) <= {"measured", "pruned", "rejected", "oom", "unsupported", "no_data", "crash"}
    with chromium_page() as (page, errors):
        page.goto(out.as_uri())
        page.wait_for_selector(".plotly-graph-div .main-svg")
        titles = [page.locator("section.figure").nth(i).get_attribute("data-title") for i in range(len(FIGURES))]
        assert titles == list(FIGURES)
        for index, title in enumerate(FIGURES):  # every figure was drawn, not just declared, and its title is seen
            assert page.locator(f"#figure-{index} .main-svg").count() >= 1, title
            assert page.get_by_role("heading", name=title, exact=True).is_visible(), title
        assert "--port" in page.locator("#best-command").inner_text()
        assert page.locator("table.baseline tr").count() == 5  # header, three baselines, best
        assert "best vs this: change of total_token_throughput" in page.locator("table.baseline").inner_text()
        assert "node-hours" in page.locator("#cost").inner_text()
        assert errors == []


def test_cost_line_sums_node_minutes(quickstart) -> None:
    trials = quickstart.get_trials(deepcopy=False)
    hours = sum(t.user_attrs.get("node_minutes") or 0 for t in trials) / 60
    failed_hours = sum(t.user_attrs.get("node_minutes") or 0 for t in trials if t.user_attrs.get("failure_kind")) / 60
    failed_launches = sum(1 for t in trials if t.user_attrs.get("launched") and t.user_attrs.get("failure_kind"))
    line = cost_line(trials_frame(quickstart))
    assert f"{hours:.1f} node-hours in all, {failed_hours:.1f} node-hours on failures" in line
    assert f"{failed_launches} failed launches" in line


def test_parallel_coordinates_show_only_parameters_that_vary(quickstart) -> None:
    shown = [t for t in quickstart.get_trials(deepcopy=False) if feasible(t)]
    names = {name for t in shown for name in t.params}
    varying = {name for name in names if len({t.params[name] for t in shown if name in t.params}) > 1}
    assert varying < names  # in this seeded study some parameter keeps one value (a layout, say)
    dimensions = figures(quickstart)["Parallel coordinates"].data[0].dimensions
    assert {d.label for d in dimensions[:-1]} == varying and dimensions[-1].label == "total_token_throughput"
    ticks = [label for d in dimensions[:-1] for label in d.ticktext]
    assert "engine default" in ticks and "None" not in ticks


def test_baseline_gains_are_the_best_over_each_baseline(quickstart) -> None:
    best = best_trial(quickstart)
    rows = baseline_rows(quickstart, best)
    gain = gain_column("total_token_throughput", maximize=True)
    baselines = {t.number: t for t in quickstart.get_trials(deepcopy=False) if t.user_attrs.get("baseline")}
    for row in rows.to_dict("records")[:-1]:  # the last row is the best itself
        trial = baselines[int(row["trial"])]
        expected = f"{(best.values[0] / trial.values[0] - 1) * 100:+.1f}%" if feasible(trial) else ""
        assert row[gain] == expected
    assert rows.configuration.iloc[-1] == f"best ({best.user_attrs['engine']})" and rows[gain].iloc[-1] == ""
    assert list(rows.columns) == ["configuration", "trial", "outcome", "total_token_throughput", gain]


def _dominated(point: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    """Beaten by another point: at least as high on x, at least as low on y, and different (x up, y down better)."""
    return any(o[0] >= point[0] and o[1] <= point[1] and o != point for o in others)


def test_pareto_front_holds_exactly_the_non_dominated_points() -> None:
    points = [(1, 10), (2, 12), (2, 11), (3, 30), (0.5, 5), (3, 40), (1.5, 11), (4, math.nan)]
    frame = pd.DataFrame(points, columns=["throughput", "ttft"])
    front = pareto_front(frame, "throughput", "ttft", maximize_x=True, maximize_y=False)
    measured = [p for p in points if not math.isnan(p[1])]
    assert sorted(zip(front.throughput, front.ttft, strict=True)) == sorted(
        p for p in measured if not _dominated(p, measured)
    )
    assert list(front.throughput) == sorted(front.throughput)  # drawn as a line, left to right
    both_up = pareto_front(frame.assign(ttft=-frame.ttft), "throughput", "ttft", maximize_x=True, maximize_y=True)
    assert list(both_up.index) == list(front.index)  # the same front, whichever way the y axis is better


def test_the_fronts_show_each_engine_beside_the_overall_one(quickstart) -> None:
    engines = {t.user_attrs["engine"] for t in quickstart.get_trials(deepcopy=False) if feasible(t)}
    for title in ("Throughput per GPU vs interactivity", "Throughput per GPU vs TTFT"):
        names = {trace.name for trace in figures(quickstart)[title].data}
        assert "Pareto front" in names and {f"{engine} front" for engine in engines} <= names, (title, names)
