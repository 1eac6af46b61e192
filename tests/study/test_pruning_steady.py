"""The pruner judges a load's steady state with confidence, and a pruned trial is no measurement (issue #51, item 4).

A real vLLM-CPU study pruned its real winner at 26/64 requests: the running value from the start was still in the
ramp-up (nothing is counted until the first requests come back). Here the loads are synthetic request records on a
controlled clock: every request carries 100 tokens, and the completions come at a steady rate after a ramp-up."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.bench.client import RequestRecord
from autotune.bench.metrics import compute_metrics
from autotune.bench.runner import Progress
from autotune.bench.steady import steady_window
from autotune.records import TrialRecord, WarmMeasurement
from autotune.search import calibration, warm_model
from autotune.search.objective import Objective, TrialEnvironment
from autotune.search.ranking import best_of
from autotune.search.study import RunOptions, create_or_load, open_storage
from autotune.space.files import load_space
from tests.study.conftest import write_space

METRIC = "total_token_throughput"
TOTAL = 100
COMPARED = (1000.0, 1100.0, 1200.0)  # completed trials' window values at every checkpoint: 25th percentile 1050


def load(tokens_per_s: float, first_back_s: float, uneven: bool = False) -> list[RequestRecord]:
    """``TOTAL`` requests of 100 tokens each, finished in order: the first ``first_back_s`` after the load starts (the
    ramp-up: all sent, none back), then one every ``100 / tokens_per_s`` seconds; ``uneven``: the same mean rate, but
    five requests come back fast, the next five slowly, and so on (a spread the window measures)."""
    gap = 100 / tokens_per_s
    records, end = [], first_back_s
    for i in range(TOTAL):
        if i:
            end += gap * ((1.8 if (i // 5) % 2 else 0.2) if uneven else 1.0)
        records.append(RequestRecord(prompt_len=50, requested_output_len=50, start_time=0.0, ttft=0.1,
                                     latency=end, output_tokens=50, success=True))  # fmt: skip
    return records


def checkpoints(records: list[RequestRecord]) -> list[Progress]:
    """The runner's checkpoints of ``records`` (every tenth of the load), elapsed from the first request sent."""
    progress = []
    for finished in range(10, TOTAL + 1, 10):
        done = records[:finished]
        elapsed = max(r.start_time + r.latency for r in done)
        progress.append(Progress(finished, TOTAL, elapsed, compute_metrics(done, elapsed), steady_window(done, TOTAL)))
    return progress


@pytest.fixture
def judged(tmp_path):
    """A function: whether a trial whose first benchmark is ``records`` is pruned, in a study of three completed
    trials that reported ``COMPARED`` at every checkpoint of the same load."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = write_space(tmp_path)
    space = load_space(path)
    study = create_or_load(space, path, RunOptions("s", "", tmp_path, n_trials=9),
                           open_storage(f"sqlite:///{tmp_path}/s.db"))  # fmt: skip
    study.ask()  # the baseline slot (never pruned), out of the way
    for value in COMPARED:
        trial = study.ask()
        for step in range(1, 11):
            trial.report(value, step)
        study.tell(trial, value)
    objective = Objective(space, TrialEnvironment(tmp_path, None, {}))

    def pruned_at(records: list[RequestRecord]) -> str | None:
        trial = study.ask()
        hook = objective._pruning_hook(trial, level=0)
        try:
            for progress in checkpoints(records):
                hook(progress)
        except optuna.TrialPruned:
            return study.trials[trial.number].user_attrs["pruned_at"]
        return None

    return pruned_at


def test_a_load_that_ramps_up_to_the_best_rate_is_not_pruned(judged) -> None:
    ramping = load(tokens_per_s=1150, first_back_s=5.0)
    running = checkpoints(ramping)[2].metrics[METRIC]
    assert running < 500  # what the old rule judged at 30%: far below every compared trial
    assert judged(ramping) is None


def test_a_load_steadily_below_the_others_is_pruned_at_the_first_judged_checkpoint(judged) -> None:
    assert judged(load(tokens_per_s=400, first_back_s=0.25)) == "30/100 requests"


def test_a_verdict_waits_for_the_confidence_its_gap_needs(judged) -> None:
    # 10 requests in the window at 30%: ±32% (1/√10); 600 x (1 + 2 x 0.32) = 979 is behind 1050 already
    assert judged(load(tokens_per_s=600, first_back_s=0.1)) == "30/100 requests"
    # the same mean, unevenly: its parts' spread, larger than that, holds the verdict back
    assert judged(load(tokens_per_s=600, first_back_s=0.1, uneven=True)) == "50/100 requests"
    # nearer the threshold: judged once 50 requests (±14%) back it
    assert judged(load(tokens_per_s=800, first_back_s=0.1)) == "70/100 requests"
    # within the noise of the threshold: never judged
    assert judged(load(tokens_per_s=950, first_back_s=0.1)) is None


def test_the_window_leaves_out_the_ramp_up() -> None:
    window = steady_window(load(tokens_per_s=1150, first_back_s=5.0)[:30], TOTAL)
    assert window is not None and window.requests == 10
    assert window.value(METRIC) == pytest.approx(1150)
    assert steady_window(load(1150, 5.0)[:21], TOTAL) is None  # one request past the ramp-up spans no time


# -- a pruned trial is no measurement ------------------------------------------------------------------------------
KNOB = CategoricalDistribution([1, 2, 3])


def launch(number: int, knob: int, value: float, state: TrialState = TrialState.COMPLETE, **attrs):
    trial = create_trial(state=state, value=value, params={"knob": knob}, distributions={"knob": KNOB},
                         user_attrs={"launched": True, **attrs}, intermediate_values={5: value})  # fmt: skip
    trial.number = number
    return trial


def test_a_pruned_trial_leaves_the_warm_weight_as_it_was() -> None:
    # the earlier studies found knob=3 best; here knob=1 < knob=2 agrees, and knob=3 was pruned part-way
    model = warm_model.WarmModel([WarmMeasurement(params={"knob": k}, relative=r, source=f"old:{k}")
                                  for k, r in ((1, 0.3), (2, 0.6), (3, 1.0))])  # fmt: skip
    measured = [launch(0, 1, 1000.0), launch(1, 2, 2000.0)]
    winner_pruned = launch(2, 3, 1067.8, TrialState.PRUNED, pruned_at="26/64 requests")
    before = warm_model.weight(model, measured, maximize=True, number=1)
    after = warm_model.weight(model, [*measured, winner_pruned], maximize=True, number=2)
    assert (
        (after.weight, after.pairs, after.concordant) == (before.weight, before.pairs, before.concordant) == (1.0, 1, 1)
    )


def test_a_pruned_pick_of_the_calibrated_model_is_no_miss_of_the_model() -> None:
    incumbent = launch(0, 1, 2000.0)
    pruned_pick = launch(1, 2, 500.0, TrialState.PRUNED, calibrated_predicted=2500.0)
    measured_pick = launch(1, 2, 500.0, calibrated_predicted=2500.0)
    assert TrialRecord.of(pruned_pick).calibrated_predicted == 2500.0
    assert not calibration._model_missed_last([incumbent, pruned_pick], maximize=True)
    assert calibration._model_missed_last([incumbent, measured_pick], maximize=True)  # a measured miss still counts


def test_a_pruned_trial_is_never_best_whatever_its_partial_value() -> None:
    complete, pruned = launch(0, 1, 1000.0), launch(1, 2, math.inf, TrialState.PRUNED)
    assert best_of([complete, pruned], maximize=True) is complete
