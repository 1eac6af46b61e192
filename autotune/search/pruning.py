"""Watching a load while it runs: Optuna's pruner at checkpoints of a trial's first benchmark, and a load whose SLO is
clearly lost stopped part-way. The SLO reads the benchmark's running metrics, in the engine's own time (the serving
backend converts the simulator's); the pruner reads its steady-state window (``autotune.bench.steady``) and stops a
trial only when it is behind with confidence: even its value ``CONFIDENCE`` relative errors better would be pruned.

Why both: on real vLLM-CPU the running value from the start pruned a study's real winner at 26/64 requests (1067.8
tok/s running; it re-measured at 3281 and 3020, above the study's best), since a configuration that runs many
sequences at once returns its first requests late. A pruned trial's value is Optuna's (its last window value), no
measurement: nothing that learns from measurements reads it (``autotune.search.warm_model``, ``calibration``)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import optuna

from autotune import records
from autotune.bench.runner import Progress
from autotune.records import Outcome, optuna_private
from autotune.search.ranking import maximizes

CHECKPOINT_STEPS = 10  # checkpoints per load, each a step of its own in Optuna's intermediate values
WARMUP_CHECKPOINTS = 3
# A load level is abandoned once its SLO is clearly lost: this share of its requests done, a limit exceeded this much.
LOST_AFTER, LOST_FACTOR = 0.3, 2.0
# One configuration re-measured on vLLM-CPU differs by up to 8% (3281 vs 3020 tok/s; 2845 vs 2829): a window's own
# spread is never taken as less than this, and a verdict needs its value this many relative errors better to lose too.
NOISE_FLOOR, CONFIDENCE = 0.05, 2.0

ProgressHook = Callable[[Progress], None]


class LoadLost(Exception):
    """A load level's SLO is clearly lost part-way: the level stops with its running metrics."""

    def __init__(self, metrics: dict) -> None:
        self.metrics = metrics
        super().__init__("SLO clearly lost")


def requests_failed(progress: Progress) -> bool:
    """Whether any request of the load so far has failed."""
    return progress.metrics.get("failed", 0) > 0


def progress_hook(prune: ProgressHook | None, slo: dict[str, float]) -> ProgressHook:
    """Every level stops once its SLO is clearly lost (``LoadLost``), unless its requests are failing: such a level
    ends as a failure (its kind from the server log), not as an SLO miss, so that an out-of-memory load is learned.
    ``prune``, when given, watches the level first."""

    def report(progress: Progress) -> None:
        if prune is not None:
            prune(progress)
        if requests_failed(progress):
            return
        if progress.finished >= LOST_AFTER * progress.total and progress.finished < progress.total:
            running = progress.metrics
            if any(running.get(m, 0) > LOST_FACTOR * limit for m, limit in slo.items()):
                raise LoadLost(running)

    return report


def pruning_hook(trial: optuna.Trial, level: int, metric: str) -> ProgressHook:
    """Reports ``metric`` of the load's steady-state window at checkpoints of the trial's first benchmark and prunes
    the trial when Optuna's pruner would, even for the window's value ``CONFIDENCE`` relative errors better.

    Each load level has its own range of steps, so the pruner compares a trial only with trials whose first
    benchmark ran at the same load (a lighter load's throughput is no sign of a worse configuration). Never judged: a
    baseline (``baseline`` attribute, kept by a retried one), whose checkpoints are still reported for the others to
    be compared with; a window too short to have an error; and a load once any of its requests failed, which is
    reported no more (its window counts only the requests that succeeded): the load fails and the sweep goes
    lighter."""
    baseline = records.is_baseline(trial)
    better = 1 if maximizes(trial.study) else -1

    def report(progress: Progress) -> None:
        if requests_failed(progress):  # the counts are the load's so far: once failed, never judged again
            return
        steady = progress.steady
        value = steady.value(metric) if steady is not None else None
        if value is None:  # still in the ramp-up: nothing to compare
            return
        checkpoint = round(progress.finished / progress.total * CHECKPOINT_STEPS)
        step = level * (CHECKPOINT_STEPS + 1) + checkpoint
        trial.report(value, step=step)
        if checkpoint < WARMUP_CHECKPOINTS or baseline or progress.finished >= progress.total:
            return  # the last checkpoint is the measurement itself: keep it, however it compares
        error = steady.relative_error(metric)
        if error is None:
            return
        optimistic = value * (1 + CONFIDENCE * max(error, NOISE_FLOOR)) ** better
        if behind_even_at(trial, step, optimistic):
            records.write(trial, outcome=Outcome.PRUNED, pruned_at=f"{progress.finished}/{progress.total} requests")
            raise optuna.TrialPruned(f"{metric} {value:.1f} (at best {optimistic:.1f}) at "
                                     f"{progress.finished}/{progress.total} requests")  # fmt: skip

    return report


def behind_even_at(trial: optuna.Trial, step: int, optimistic: float) -> bool:
    """Whether the study's pruner would stop ``trial`` had it reported ``optimistic`` at ``step``: the pruner's own
    rule (percentile, median) against the same completed trials, asked of a copy, so what is stored stays the
    measured value."""
    frozen = copy.copy(optuna_private.storage_of(trial.study).get_trial(optuna_private.trial_id_of(trial)))
    frozen.intermediate_values = {**frozen.intermediate_values, step: optimistic}
    return trial.study.pruner.prune(trial.study, frozen)
