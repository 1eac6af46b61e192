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
from autotune.records import ResidualRow, TrialRecord
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


def residual_rows(measured: list[tuple[Ranked, list[records.LoadRecord]]], source: str) -> list[ResidualRow]:
    """Each measured load of ``measured`` (the prior's ranking of a launched configuration, the metrics measured at
    each of its loads) as a row of the residual model: its features and ``log(measured / predicted)`` by metric."""
    rows = []
    for ranked, loads in measured:
        predicted = {json.dumps(p.load, sort_keys=True): p.metrics for p in ranked.loads}
        for level in loads:
            model = predicted.get(json.dumps(level.load, sort_keys=True))
            if model is None or not level.metrics:
                continue
            residuals = {name: math.log(got / value) for name, value in model.items()
                         if isinstance(got := level.metrics.get(name), int | float) and got > 0 and value > 0}  # fmt: skip
            rows.append(ResidualRow(features=_features(ranked, level.load), residuals=residuals, source=source))
    return rows


class Calibration:
    """The residual model of each metric, fitted to ``measured``: (the prior's ranking of a launched configuration,
    the metrics measured at each of its loads).

    In a warm-started study the sources' rows (``inherited``) give the knob effects a prior: the effects fitted to
    them alone, times ``inherited_weight``, are where this study's ridge pulls its own effects (instead of 0), so
    until this study measures otherwise it ranks as the sources' errors say. Their mean is not taken: another
    workload or model moves the level of the model's error (a long prompt's TTFT, say) more than which knob it
    misjudges, and this study's own mean sets the level. At weight 0 it is the model of this study's rows alone."""

    def __init__(self, measured: list[tuple[Ranked, list[records.LoadRecord]]],
                 inherited: list[ResidualRow] = (), inherited_weight: float = 0.0) -> None:  # fmt: skip
        own = residual_rows(measured, "")
        self.rows = len(own)  # this study's measured loads it is fitted to
        borrowed = list(inherited) if inherited_weight > 0 else []
        self._index = {f: i for i, f in enumerate(sorted({f for row in own + borrowed for f in row.features}))}
        self._penalty = np.array([PAIR_RIDGE if f.startswith(PAIR) else RIDGE for f in self._index])
        self._fits: dict[str, tuple[float, np.ndarray]] = {}
        for name in {name for row in own for name in row.residuals}:
            theirs = _column(borrowed, name)
            prior = inherited_weight * self._fit(theirs)[1] if theirs else np.zeros(len(self._index))
            mean, coef = self._fit(_column(own, name), prior)
            self._fits[name] = (mean, coef + prior)

    def _fit(self, rows: list[tuple[list[str], float]], prior: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """The mean residual over ``rows`` after the ``prior`` effects, and each feature's effect beyond them (ridge:
        towards the prior)."""
        x = np.zeros((len(rows), len(self._index)))
        for i, (features, _) in enumerate(rows):
            x[i, [self._index[f] for f in features]] = 1.0
        y = np.array([residual for _, residual in rows]) - (x @ prior if prior is not None else 0.0)
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


def _column(rows: list[ResidualRow], name: str) -> list[tuple[list[str], float]]:
    return [(row.features, row.residuals[name]) for row in rows if name in row.residuals]


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
