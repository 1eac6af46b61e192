"""How `study best`, `study run` and `study show` print a several-workload study: the seed study's table, per
workload (``autotune.evidence.mix_table``), and each trial's per-workload results."""

from __future__ import annotations

import shlex

import optuna
from rich.console import Console
from rich.table import Table

from autotune import records
from autotune.evidence.mix_table import TABLE_HEADERS, load_text, references_text, table_lines, workload_rows
from autotune.evidence.reproduce import bench_argv

_CAPTION = ("gain: the mix's best against the baseline on that workload; own best: the best trial on that workload "
            "alone (met its SLOs); regret: what the one command costs there against it")  # fmt: skip


def mix_metric_text(record: records.TrialRecord, metric: str) -> str:
    """What a several-workload trial's value is, in words: no throughput, but each workload's relative to its
    reference (the baseline's, or where the baseline misses the workload's SLO the first trial's that met it), mixed."""
    return f"the mix ({record.mix or 'geomean'}) of each workload's {metric} relative to its reference"


def mix_table(study: optuna.Study, best: optuna.trial.FrozenTrial, simulated: str) -> Table:
    """Per workload: baseline vs the mix's best (gain), the workload's own best and the regret."""
    metric = study.metric_names[0] if study.metric_names else "value"
    record = records.TrialRecord.of(best)
    title = (f"{simulated}workloads: baseline vs the mix's best, trial {best.number} ({study.study_name}; "
             f"{metric}; mix {record.mix or 'geomean'} = {best.values[0]:.3f})")  # fmt: skip
    rows = workload_rows(study, best)
    table = Table(title=title, caption=f"{_CAPTION}\n{references_text(rows)}")
    for header in TABLE_HEADERS:
        table.add_column(header, justify="left" if header in ("workload", "own best's configuration") else "right")
    for cells in table_lines(rows, metric):
        table.add_row(*cells)
    return table


def print_mix_best(study: optuna.Study, best: optuna.trial.FrozenTrial, simulated: str, port: int) -> None:
    """The table, then the `autotune bench` line of each workload at the load the best chose for it."""
    console = Console(width=max(Console().width, 160))
    console.print(mix_table(study, best, simulated))
    for result in records.workload_results(best):
        if result.measured:
            at = f" (at {load_text(result.load)})" if result.load else " (at its own load)"
            print(f"# reproduce workload {result.name}{at}:")
            print(shlex.join(bench_argv(study, best, port, workload_name=result.name)))


def workloads_text(trial: optuna.trial.FrozenTrial) -> str:
    """A trial's per-workload results on one line: name relative (load), `-` where skipped, `!` where it missed."""
    parts = []
    for r in records.workload_results(trial):
        if r.skipped:
            parts.append(f"{r.name} skipped")
        elif r.relative is not None:
            parts.append(f"{r.name} {r.relative:.2f}x" + ("" if r.feasible else " (misses SLO)"))
        else:
            parts.append(f"{r.name} {'failed' if r.failure_kind else 'no reference'}")
    return "; ".join(parts)


def workload_slos(study: optuna.Study) -> dict[str, dict[str, float]]:
    """Each workload's SLOs by name: its own, else the objective's ({} for a one-workload study)."""
    described = records.StudyRecord.of(study)
    return {w["name"]: (w.get("slo") if w.get("slo") is not None else described.slo)
            for w in described.workloads or []}  # fmt: skip


def workload_misses(trial: optuna.trial.FrozenTrial, slos: dict[str, dict[str, float]]) -> str:
    """'misses SLO: long p99_ttft_ms 163.2 > 60' for each workload of a mix trial that missed one; '' otherwise."""
    misses = []
    for result in records.workload_results(trial):
        if result.feasible or not result.metrics:
            continue
        limits = slos.get(result.name, {})
        misses += [f"{result.name} {metric} {result.metrics[metric]:.1f} > {limit:g}"
                   for metric, limit in limits.items() if result.metrics.get(metric, 0) > limit]  # fmt: skip
    return f"misses SLO: {', '.join(misses)}" if misses else ""


def print_workloads(console: Console, trials: list[optuna.trial.FrozenTrial]) -> None:
    """Each launched trial's per-workload results (relative to the study's baseline of each), one line each."""
    console.print("per workload (throughput relative to the baseline's; the value is their mix):")
    for trial in trials:
        if records.workload_results(trial) and not records.is_duplicate(trial) and trial.values:
            console.print(f"  #{trial.number} mix {trial.values[0]:.3f}: {workloads_text(trial)}", markup=False)


def mix_fields(record: records.TrialRecord) -> dict:
    """What `study show --json` adds for a several-workload trial: the mix, whether it stopped early (and its bound),
    and each workload's chosen load, value, relative, feasibility and metrics ({} for a one-workload trial)."""
    if not record.workloads:
        return {}
    return {"mix": record.mix, "mix_stopped_early": record.mix_stopped_early, "mix_bound": record.mix_bound,
            "workloads": [w.model_dump() for w in record.workloads]}  # fmt: skip
