"""The line a finished trial leaves while a study runs (`study run`, `study upgrade`, a node's workers): its number
and what became of it, in words, shown as text (never as markup, control characters made visible)."""

from __future__ import annotations

import optuna
from rich.console import Console

from autotune.cli.trials_table import load_text
from autotune.cli.workloads_view import workloads_text
from autotune.records import Outcome, TrialRecord
from autotune.search.ranking import feasible
from autotune.text import shorten, terminal_safe

REASON_WIDTH = 160  # characters of a failure reason from a log on a trial's line


def trial_line(trial: optuna.trial.FrozenTrial) -> str:
    """'trial 7: 1234.5 at max_concurrency=64', 'trial 8: crash: …', safe for a terminal."""
    return f"trial {trial.number}: {terminal_safe(outcome(trial))}"


def print_trial_line(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """A run's ``on_trial`` callback: the trial's line on stderr."""
    # not markup: a reason's "[sparse not supported]" would be taken for a style and vanish
    Console(stderr=True).print(trial_line(trial), markup=False)


def outcome(trial: optuna.trial.FrozenTrial) -> str:
    """What became of the trial: its value and load, a failure and its reason, pruned, a duplicate, a mix."""
    record = TrialRecord.of(trial)
    if trial.state.name == "PRUNED":
        return f"{Outcome.PRUNED} ({record.pruned_at or 'duplicate'})"
    if record.failure_kind is not None:
        # a reason from a log is cut to a line, with the log's path; one of our rules' is shown whole (and wraps)
        reason = record.failure_reason or ""
        return f"{record.failure_kind}: " + (shorten(reason, REASON_WIDTH, record.server_log)
                                             if record.server_log else reason)  # fmt: skip
    dup = f" (same config as #{record.duplicate_of})" if record.duplicate else ""
    dup += f" on GPUs {','.join(record.gpus)}" if record.gpus else ""
    if not trial.values:
        return trial.state.name
    load = load_text(record.load)
    levels = len(record.benchmarks)
    swept = f" at {load} ({levels} loads measured on one launch)" if levels > 1 else (f" at {load}" if load else "")
    slo = "" if feasible(trial) else " (misses the SLO)"
    if record.workloads:  # several workloads: the mix, and each workload's relative
        stopped = f" (stopped early: at most {record.mix_bound:.3f})" if record.mix_bound is not None else ""
        return f"mix {trial.values[0]:.3f}{stopped}{slo}{dup}: {workloads_text(trial)}"
    return f"{trial.values[0]:.1f}{swept}{slo}{dup}"
