"""A load whose requests fail is that load's failure (its kind from the server log), the sweep goes lighter, and the
pruner never judges it; a baseline, retried or not, is never pruned."""

from __future__ import annotations

import shlex

import optuna
import pytest
from optuna.trial import TrialState

from autotune.bench.runner import Progress
from autotune.bench.steady import SteadyWindow
from autotune.search.objective import Objective, Outcome, TrialEnvironment
from autotune.search.study import RunOptions, _KillOrphanAndRetry, create_or_load, open_storage, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space
from tests.study.conftest import ENGINE, write_space

STEPS = 11  # checkpoints 0-10 of one load level (autotune.search.objective)
METRIC = "total_token_throughput"


def both(metrics: dict, finished: int) -> tuple[dict, SteadyWindow]:
    """``metrics`` as the running ones and as a steady-state window whose every part measured them (the pruner judges
    the window: autotune.bench.steady)."""
    return metrics, SteadyWindow(finished, 1.0, metrics, (metrics,) * 4)


def completed_at(study: optuna.Study, level: int, values: tuple[float, ...]) -> None:
    """Trials that completed with ``values``, each reported at every checkpoint of load ``level``."""
    for value in values:
        trial = study.ask()
        for checkpoint in range(STEPS):
            trial.report(value, step=level * STEPS + checkpoint)
        study.tell(trial, value)


def test_a_load_that_runs_out_of_memory_goes_lighter_and_is_not_pruned(tmp_path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # the scripted engine runs out of memory once more than 4 requests are in flight: loads 2 and 4 serve, 16 fails
    path = write_space(tmp_path, env={"SCRIPTED_OOM_ABOVE_CONCURRENCY": "4"},
                       params={"max_num_seqs": {"choices": [8], "default": 8},
                               "max_concurrency": {"choices": [2, 4, 16], "default": 2}})  # fmt: skip
    # the scripted engine by this interpreter (PATH's python, which the space names, may lack autotune)
    options = RunOptions("oom", f"sqlite:///{tmp_path}/s.db", tmp_path / "studies", n_trials=4, heartbeat_s=0,
                         executables={"vllm": shlex.split(ENGINE)})  # fmt: skip
    prepared = prepare_study(load_space(path), path, options)
    # three trials far faster at the heaviest load (level 2), where the trial starts: the pruner is armed there
    completed_at(prepared.study, 2, (1e6, 1.1e6, 1.2e6))
    run_trials(prepared)
    trial = prepared.study.trials[3]
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["outcome"] == Outcome.MEASURED, trial.user_attrs
    assert "pruned_at" not in trial.user_attrs
    by_load = {b["load"]["max_concurrency"]: b for b in trial.user_attrs["benchmarks"]}
    assert by_load[16]["failure_kind"] == "oom" and not by_load[16]["feasible"]  # the log said CUDA out of memory
    assert by_load[4]["feasible"] and by_load[4]["metrics"]["failed"] == 0
    assert trial.user_attrs["load"] == {"max_concurrency": 4} and trial.values[0] > 0  # the lighter load won
    assert trial.user_attrs["oom_from_level"] == 2  # learned: heavier configurations run out from there too


def armed_study(tmp_path) -> tuple[optuna.Study, Objective]:
    """A study whose pruner judges load 0: its baseline queued, still to be asked, three trials completed there."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = write_space(tmp_path)
    space = load_space(path)
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = create_or_load(space, path, RunOptions("s", "", tmp_path, n_trials=4), storage)
    return study, Objective(space, TrialEnvironment(tmp_path, None, {}))


def slow_run(objective: Objective, trial: optuna.Trial, failed: int = 0) -> None:
    """A first benchmark at load 0 far slower than the completed trials, checkpoint by checkpoint."""
    hook = objective._pruning_hook(trial, level=0)
    for finished in range(10, 100, 10):
        hook(
            Progress(
                finished, 100, 1.0, *both({METRIC: 10.0, "completed": finished - failed, "failed": failed}, finished)
            )
        )


def test_a_load_whose_requests_fail_is_never_judged(tmp_path) -> None:
    study, objective = armed_study(tmp_path)
    baseline = study.ask()  # the queued baseline, left running
    completed_at(study, 0, (1000.0, 1100.0, 1200.0))
    failing = study.ask()
    assert not failing.user_attrs.get("baseline")
    slow_run(objective, failing, failed=1)  # one failed request: the load fails at its end, not here
    assert study.trials[failing.number].intermediate_values == {}  # its running value is no measurement
    slow = study.ask()
    with pytest.raises(optuna.TrialPruned):  # the same load without failures is judged, and pruned
        slow_run(objective, slow)
    assert baseline.user_attrs["baseline"]  # asked first, so that the trials judged here are no baselines


def test_a_baseline_is_never_pruned_and_a_retried_one_neither(tmp_path) -> None:
    study, objective = armed_study(tmp_path)
    baseline = study.ask()
    assert baseline.user_attrs["baseline"]
    completed_at(study, 0, (1000.0, 1100.0, 1200.0))
    slow_run(objective, baseline)  # not pruned
    assert study.trials[baseline.number].intermediate_values  # yet reported: others are compared with it
    # its worker dies: the study queues the configuration again (autotune.search.study._KillOrphanAndRetry)
    _KillOrphanAndRetry()(study, study.trials[baseline.number])
    retried = study.ask()
    assert retried.number != baseline.number and retried.user_attrs["baseline"]
    slow_run(objective, retried)
    assert "pruned_at" not in study.trials[retried.number].user_attrs
    other = study.ask()  # the control: the same values from a trial that is no baseline are pruned
    with pytest.raises(optuna.TrialPruned):
        slow_run(objective, other)
