"""`study run --n-trials N` sets the study's budget of launches in all to N, lowering it too: a study of budget 20
that has launched 4, run with `--n-trials 5`, makes 1 more launch (not as many as the stored budget of 20 allows); `--n-trials 3`, below what was launched, makes none and says so in one
line (exit 0); a run without --n-trials keeps the stored budget. On the simulator in direct mode (a table), so fast."""

from __future__ import annotations

from pathlib import Path

from tests.study.conftest import autotune, show
from tests.study.test_budget_launches import table_space


def _run(space: Path, studies: Path, *args: str) -> str:
    done = autotune("study", "run", str(space), "--seed", "1", *args, studies=studies)
    assert done.returncode == 0, done.stderr
    return done.stderr


def _budget(studies: Path) -> tuple[int, int]:
    """(budget, launches) of the study, from `study show --json`."""
    shown = show("budget", studies)["budget"]
    return shown["budget"], shown["launches"]


def test_n_trials_lowers_the_budget_and_a_run_without_it_keeps_it(tmp_path, studies) -> None:
    # 4 × 4 configurations, 6 refused by the static rule: 10 to launch
    space = table_space(tmp_path, [64, 256, 1024, 4096], [1024, 2048, 4096, 8192])
    _run(space, studies, "--n-trials", "4")
    assert _budget(studies) == (4, 4)
    _run(space, studies, "--n-trials", "20", "--timeout", "0")  # the budget raised to 20, no trial started
    assert _budget(studies) == (20, 4)
    _run(space, studies, "--n-trials", "5")  # lowered: one more launch
    assert _budget(studies) == (5, 5)
    # below what it has launched: nothing runs, one line says so, exit 0; the budget is what was launched
    stderr = _run(space, studies, "--n-trials", "3")
    assert _budget(studies) == (5, 5)
    line = "study budget has 5 launches already, more than --n-trials 3: nothing to run; fix: --more N to add launches"
    assert line in stderr.splitlines(), stderr
    # without --n-trials (the space sets no `trials`: the default, 8, for a new study) the stored budget stays
    _run(space, studies)
    assert _budget(studies) == (5, 5)
    _run(space, studies, "--more", "1")  # --more adds to it
    assert _budget(studies) == (6, 6)
