"""The pruner stops what the README says: the bottom quarter (``percentile``) or the bottom half (``median``) of the
trials measured at the same step, in the study's direction; never a trial between the 25th and 75th percentile. A
pruned trial's note says where it was stopped."""

from __future__ import annotations

import optuna
import pytest

from autotune.bench.runner import Progress
from autotune.bench.steady import SteadyWindow
from autotune.evidence.notes import trial_note
from autotune.search.objective import Objective, TrialEnvironment
from autotune.search.study import RunOptions, create_or_load, make_pruner, open_storage
from autotune.space.files import load_space
from tests.study.conftest import write_space

STEP = 5
MEASURED = (100.0, 200.0, 300.0, 400.0, 500.0)  # 25th percentile 200, median 300, 75th percentile 400


def both(metrics: dict, finished: int) -> tuple[dict, SteadyWindow]:
    """``metrics`` as the running ones and as a steady-state window whose every part measured them (the pruner judges
    the window: autotune.bench.steady)."""
    return metrics, SteadyWindow(finished, 1.0, metrics, (metrics,) * 4)


def pruned(tmp_path, pruner: str, direction: str, value: float) -> bool:
    """Whether a trial reporting ``value`` at STEP is pruned, after five completed trials reported MEASURED there."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(write_space(tmp_path, search={"pruner": pruner}))
    study = optuna.create_study(direction=direction, pruner=make_pruner(space))
    for measured in MEASURED:
        trial = study.ask()
        trial.report(measured, STEP)
        study.tell(trial, measured)
    trial = study.ask()
    trial.report(value, STEP)
    return trial.should_prune()


@pytest.mark.parametrize(
    ("direction", "middle", "bottom", "top"),
    [("maximize", 300.0, 150.0, 450.0), ("minimize", 300.0, 450.0, 150.0)],
)
def test_the_percentile_pruner_stops_the_bottom_quarter_only(tmp_path, direction, middle, bottom, top) -> None:
    assert not pruned(tmp_path, "percentile", direction, middle)  # between the 25th and 75th percentile: kept
    assert not pruned(tmp_path, "percentile", direction, top)
    assert pruned(tmp_path, "percentile", direction, bottom)  # worse than three quarters of them: stopped


def test_the_median_pruner_stops_the_bottom_half(tmp_path) -> None:
    assert pruned(tmp_path, "median", "maximize", 250.0)
    assert not pruned(tmp_path, "median", "maximize", 350.0)


def test_no_pruner_stops_nothing(tmp_path) -> None:
    assert not pruned(tmp_path, "none", "maximize", 1.0)


def test_a_pruned_trial_says_where_it_was_stopped(tmp_path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = write_space(tmp_path)
    space = load_space(path)
    study = create_or_load(space, path, RunOptions("s", "", tmp_path, n_trials=5),
                           open_storage(f"sqlite:///{tmp_path}/s.db"))  # fmt: skip
    study.ask()  # the baseline slot (never pruned), out of the way
    for value in (1000.0, 1100.0, 1200.0):
        trial = study.ask()
        for step in range(11):
            trial.report(value, step)
        study.tell(trial, value)
    slow = study.ask()
    hook = Objective(space, TrialEnvironment(tmp_path, None, {}))._pruning_hook(slow, level=0)
    with pytest.raises(optuna.TrialPruned):
        for finished in range(10, 100, 10):
            hook(Progress(finished, 100, 1.0, *both({"total_token_throughput": 100.0, "failed": 0}, finished)))
    frozen = study.tell(slow, state=optuna.trial.TrialState.PRUNED)
    note = trial_note(frozen, space.objective)
    assert "**Pruned** at 30 of 100 requests of its first benchmark; total_token_throughput there: 100.0" in note
