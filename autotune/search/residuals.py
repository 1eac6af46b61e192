"""The residual model: a performance model's predictions corrected by what a study's launches measured.

After every launch that measured something, a residual model is refit: for each metric the objective and the SLOs
read, ``log(measured / predicted) = mean + Σ effect[knob = value] + effect[load]``, over every load each launch
measured (ridge regression: ``RIDGE`` pulls effects a few measurements support towards 0, so an unseen value keeps
the mean correction alone), plus ``Σ effect[knob = value, other = value']`` over pairs of knob values. The pairs are
there because a model's errors are seldom one knob's alone: an analytic model that misjudges data-parallel attention
misjudges it more at a long chunk, and a sum of single effects then keeps ranking the same wrong corner first.
``PAIR_RIDGE`` holds a pair's effect at 0 until measurements that share the pair disagree with the single effects.

``measured_configurations`` reads one workload's measurements (a several-workload study's are tagged with their
workload and fitted together by ``autotune.search.mix_model``). How the corrected metrics become a configuration's
value is the caller's (``autotune.search.calibration``, ``autotune.search.mix_model``).
"""

from __future__ import annotations

import json
import math

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import TrialRecord
from autotune.search.prior import PredictedLoad, Ranked, best_feasible
from autotune.space.schema import SearchSpace

RIDGE = 1.0  # the ridge penalty on each knob value's and load's effect (the mean correction is not penalised)
PAIR_RIDGE = 1.0  # the penalty on each pair's effect (one knob value with another)
PAIR = "pair "  # a pair's name starts with it (no single feature's does: those start with a knob's name or engine=)


def _features(ranked: Ranked, load: dict) -> list[str]:
    """The single features of ``ranked`` at ``load`` (engine, each knob value, the load), then every pair of its knob
    values (not with the engine: a knob belongs to one engine, so such a pair is the knob value again)."""
    knobs = [f"{name}={json.dumps(value)}" for name, value in ranked.params.items()]
    # not knob value with load: after the baseline alone, those pairs pulled the next pick to the baseline's
    # neighbours (its per-load SLO feasibility flips), 44 -> 263 node-minutes on a landscape the singles solve at once
    pairs = [f"{PAIR}{a} & {b}" for i, a in enumerate(knobs) for b in knobs[i + 1 :]]
    return [f"engine={ranked.engine}", *knobs, f"load={json.dumps(load, sort_keys=True)}", *pairs]


class Calibration:
    """The residual model of each metric, fitted to ``measured``: (the prior's ranking of a launched configuration,
    the metrics measured at each of its loads)."""

    def __init__(self, measured: list[tuple[Ranked, list[records.LoadRecord]]]) -> None:
        rows: list[tuple[list[str], dict[str, float]]] = []  # (features, log(measured / predicted) by metric)
        for ranked, loads in measured:
            predicted = {json.dumps(p.load, sort_keys=True): p.metrics for p in ranked.loads}
            for level in loads:
                model = predicted.get(json.dumps(level.load, sort_keys=True))
                if model is None or not level.metrics:
                    continue
                residuals = {name: math.log(got / value) for name, value in model.items()
                             if isinstance(got := level.metrics.get(name), int | float) and got > 0 and value > 0}  # fmt: skip
                rows.append((_features(ranked, level.load), residuals))
        self.rows = len(rows)  # the measured loads it is fitted to
        self._index = {f: i for i, f in enumerate(sorted({f for features, _ in rows for f in features}))}
        self._penalty = np.array([PAIR_RIDGE if f.startswith(PAIR) else RIDGE for f in self._index])
        names = {name for _, residuals in rows for name in residuals}
        self._fits = {name: self._fit([(f, r[name]) for f, r in rows if name in r]) for name in names}

    def _fit(self, rows: list[tuple[list[str], float]]) -> tuple[float, np.ndarray]:
        """The mean residual, and each feature's effect around it (ridge)."""
        x = np.zeros((len(rows), len(self._index)))
        for i, (features, _) in enumerate(rows):
            x[i, [self._index[f] for f in features]] = 1.0
        y = np.array([residual for _, residual in rows])
        mean = float(y.mean())
        return mean, np.linalg.solve(x.T @ x + np.diag(self._penalty), x.T @ (y - mean))

    def corrected(self, ranked: Ranked) -> tuple[PredictedLoad, ...]:
        """``ranked``'s predicted metrics at each load, corrected."""
        loads = []
        for predicted in ranked.loads:
            features = [i for f in _features(ranked, predicted.load) if (i := self._index.get(f)) is not None]
            metrics = {}
            for name, value in predicted.metrics.items():
                mean, coef = self._fits.get(name, (0.0, None))
                effect = mean + (float(coef[features].sum()) if coef is not None else 0.0)
                metrics[name] = value * math.exp(effect)
            loads.append(PredictedLoad(predicted.load, metrics))
        return tuple(loads)

    def value(self, space: SearchSpace, ranked: Ranked) -> float | None:
        """``ranked``'s calibrated value: its best SLO-feasible corrected objective (None: predicted infeasible, or
        not to start)."""
        return best_feasible(space, self.corrected(ranked)) if ranked.loads else None


def measured_configurations(space: SearchSpace, keyed: dict[str, Ranked], trials: list[FrozenTrial],
                            before: int | None = None,
                            workload: str | None = None) -> list[tuple[Ranked, list[records.LoadRecord]]]:  # fmt: skip
    """Each launched trial (numbered under ``before``, if given) that the ranking (``keyed``, by configuration key)
    predicts, with the loads it measured of ``workload`` (default: the space's first), and the ranking's
    predictions of that workload in ``Ranked.loads``."""
    workloads = [w.name for w in space.mix_workloads()]
    name = workload or workloads[0]
    stored = name if len(workloads) > 1 else None  # a one-workload study's loads name no workload
    measured = []
    for trial in trials:
        if before is not None and trial.number >= before:
            continue
        if trial.state != TrialState.COMPLETE or not records.launched(trial) or records.is_duplicate(trial):
            continue
        ranked = keyed.get(records.config_key(trial))
        if ranked is not None and stored is not None:
            ranked = ranked.of_workload(name)
        loads = [level for level in TrialRecord.of(trial).benchmarks if level.metrics and level.workload == stored]
        if ranked is not None and ranked.loads and loads:
            measured.append((ranked, loads))
    return measured
