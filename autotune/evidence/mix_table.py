"""The seed study's table for a several-workload study: per workload, the baseline against the mix's best (gain),
and each workload's own best configuration with what the one launch command costs on it (regret).

- baseline: the first baseline trial's own throughput on it, and whether it met the workload's SLOs there; gain =
  mix best / baseline − 1, and where the baseline missed its SLOs the gain says so (``baseline misses SLO →
  feasible``): a throughput ratio against an infeasible configuration would read as "no gain" where the tuning made
  the workload servable;
- reference: what the mix divides the workload's throughput by (``StudyRecord.mix_reference``): the baseline's value
  where it met its SLOs, else the first trial's that did (``reference_trial``);
- mix best: the best trial's throughput on it (at the load its sweep chose for that workload);
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
    baseline: float | None  # the baseline trial's own value on the workload (None: it did not measure it)
    baseline_trial: int | None
    baseline_feasible: bool
    reference: float | None  # what the mix's relative of this workload is against
    reference_trial: int | None  # the trial that set the reference (the baseline, unless it missed the SLO)
    mix_best: float | None
    gain_pct: float | None
    gain_note: str  # '' or what the gain means where the baseline missed its SLOs
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


def _first_baseline(trials: list[optuna.trial.FrozenTrial]) -> optuna.trial.FrozenTrial | None:
    """The study's first baseline that ran to the end (the one whose results set the references)."""
    done = [t for t in trials if records.is_baseline(t) and t.state == optuna.trial.TrialState.COMPLETE]
    return min(done, key=lambda t: t.number, default=None)


def _reference_trial(trials: list[optuna.trial.FrozenTrial], name: str, reference: float | None) -> int | None:
    """The first trial whose value on workload ``name`` is the study's reference of it (None: not found)."""
    if reference is None:
        return None
    for t in sorted(trials, key=lambda t: t.number):
        if any(r.name == name and r.value == reference for r in records.workload_results(t)):
            return t.number
    return None


def _gain_note(baseline: WorkloadRecord | None, best: WorkloadRecord | None) -> str:
    if baseline is None or not baseline.measured or baseline.feasible:
        return ""
    return "baseline misses SLO → " + ("feasible" if best is not None and best.feasible else "still misses SLO")


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
    trials = study.get_trials(deepcopy=False)
    own = _own_bests(trials)
    first_baseline = _first_baseline(trials)
    at_baseline = {r.name: r for r in records.workload_results(first_baseline)} if first_baseline else {}
    rows = []
    for stored in described.workloads or []:
        name = stored["name"]
        reference = described.mix_reference.get(name)
        result = held.get(name)
        value = result.value if result is not None and result.measured else None
        base = at_baseline.get(name)
        base_value = base.value if base is not None and base.measured else None
        own_trial, own_result = own.get(name, (None, None))
        rows.append(WorkloadRow(
            workload=name, weight=stored.get("weight", 1.0), baseline=base_value,
            baseline_trial=first_baseline.number if first_baseline is not None and base_value is not None else None,
            baseline_feasible=bool(base and base.feasible), reference=reference,
            reference_trial=_reference_trial(trials, name, reference), mix_best=value,
            gain_pct=_pct(value, base_value), gain_note=_gain_note(base, result),
            mix_best_load=result.load if result is not None else None,
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

    def gain(row: WorkloadRow) -> str:
        return f"{row.gain_note} ({pct(row.gain_pct)})" if row.gain_note else pct(row.gain_pct)

    return [[row.workload, f"{row.weight:g}",
             number(row.baseline) + ("" if row.baseline_feasible or row.baseline is None else " (misses SLO)"),
             number(row.mix_best) + ("" if row.mix_best_feasible else " (misses SLO)"),
             gain(row), load_text(row.mix_best_load),
             f"#{row.own_best_trial}: {number(row.own_best)}" if row.own_best_trial is not None else "-",
             "-" if row.regret_pct is None else f"{row.regret_pct:.1f}%",
             row.own_best_config] for row in rows]  # fmt: skip


TABLE_HEADERS = ["workload", "weight", "baseline", "mix best", "gain", "mix best's load", "own best", "regret",
                 "own best's configuration"]  # fmt: skip


def references_text(rows: list[WorkloadRow]) -> str:
    """What the mix value is relative to, in words: each workload's reference and the trial it came from."""
    parts = []
    for row in rows:
        if row.reference is None:
            parts.append(f"{row.workload}: none yet")
            continue
        source = f"trial {row.reference_trial}'s" if row.reference_trial is not None else "an earlier trial's"
        why = " (the baseline misses its SLO)" if row.baseline is not None and not row.baseline_feasible else ""
        parts.append(f"{row.workload}: {source} {row.reference:.1f}{why}")
    return "the mix is relative to each workload's reference: " + "; ".join(parts)
