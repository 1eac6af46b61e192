"""The regression table of an engine upgrade: the old study's baselines and best, old version against new.

One row per configuration (the old baselines, then the old best) and workload: the old study's value and the new
study's for the same parameters, the change in the objective's direction (+ = better on the new version), and its
noise interval where repeats exist (Welch's, over every launch of that configuration in each study, 95%). A
configuration measured once on a side has no interval: a change beyond ``SINGLE_RUN_NOISE`` is called slower or
faster, and within it "within noise" — this machine measures ±15% run to run at worst (docs/warm-start.md), so single runs
cannot tell a smaller change from noise.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict

from autotune import records
from autotune.evidence.validate import welch_difference
from autotune.search.ranking import best_trial, maximizes
from autotune.search.setup import baseline_params
from autotune.space.schema import ENGINE_PARAM, SearchSpace

SINGLE_RUN_NOISE = 0.15


class RegressionRow(BaseModel):
    """One configuration on one workload, old version against new."""

    model_config = ConfigDict(frozen=True)
    configuration: str  # the parameters that differ from the baseline ("baseline" for it)
    role: str  # "baseline" or "old best"
    workload: str
    old: list[float]  # every measurement of it in the old study
    new: list[float]
    new_failure: str | None = None  # what became of it on the new version, where it did not serve
    change: float | None = None  # mean new over mean old − 1, + = better in the objective's direction
    interval: float | None = None  # the change's half-width (repeats on both sides), None otherwise
    verdict: str


def _measurements(study: optuna.Study, params: dict[str, Any],
                  workloads: list[str]) -> tuple[dict[str, list[float]], str | None]:  # fmt: skip
    """Every value the study measured for ``params`` (its own launches), by workload, and its failure where it had
    none. A several-workload study's values are each workload's own throughput (``WorkloadRecord.value``), not the
    mix's, which is relative to the study's own baseline (1 for it on either version, whatever it measured)."""
    values: dict[str, list[float]] = {name: [] for name in workloads}
    failure = None
    for trial in study.get_trials(deepcopy=False):
        if trial.params != params or not records.launched(trial) or records.is_duplicate(trial):
            continue
        if records.failure_kind(trial):
            failure = records.failure_kind(trial)
        elif len(workloads) > 1:
            for result in records.workload_results(trial):
                if result.measured and result.name in values:
                    values[result.name].append(result.value)
        elif trial.values and trial.state == optuna.trial.TrialState.COMPLETE:  # a pruned one's is partial
            values[workloads[0]].append(trial.values[0])
    return values, (None if any(values.values()) else failure)


def _label(params: dict[str, Any], baseline: dict[str, Any], engines: int) -> str:
    changed = [f"{name}={value}" for name, value in params.items() if baseline.get(name) != value]
    if engines > 1 and ENGINE_PARAM in params:  # which engine's baseline, or which engine the old best ran
        changed = [f"{ENGINE_PARAM}={params[ENGINE_PARAM]}", *changed]  # the baseline is of the same engine
        return ", ".join(changed) if len(changed) > 1 else f"baseline ({params[ENGINE_PARAM]})"
    return ", ".join(changed) or "baseline"


def workload_text(space: SearchSpace) -> str:
    """A one-workload space's workload in a few words (dataset, lengths)."""
    workload = space.mix_workloads()[0].model_dump()
    lengths = "/".join(str(workload[k]) for k in ("input_len", "output_len") if workload.get(k) is not None)
    return " ".join(str(part) for part in (workload.get("dataset", "workload"), lengths) if part)


def regression_rows(old: optuna.Study, new: optuna.Study, space: SearchSpace) -> list[RegressionRow]:
    """The old baselines and the old best, each as the old study measured it and as the new one did: one row per
    configuration and workload (each of a several-workload space's, by name)."""
    better = 1 if maximizes(old) else -1
    workloads = [w.name for w in space.mix_workloads()] if space.is_mix else [workload_text(space)]
    compared: list[tuple[str, dict[str, Any]]] = [("baseline", baseline_params(space, e)) for e in space.engines]
    incumbent = best_trial(old)
    if incumbent is not None and incumbent.params not in [p for _, p in compared]:
        compared.append(("old best", incumbent.params))
    rows = []
    for role, params in compared:
        baseline = baseline_params(space, params.get(ENGINE_PARAM, next(iter(space.engines))))
        label = _label(params, baseline, len(space.engines))
        before, _ = _measurements(old, params, workloads)
        after, failure = _measurements(new, params, workloads)
        rows += [_row(label, role, name, before[name], after[name], failure, better) for name in workloads]
    return rows


def _row(label: str, role: str, workload: str, before: list[float], after: list[float], failure: str | None,
         better: int) -> RegressionRow:  # fmt: skip
    fields = {"configuration": label, "role": role, "workload": workload, "old": before, "new": after}
    if not before or not after:
        verdict = f"fails on the new version ({failure})" if failure else "not measured on both versions"
        return RegressionRow(**fields, new_failure=failure, verdict=verdict)
    old_mean = statistics.fmean(before)
    change = better * (statistics.fmean(after) / old_mean - 1) if old_mean else 0.0
    interval = None
    if min(len(before), len(after)) >= 2:
        _, half = welch_difference(before, after)
        interval = half / abs(old_mean) if old_mean and math.isfinite(half) else None
    noise = interval if interval is not None else SINGLE_RUN_NOISE
    verdict = "slower" if change < -noise else "faster" if change > noise else "within noise"
    if verdict != "within noise" and interval is None:
        verdict += " (1 run each)"
    return RegressionRow(**fields, change=round(change, 4), interval=interval, verdict=verdict)


def rows_text(row: RegressionRow) -> list[str]:
    """A row's cells for a terminal table."""

    def values(measured: list[float]) -> str:
        if not measured:
            return "-"
        mean = statistics.fmean(measured)
        return f"{mean:.1f}" + (f" (n={len(measured)})" if len(measured) > 1 else "")

    change = "-" if row.change is None else f"{row.change:+.1%}"
    if row.interval is not None:
        change += f" ± {row.interval:.1%}"
    return [row.configuration, row.role, row.workload, values(row.old), values(row.new), change, row.verdict]
