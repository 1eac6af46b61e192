"""The load sweep: one launched configuration measured at several of the space's loads on its warm server.

A load (``max_concurrency``, ``request_rate``) changes what the client sends, not what is launched, so a trial pays
for one launch and finds its best load there. The levels are the space's loads, lightest first.

- Without SLOs every level is measured, heaviest first, while the configuration can still beat the incumbent.
- With SLOs the trial wants the heaviest load that meets them. Latency grows with load, so feasibility is monotone:
  the first level measured is the one where the study's incumbent met its SLOs (configurations of one space tend to
  cross their SLOs near each other), then its neighbour up (if it was feasible) or down (if not); without an
  incumbent, the heaviest level. Then bisection between the heaviest feasible and the lightest infeasible level.
- Throughput grows with load too (until the engine saturates): a level's throughput bounds every lighter level's.
  So, for a throughput objective, once the remaining levels cannot beat the study's incumbent (or the trial's own
  best), the sweep stops.
- Unless it does not: past its KV capacity an engine preempts, and on long prompts its throughput can fall with load
  (aiconfigurator's tables for Llama on vLLM: 30 of 212 configuration-and-workload pairs peak below their SLO
  boundary). Once a measured level has clearly less throughput than a lighter one (``FALL``), the bound is off for
  that launch, and after the boundary is found the best level's unmeasured neighbours are measured while one is
  better (a hill climb to the peak). A peak between two levels measured alike is taken for a plateau.
- A level that failed (out of memory at that load, say) is infeasible, as is every heavier one. A level with any
  failed request is a failed level (``autotune.serving.seam.Launch.measure``), of the kind the server log names, so the
  sweep goes lighter; the pruner never judges it (``autotune.search.objective``).

The trial's value is its best feasible level's objective; every level measured is kept (``LoadResult.record``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.bench.results import BenchmarkResult
from autotune.records import LoadRecord
from autotune.search.ranking import maximized, sign
from autotune.space.mix import slo_keys
from autotune.space.schema import Objective, SearchSpace, Workload

FALL = 0.03  # throughput this much lower at a heavier load falls with load (a saturated engine's noise is less)
MAX_VIOLATION = 1.0  # an SLO missed by more than its own limit counts as much as a failed launch's share


@dataclass
class LoadResult:
    """One level of a sweep: its load, and either the measured result or why it produced none."""

    load: dict[str, Any]
    result: dict | None = None
    failure: str | None = None  # a FailureKind value
    reason: str = ""
    stopped_early: bool = False
    violations: dict[str, float] = field(default_factory=dict)
    values: list[float] | None = None

    @property
    def feasible(self) -> bool:
        return self.failure is None and all(v <= 0 for v in self.violations.values())

    @property
    def total_violation(self) -> float:
        return sum(max(v, 0.0) for v in self.violations.values())

    def record(self) -> LoadRecord:
        """What the trial keeps of this level (``autotune.records``): load, value, feasibility, metrics or failure."""
        failure = {"failure_kind": self.failure, "failure_reason": self.reason} if self.failure else {}
        return LoadRecord.from_benchmark(self.result, self.load, feasible=self.feasible,
                                         value=self.values[0] if self.values else None,
                                         violations={k: round(v, 4) for k, v in self.violations.items()} or None,
                                         stopped_early=self.stopped_early, **failure)  # fmt: skip


def judged(objective: Objective, level: LoadResult, workload: Workload | None = None) -> LoadResult:
    """``level`` with its objective values and graded SLO violations, (measured − limit) / limit, computed: the
    objective's SLOs on the whole benchmark, and a ``dataset: mix`` workload's classes' own on each class."""
    classes = workload.classes if workload is not None else None
    if level.result is not None:
        level.values = [float(level.result[m.name]) for m in objective.metrics]
        if classes:
            result = BenchmarkResult.from_vllm_json(level.result)
            level.violations = result.slo_violations(workload, objective.slo, cap=MAX_VIOLATION)
        else:
            level.violations = {f"slo:{metric}": min((level.result[metric] - limit) / limit, MAX_VIOLATION)
                                for metric, limit in objective.slo.items()}  # fmt: skip
    else:
        level.violations = dict.fromkeys(slo_keys(classes, objective.slo), MAX_VIOLATION)
    return level


def slo_constraint_keys(space: SearchSpace) -> list[str]:
    """The SLO constraints every trial of ``space`` sets: each workload's SLOs (the objective's, or its own) and its
    request classes' own (``slo:<metric>``, ``slo:<class>:<metric>``), each once."""
    keys = [key for w in space.mix_workloads() for key in slo_keys(w.classes, space.workload_slo(w))]
    return list(dict.fromkeys(keys))


class LoadSweep:
    """Chooses which level to measure next, from what has been measured so far.

    Args:
        levels: the loads, lightest first.
        objective: the space's objective (metrics, directions, SLOs).
        incumbent: the study's best feasible value so far (first metric), or None.
        cap: levels from this index up are known infeasible before measuring (out-of-memory dominance).
        start: the level to measure first (the incumbent's), or None for the heaviest.
    """

    def __init__(self, levels: list[dict], objective: Objective, incumbent: float | None = None,
                 cap: int | None = None, start: int | None = None, workload: Workload | None = None) -> None:  # fmt: skip
        self.levels, self.objective, self.incumbent, self.start = levels, objective, incumbent, start
        self.workload = workload  # its request classes' own SLOs are judged too
        self.judged_by_slo = bool(slo_keys(workload.classes if workload else None, objective.slo))
        self.last: int | None = None
        self.cap = len(levels) if cap is None else min(cap, len(levels))
        self.measured: dict[int, LoadResult] = {}
        self.benchmarks_run = 0  # levels started, a pruned one included
        metric = objective.metrics[0]
        self.bounded = maximized(metric.direction) and metric.name.endswith(("throughput", "goodput", "_per_s"))

    def next_level(self) -> int | None:
        """The index of the level to measure next, or None when the sweep is done."""
        candidates = [i for i in range(self.cap) if i not in self.measured]
        if not self.judged_by_slo:
            return max(candidates) if candidates and not self._cannot_improve(0, own=False) else self._toward_peak()
        low = max((i for i, r in self.measured.items() if r.feasible), default=-1)
        high = min([i for i, r in self.measured.items() if not r.feasible] + [self.cap])
        if high - low <= 1 or self._cannot_improve(low + 1):
            return self._toward_peak()
        if not self.measured:
            return min(self.start, high - 1) if self.start is not None else high - 1
        if len(self.measured) == 1 and self.start is not None:  # next to where the incumbent's boundary was
            return low + 1 if self.measured[self.last].feasible else high - 1
        return (low + high) // 2

    def add(self, index: int, level: LoadResult) -> None:
        self.measured[index] = judged(self.objective, level, self.workload)
        self.last = index

    def _cannot_improve(self, lowest: int, own: bool = True) -> bool:
        """No unmeasured level from ``lowest`` up can beat the incumbent (or, with ``own``, the sweep's own best):
        throughput is taken as monotone in load. Without SLOs only the incumbent counts, so every load is measured
        for a configuration that can still lead (and a throughput that falls with load is seen)."""
        if not self.bounded or self._falls():
            return False
        bounds = [r.values[0] for i, r in self.measured.items() if i >= lowest and r.values]
        if not bounds:
            return False
        ceiling = min(bounds)  # every level below a measured one has at most its throughput
        best = self.best() if own else None
        floors = [v for v in (self.incumbent, best.values[0] if best else None) if v is not None]
        return bool(floors) and ceiling <= max(floors)

    def _toward_peak(self) -> int | None:
        """An unmeasured feasible neighbour of the best level (lighter first), where throughput falls with load
        (``_falls``: past the engine's KV capacity, on long prompts), so the peak may lie next to the best one, where
        the bound (throughput taken as growing with load) would never look; else None. Each neighbour that is better
        moves the search on: a hill climb."""
        best = self._best_measured()
        if not self.bounded or best is None or not self._falls():
            return None
        index = best[0]
        heaviest_feasible = max(i for i, r in self.measured.items() if r.feasible)
        return next((i for i in (index - 1, index + 1) if 0 <= i <= heaviest_feasible and i not in self.measured),
                    None)  # fmt: skip

    def _falls(self) -> bool:
        """Whether a level measured has clearly less throughput than a lighter one (by more than ``FALL``, beyond
        a saturated engine's noise): throughput does not grow with load here, so it bounds nothing."""
        values = [r.values[0] for _, r in sorted(self.measured.items()) if r.values]
        return any(later < (1 - FALL) * earlier for i, earlier in enumerate(values) for later in values[i + 1 :])

    def best(self) -> LoadResult | None:
        """The best feasible level measured (first metric, the space's direction; ties: the lighter load)."""
        best = self._best_measured()
        return best[1] if best else None

    def _best_measured(self) -> tuple[int, LoadResult] | None:
        """``best`` with its level's index."""
        feasible = [(i, r) for i, r in self.measured.items() if r.feasible and r.values]
        if not feasible:
            return None
        better = sign(self.objective.metrics[0].direction)
        return max(feasible, key=lambda item: (better * item[1].values[0], -item[0]))

    def closest(self) -> LoadResult | None:
        """The measured level nearest to feasible (least total SLO violation), for a trial with no feasible level."""
        measured = [r for r in self.measured.values() if r.result is not None]
        return min(measured, key=lambda r: r.total_violation) if measured else None

    def lowest_failure(self) -> int | None:
        """The lightest level that failed (no result), if any: with monotone memory, every heavier one fails too."""
        return min((i for i, r in self.measured.items() if r.failure is not None), default=None)

    def records(self) -> list[LoadRecord]:
        """Every level measured, in the order of the space's loads (lightest first)."""
        return [self.measured[i].record() for i in sorted(self.measured)]
