"""Watching a load while it runs: Optuna's pruner at checkpoints of a trial's first benchmark, and a load whose SLO is
clearly lost stopped part-way. Both read the benchmark's running metrics, in the engine's own time (the serving
backend converts the simulator's)."""

from __future__ import annotations

from collections.abc import Callable

import optuna

from autotune import records
from autotune.bench.runner import Progress
from autotune.records import Outcome

CHECKPOINT_STEPS = 10  # checkpoints per load, each a step of its own in Optuna's intermediate values
WARMUP_CHECKPOINTS = 3
# A load level is abandoned once its SLO is clearly lost: this share of its requests done, a limit exceeded this much.
LOST_AFTER, LOST_FACTOR = 0.3, 2.0

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
    """Reports ``metric`` at checkpoints of the trial's first benchmark and prunes it when Optuna's pruner says so.

    Each load level has its own range of steps, so the pruner compares a trial only with trials whose first
    benchmark ran at the same load (a lighter load's throughput is no sign of a worse configuration). Never judged: a
    baseline (``baseline`` attribute, kept by a retried one), whose checkpoints are still reported for the others to
    be compared with; and a load once any of its requests failed, which is reported no more (its running value counts
    only the requests that succeeded): the load fails and the sweep goes lighter."""
    baseline = records.is_baseline(trial)

    def report(progress: Progress) -> None:
        if requests_failed(progress):  # the counts are the load's so far: once failed, never judged again
            return
        value = progress.metrics.get(metric)
        if value is None:
            return
        checkpoint = round(progress.finished / progress.total * CHECKPOINT_STEPS)
        trial.report(float(value), step=level * (CHECKPOINT_STEPS + 1) + checkpoint)
        if checkpoint < WARMUP_CHECKPOINTS:  # the first requests are the ramp-up: judge nothing yet
            return
        # the last checkpoint is the measurement itself: keep it, however it compares
        if not baseline and progress.finished < progress.total and trial.should_prune():
            records.write(trial, outcome=Outcome.PRUNED, pruned_at=f"{progress.finished}/{progress.total} requests")
            raise optuna.TrialPruned(f"{metric} {value:.1f} at {progress.finished}/{progress.total} requests")

    return report
