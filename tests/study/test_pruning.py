"""The early-stop wiring: checkpoint values go to the study's pruner, which stops a clearly slower trial."""

from __future__ import annotations

import optuna
import pytest

from autotune.bench.runner import Progress
from autotune.bench.steady import SteadyWindow
from autotune.search.objective import Objective, TrialEnvironment
from autotune.search.study import RunOptions, create_or_load, open_storage
from autotune.space.files import load_space
from tests.study.conftest import write_space


def both(metrics: dict, finished: int) -> tuple[dict, SteadyWindow]:
    """``metrics`` as the running ones and as a steady-state window whose every part measured them (the pruner judges
    the window: autotune.bench.steady)."""
    return metrics, SteadyWindow(finished, 1.0, metrics, (metrics,) * 4)


def test_a_trial_below_the_quartile_is_pruned_after_warmup(tmp_path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space_path = write_space(tmp_path)
    space = load_space(space_path)
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = create_or_load(space, space_path, RunOptions("s", "", tmp_path, n_trials=6), storage)
    for value in (1000.0, 1100.0, 1200.0):  # three completed trials reporting at every checkpoint of load 0
        trial = study.ask()
        for step in range(1, 11):
            trial.report(value, step)
        study.tell(trial, value)
    objective = Objective(space, TrialEnvironment(tmp_path, None, {}))
    slow = study.ask()
    hook = objective._pruning_hook(slow, level=0)
    for finished in (10, 20):  # checkpoints 1-2 are the warm-up: never pruned
        hook(Progress(finished, 100, 1.0, *both({"total_token_throughput": 100.0}, finished)))
    with pytest.raises(optuna.TrialPruned):
        hook(Progress(30, 100, 1.0, *both({"total_token_throughput": 100.0}, 30)))
    fast = study.ask()
    hook = objective._pruning_hook(fast, level=0)
    for finished in range(10, 101, 10):
        hook(Progress(finished, 100, 1.0, *both({"total_token_throughput": 1150.0}, finished)))
    assert fast.number != slow.number and study.trials[slow.number].user_attrs["pruned_at"] == "30/100 requests"
    done = study.ask()  # as slow as the pruned one, but its last checkpoint is a finished measurement: kept
    hook = objective._pruning_hook(done, level=0)
    hook(Progress(100, 100, 1.0, *both({"total_token_throughput": 100.0}, 100)))
    assert "pruned_at" not in study.trials[done.number].user_attrs
    # a trial whose first benchmark ran at another load is not judged against those: no trial measured there yet
    lighter = study.ask()
    hook = objective._pruning_hook(lighter, level=1)
    for finished in range(10, 101, 10):
        hook(Progress(finished, 100, 1.0, *both({"total_token_throughput": 100.0}, finished)))
    assert "pruned_at" not in study.trials[lighter.number].user_attrs
