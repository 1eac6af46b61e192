"""One launch measured on every workload of a several-workload space: a load sweep per workload, in the order that
tells configurations apart soonest, stopped once the workloads left cannot lift the mix above the incumbent
(``autotune.search.mix``). The trial's value is the mix; its SLO constraints the worst violation of each metric over
the workloads measured (a configuration infeasible on one workload is infeasible for the mix, graded by how far it
missed there).

The reference of a workload (what its throughput is divided by) is the study's: the first baseline's best feasible
throughput on it, stored with the study when that trial measures it (``StudyRecord.mix_reference``); a workload the
baseline could not serve within its SLOs takes the first trial's that did. A trial measured before a reference of a
workload existed keeps the relative it was given (1.0 where it set the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna

from autotune import records
from autotune.errors import FailureKind, LaunchFailed
from autotune.records import LoadRecord, Outcome, StudyRecord, WorkloadRecord
from autotune.search import mix
from autotune.search.ranking import best_of
from autotune.search.sweep import MAX_VIOLATION, LoadSweep, slo_constraint_keys
from autotune.space.schema import SearchSpace, Workload

LAUNCH_CONSTRAINT = "launch"


def study_history(trials: list[optuna.trial.FrozenTrial]) -> dict[str, list[float]]:
    """Each workload's relatives over the study's completed trials that met its SLOs (for the order the workloads
    are measured in: ``mix.discriminating_order``)."""
    history: dict[str, list[float]] = {}
    for t in trials:
        if t.state != optuna.trial.TrialState.COMPLETE or records.is_duplicate(t):
            continue
        for result in records.workload_results(t):
            if result.feasible and result.relative is not None:
                history.setdefault(result.name, []).append(result.relative)
    return history


class MixSweep:
    """The workloads of one launch: which to measure next, and what they add up to.

    Args:
        space: a space with several workloads.
        engine: the launched engine (its loads).
        study: the study (its incumbent, its trials' results per workload, the references).
        trial_number: this trial (left out of the study's history).
        cap: out-of-memory dominance's load index, for workloads swept at the space's loads.
    """

    def __init__(self, space: SearchSpace, engine: str, study: optuna.Study, trial_number: int,
                 cap: int | None = None) -> None:  # fmt: skip
        self.space, self.kind = space, space.objective.mix
        self.workloads = {w.name: w for w in space.mix_workloads()}
        trials = [t for t in study.get_trials(deepcopy=False) if t.number != trial_number]
        self.reference = dict(StudyRecord.of(study).mix_reference)
        incumbent = best_of(trials, maximize=True)
        self.incumbent = incumbent.values[0] if incumbent is not None else None
        held = {r.name: r for r in records.workload_results(incumbent)} if incumbent is not None else {}
        history = study_history(trials)
        incumbent_relatives = {n: r.relative for n, r in held.items() if r.relative is not None}
        self.order = mix.discriminating_order(list(self.workloads), history, incumbent_relatives)
        self.sweeps: dict[str, LoadSweep] = {}
        for name, workload in self.workloads.items():
            levels = space.workload_load_levels(engine, workload)
            chosen = held[name].load if name in held else None
            start = levels.index(chosen) if chosen in levels else None
            objective = space.objective.model_copy(update={"slo": space.workload_slo(workload)})
            # each workload's best load is found whatever the incumbent did on it: the mix, not one workload, must
            # beat the incumbent (so the sweep's incumbent bound is the mix's, below)
            self.sweeps[name] = LoadSweep(levels, objective, None, cap if workload.loads is None else None, start,
                                          workload)  # fmt: skip
        self.results: dict[str, WorkloadRecord] = {}
        self.stopped_early = False
        self.new_references: dict[str, float] = {}

    @property
    def benchmarks_run(self) -> int:
        return sum(s.benchmarks_run for s in self.sweeps.values())

    def next_workload(self) -> Workload | None:
        """The workload to measure next, or None: all measured, or those left cannot change the incumbent."""
        left = [name for name in self.order if name not in self.results]
        if not left:
            return None
        if self.incumbent is not None and any(not r.feasible for r in self.results.values()):
            self.stopped_early = True  # infeasible on one workload: infeasible for the mix, never the incumbent
            return None
        if mix.cannot_lift(self.kind, self._shares(), self._unbounded(left), self.incumbent):
            self.stopped_early = True
            return None
        return self.workloads[left[0]]

    def finish(self, workload: Workload) -> WorkloadRecord:
        """What ``workload``'s sweep found: its chosen load, feasibility, throughput and relative."""
        sweep = self.sweeps[workload.name]
        best = sweep.best()
        level = best or sweep.closest()
        value = level.values[0] if level is not None and level.values else None
        reference = self.reference.get(workload.name)
        if reference is None and best is not None and value:
            reference = self.new_references[workload.name] = self.reference[workload.name] = value
        failed = sweep.measured[min(sweep.measured)] if level is None and sweep.measured else None
        result = WorkloadRecord(
            name=workload.name, weight=workload.weight, load=level.load if level is not None else None,
            feasible=best is not None, value=value,
            relative=round(value / reference, 6) if value is not None and reference else None,
            violations={k: round(v, 4) for k, v in level.violations.items()} or None if level is not None else None,
            metrics=level.record().metrics if level is not None else None,
            failure_kind=failed.failure if failed is not None else None, loads_measured=len(sweep.measured),
        )  # fmt: skip
        self.results[workload.name] = result
        return result

    def load_records(self) -> list[LoadRecord]:
        """Every load measured so far, workload by workload in the order measured, each named by its workload."""
        return [r.model_copy(update={"workload": name}) for name in self.order if name in self.results
                for r in self.sweeps[name].records()]  # fmt: skip

    def unserved(self) -> WorkloadRecord | None:
        """A workload measured with no load served (its every load failed): the launch's failure, or None."""
        return next((r for r in self.results.values() if r.failure_kind is not None), None)

    def records(self) -> list[WorkloadRecord]:
        """Every workload, in the space's order; those not measured marked ``skipped``."""
        return [self.results.get(name) or WorkloadRecord(name=name, weight=w.weight, skipped=True)
                for name, w in self.workloads.items()]  # fmt: skip

    def _shares(self) -> list[mix.Share]:
        return [mix.Share(r.weight, r.relative) for r in self.results.values() if r.relative is not None]

    def bound(self) -> float | None:
        """After an early stop, the most the mix could have reached: the workloads left unbounded (``_unbounded``),
        so only the measured ones bound it (``worst``: the lowest of them); None without an early stop, or where
        nothing measured bounds it (a stop because one workload was infeasible, which makes the mix infeasible:
        ``geomean`` and ``weighted_mean`` of unbounded workloads are unbounded)."""
        left = self._unbounded([n for n in self.workloads if n not in self.results])
        if not (self.stopped_early and left):
            return None
        most = mix.upper_bound(self.kind, self._shares(), left)
        return most if math.isfinite(most) else None

    def _unbounded(self, names: list[str]) -> list[mix.Share]:
        # a workload not measured can reach anything (autotune.search.mix): only what was measured bounds the mix
        return [mix.Share(self.workloads[n].weight, math.inf) for n in names]

    def value(self) -> float:
        """The trial's value: the mix of the workloads measured; after an early stop, also at most its bound (so it
        never leads the incumbent, and the sampler is told what was measured, not the optimistic bound)."""
        measured = mix.mix_value(self.kind, self._shares())
        bound = self.bound()
        return measured if bound is None else min(measured, bound)

    def constraints(self) -> dict[str, float]:
        """Each SLO constraint, its worst violation over the workloads measured (a metric no measured workload is
        judged by: met)."""
        worst: dict[str, float] = {}
        for result in self.results.values():
            for name, violation in (result.violations or {}).items():
                worst[name] = max(worst.get(name, -MAX_VIOLATION), violation)
        return {key: worst.get(key, 0.0) for key in slo_constraint_keys(self.space)}

    @property
    def feasible(self) -> bool:
        return bool(self.results) and all(r.feasible for r in self.results.values())


def measure_workloads(mixed: MixSweep, sweep_one: Callable[[LoadSweep, Workload, tuple[LoadRecord, ...]], None],
                      alive: Callable[[], bool]) -> None:  # fmt: skip
    """Sweep the workloads on the running engine, one after another in ``mixed``'s order, until it stops (or the
    engine died). ``sweep_one(sweep, workload, earlier)`` measures one, after the ``earlier`` workloads' records."""
    while alive() and (workload := mixed.next_workload()) is not None:
        sweep_one(mixed.sweeps[workload.name], workload, tuple(mixed.load_records()))
        mixed.finish(workload)


def report(trial: optuna.Trial, mixed: MixSweep) -> list[float]:
    """Record what the launch measured on each workload and set the trial's constraints; its value, the mix.

    Raises:
        LaunchFailed: a workload none of whose loads was served (the engine failed at its lightest, or died).
    """
    if mixed.new_references:
        records.write_study(trial.study, mix_reference=mixed.new_references)
    records.write(trial, benchmarks=mixed.load_records(), workloads=mixed.records(), mix=mixed.kind,
                  mix_stopped_early=mixed.stopped_early)  # fmt: skip
    if (bound := mixed.bound()) is not None:
        records.write(trial, mix_bound=round(bound, 6))
    unserved = mixed.unserved() or (None if mixed.results else WorkloadRecord(name="-", failure_kind="crash"))
    if unserved is not None:
        failed = mixed.sweeps[unserved.name].measured if unserved.name in mixed.sweeps else {}
        reason = failed[min(failed)].reason if failed else "the engine served no workload"
        raise LaunchFailed(FailureKind(unserved.failure_kind), f"workload {unserved.name}: {reason}", reason)
    first = next(r for r in mixed.records() if r.measured)
    records.write(trial, outcome=Outcome.MEASURED if mixed.feasible else Outcome.MISSES_SLO, load=first.load or {})
    trial.set_constraint(LAUNCH_CONSTRAINT, 0.0)
    for name, violation in mixed.constraints().items():
        trial.set_constraint(name, violation)
    return [mixed.value()]
