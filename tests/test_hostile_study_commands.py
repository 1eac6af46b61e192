"""`study best`, `study report --csv` and `study show`'s learned rules through the CLI, on a study whose records hold
hostile values (tests.test_hostile_input's): control characters shown as escapes, no formula in the CSV."""

from __future__ import annotations

import csv

from typer.testing import CliRunner

from autotune.cli import app
from tests.test_hostile_input import FORMULA, INJECTED, NAME, _assert_shown_not_obeyed, study  # noqa: F401 (fixture)

runner = CliRunner()


def test_study_best_shows_the_launch_not_obeys_it(study) -> None:  # noqa: F811
    done = runner.invoke(app, ["study", "best", "--study", NAME])
    assert done.exit_code == 0, done.output
    _assert_shown_not_obeyed(done.stdout)
    assert INJECTED in done.stdout


def test_study_report_csv_has_no_formula_cells(study, tmp_path) -> None:  # noqa: F811
    path = tmp_path / "trials.csv"
    done = runner.invoke(
        app, ["study", "report", "--study", NAME, "--out", str(tmp_path / "r.html"), "--csv", str(path)]
    )
    assert done.exit_code == 0, done.output
    rows = list(csv.DictReader(path.open(newline="")))
    assert [row["param:tag"] for row in rows] == ["'" + FORMULA, "'+1"]
