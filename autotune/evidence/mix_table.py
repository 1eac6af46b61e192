"""The seed study's table for a several-workload study: per workload, the baseline against the mix's best (gain),
and each workload's own best configuration with what the one launch command costs on it (regret).

- baseline: the study's reference of the workload (the first baseline's best feasible throughput on it);
- mix best: the best trial's throughput on it (at the load its sweep chose for that workload); gain = mix best /
  baseline − 1;
- own best: the trial with the highest throughput on that workload among those that met its SLOs there; regret =
  1 − mix best / own best: what serving every workload with the one command costs on this one.
"""

from __future__ import annotations

import optuna
from pydantic import BaseModel, ConfigDict

from autotune import records
from autotune.records import StudyRecord, WorkloadRecord


class WorkloadRow(BaseModel):
    """One workload's line of the table (throughputs in the study's objective metric)."""

    model_config = ConfigDict(frozen=True)
    workload: str
    weight: float
    baseline: float | None
    mix_best: float | None
    gain_pct: float | None
    mix_best_load: dict | None
    mix_best_feasible: bool
    own_best_trial: int | None
    own_best: float | None
    own_best_load: dict | None
    own_best_config: str  # "the mix's best", or the parameters where the workload's own best differs from it
    regret_pct: float | None


def is_mix_study(study: optuna.Study) -> bool:
    """Whether the study measured several workloads per launch."""
    return len(StudyRecord.of(study).workloads or []) > 1


def _own_bests(trials: list[optuna.trial.FrozenTrial]) -> dict[str, tuple[optuna.trial.FrozenTrial, WorkloadRecord]]:
    bests: dict[str, tuple[optuna.trial.FrozenTrial, WorkloadRecord]] = {}
    for t in trials:
        if t.state != optuna.trial.TrialState.COMPLETE or records.is_duplicate(t):
            continue
        for result in records.workload_results(t):
            if result.feasible and result.value is not None:
                held = bests.get(result.name)
                if held is None or result.value > held[1].value:
                    bests[result.name] = (t, result)
    return bests


def _differences(own: optuna.trial.FrozenTrial, best: optuna.trial.FrozenTrial) -> str:
    if own.number == best.number:
        return "the mix's best"
    changed = [f"{k}={v}" for k, v in own.params.items() if best.params.get(k) != v]
    return ", ".join(changed) or "same parameters"


def _pct(value: float | None, reference: float | None, regret: bool = False) -> float | None:
    if value is None or not reference:
        return None
    return round(100 * ((1 - value / reference) if regret else (value / reference - 1)), 1)


def workload_rows(study: optuna.Study, best: optuna.trial.FrozenTrial) -> list[WorkloadRow]:
    """The table's rows, one per workload of the study, in the space's order."""
    described = StudyRecord.of(study)
    held = {r.name: r for r in records.workload_results(best)}
    own = _own_bests(study.get_trials(deepcopy=False))
    rows = []
    for stored in described.workloads or []:
        name = stored["name"]
        reference = described.mix_reference.get(name)
        result = held.get(name)
        value = result.value if result is not None and result.measured else None
        own_trial, own_result = own.get(name, (None, None))
        rows.append(WorkloadRow(
            workload=name, weight=stored.get("weight", 1.0), baseline=reference, mix_best=value,
            gain_pct=_pct(value, reference), mix_best_load=result.load if result is not None else None,
            mix_best_feasible=bool(result and result.feasible),
            own_best_trial=own_trial.number if own_trial is not None else None,
            own_best=own_result.value if own_result is not None else None,
            own_best_load=own_result.load if own_result is not None else None,
            own_best_config=_differences(own_trial, best) if own_trial is not None else "none met its SLOs",
            regret_pct=_pct(value, own_result.value if own_result is not None else None, regret=True),
        ))  # fmt: skip
    return rows


def load_text(load: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (load or {}).items()) or "-"


def table_lines(rows: list[WorkloadRow], metric: str) -> list[list[str]]:
    """The rows as text cells: workload, weight, baseline, mix best (load), gain, own best (trial, load), regret,
    own best's configuration."""

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1f}%"

    return [[row.workload, f"{row.weight:g}", number(row.baseline),
             number(row.mix_best) + ("" if row.mix_best_feasible else " (misses SLO)"),
             pct(row.gain_pct), load_text(row.mix_best_load),
             f"#{row.own_best_trial}: {number(row.own_best)}" if row.own_best_trial is not None else "-",
             "-" if row.regret_pct is None else f"{row.regret_pct:.1f}%",
             row.own_best_config] for row in rows]  # fmt: skip


TABLE_HEADERS = ["workload", "weight", "baseline", "mix best", "gain", "mix best's load", "own best", "regret",
                 "own best's configuration"]  # fmt: skip
