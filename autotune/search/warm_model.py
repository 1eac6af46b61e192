"""The warm prior: a model of the earlier studies' measurements that ranks this study's space, and its weight.

**The model** is an additive per-knob effect on the log of the relative value (each earlier measurement's value over
its study's best): ``log r = mean + Σ effect[knob = value]``, fitted by ridge regression (``RIDGE`` pulls effects a
few measurements support towards 0, so an unseen or rarely seen value has no opinion). It is the simplest model
that says, in the terms a person would, what the earlier studies found: ``max_num_seqs=32 ×2.1``, ``dtype=float32
×0.5`` (``effects``). Interactions are not modelled: the sampler, which takes over, finds those.

**Its weight** is how far this study's own measurements agree with it: over each pair of this study's measured
configurations whose values differ by more than ``NOISE``, whether the model ordered them the same way (Kendall's
concordance). A launch that missed an SLO at every load (or failed) ranks below every feasible one: an earlier best
that misses here (a new workload's SLO, say) is the plainest disagreement there is.
``weight = (PRIOR_PAIRS + pairs · max(0, τ)) / (PRIOR_PAIRS + pairs)``: 1 before anything is measured here, falling
towards 0 as ordered pairs disagree. Recorded after every trial (``StudyRecord.warm_weights``).

**Its use**: after each trial, while the weight is at least ``TRUST``, the best-ranked configuration that no trial
has tried is queued next (marked ``warm_predicted``); the ranking is the model's, mixed with the performance model's
where the space has one (rank percentiles, the warm one weighted by the weight). Under ``TRUST`` it queues nothing
and the sampler leads: a moved optimum costs the few trials that showed it had moved (the negative-transfer guard).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import StudyRecord, WarmMeasurement, WarmWeight
from autotune.search.learning import rule_broken
from autotune.search.objective import config_key
from autotune.search.prior import launch_configurations, prior_model, rank
from autotune.search.ranking import feasible, maximizes
from autotune.search.setup import with_engine
from autotune.search.trial_queue import FixedConfiguration, queue_fixed, queued_params, room_for_another
from autotune.space.schema import SearchSpace

RIDGE = 1.0  # the ridge penalty: an effect needs a few measurements behind it to move far from 0
NOISE = 0.03  # two values within 3% of each other are not an order the model can be judged on
PRIOR_PAIRS = 2  # the weight starts as if this many pairs had agreed
TRUST = 0.5  # under this weight the warm prior queues nothing more
WORTH = 0.5  # a configuration predicted at under half the earlier best is not worth queueing on the prior's word


def _feature(name: str, value: Any) -> str:
    return f"{name}={json.dumps(value)}"


class WarmModel:
    """Per-knob effects on log relative value, fitted to earlier measurements (see the module docstring)."""

    def __init__(self, measurements: list[WarmMeasurement]) -> None:
        rows = [{_feature(n, v) for n, v in m.params.items()} for m in measurements]
        self.features = sorted(set().union(*rows)) if rows else []
        index = {f: i for i, f in enumerate(self.features)}
        y = np.array([math.log(max(m.relative, 1e-6)) for m in measurements])
        self.mean = float(y.mean()) if len(y) else 0.0
        x = np.zeros((len(rows), len(self.features)))
        for row, features in enumerate(rows):
            x[row, [index[f] for f in features]] = 1.0
        if len(rows):
            gram = x.T @ x + RIDGE * np.eye(len(self.features))
            self.coef = np.linalg.solve(gram, x.T @ (y - self.mean))
        else:
            self.coef = np.zeros(0)
        self._index = index

    def predict(self, params: dict[str, Any]) -> float:
        """The predicted value relative to the earlier best (1.0 = as good as it)."""
        log_r = self.mean + sum(self.coef[i] for n, v in params.items() if (i := self._index.get(_feature(n, v)))
                                is not None)  # fmt: skip
        return math.exp(log_r)

    def effects(self) -> list[tuple[str, float]]:
        """Each knob value's effect as a factor on the value, largest first."""
        return sorted(((f, math.exp(c)) for f, c in zip(self.features, self.coef, strict=True)),
                      key=lambda e: -abs(math.log(e[1])))  # fmt: skip


def weight(model: WarmModel, trials: list[FrozenTrial], maximize: bool, number: int) -> WarmWeight:
    """The model's weight after trial ``number``, from this study's own launches (not a duplicate's copy): feasible
    ones by their value, those that met no SLO or failed below them all. A pruned trial is no measurement: its value
    is Optuna's (a checkpoint's, part-way through a benchmark), and a real winner pruned early had cut the weight from
    1.00 to 0.50, ranked below every feasible launch."""
    worst = -math.inf if maximize else math.inf  # an SLO missed or a failed launch: below every feasible value
    own = [(model.predict(t.params), t.values[0] if feasible(t) else worst) for t in trials
           if records.measured_itself(t)]  # fmt: skip
    pairs = concordant = 0
    for i, (predicted_i, value_i) in enumerate(own):
        for predicted_j, value_j in own[i + 1 :]:
            if predicted_i == predicted_j or _no_order(value_i, value_j):
                continue
            pairs += 1
            better_measured = value_i > value_j if maximize else value_i < value_j
            concordant += better_measured == (predicted_i > predicted_j)
    tau = (2 * concordant - pairs) / pairs if pairs else 0.0
    trust = (PRIOR_PAIRS + pairs * max(0.0, tau)) / (PRIOR_PAIRS + pairs)
    return WarmWeight(trial=number, weight=round(trust, 3), pairs=pairs, concordant=concordant)


def _no_order(a: float, b: float) -> bool:
    """Two measured values no order can be read from: equal (two misses, say), or feasible and within ``NOISE``
    (a miss is never within noise of a feasible value)."""
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= NOISE * max(abs(a), abs(b)))


_CANDIDATES: dict[str, list[dict[str, Any]]] = {}


def _candidates(space: SearchSpace) -> list[dict[str, Any]]:
    """Every launch configuration of the space that passes the static rules (a sample of a large one), as params."""
    key = space.model_dump_json()
    if key not in _CANDIDATES:
        _CANDIDATES[key] = [with_engine(space, engine, params) for engine in space.engines
                            for params in launch_configurations(space, engine)]  # fmt: skip
    return _CANDIDATES[key]


def _percentiles(scores: list[float]) -> list[float]:
    """Each score's rank as a share (0: the highest score, 1: the lowest)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    share = [0.0] * len(scores)
    for position, i in enumerate(order):
        share[i] = position / max(1, len(scores) - 1)
    return share


def ranking(space: SearchSpace, model: WarmModel, trust: float) -> list[tuple[dict[str, Any], float]]:
    """The space's launch configurations, best first by the warm model (weighted ``trust``) and the performance
    model (the rest), each with the warm model's predicted relative value."""
    candidates = _candidates(space)
    predicted = [model.predict(params) for params in candidates]
    score = _percentiles(predicted)
    performance = prior_model(space)
    if performance is not None and trust < 1.0:
        position = {json.dumps(with_engine(space, r.engine, r.params), sort_keys=True): i
                    for i, r in enumerate(rank(space, performance))}  # fmt: skip
        last = max(1, len(position) - 1)
        theirs = [position.get(json.dumps(p, sort_keys=True), last) / last for p in candidates]
        score = [trust * w + (1 - trust) * p for w, p in zip(score, theirs, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: (score[i], -predicted[i]))
    return [(candidates[i], predicted[i]) for i in order]


def next_configuration(study: optuna.Study, space: SearchSpace,
                       ranked: list[tuple[dict[str, Any], float]]) -> FixedConfiguration | None:  # fmt: skip
    """The best-ranked configuration no trial has tried or queued and no learned rule refuses, worth queueing, while
    the budget has room for its launch (else it would be left WAITING when the study stops)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):  # queued ones go first; the next step looks again
        return None
    if not room_for_another(study, trials):
        return None
    tried = {records.config_key(t) for t in trials}
    queued = queued_params(study)
    record, by_number = StudyRecord.of(study), {t.number: t for t in trials}  # read once: the loop asks no storage
    for params, predicted in ranked:
        if predicted < WORTH or params in queued or rule_broken(record, by_number, params)[0] is not None:
            continue
        if config_key(space.point_from_params(params)) in tried:
            continue
        return FixedConfiguration(params, records.stored(warm_predicted=round(predicted, 3)))
    return None


@dataclass(frozen=True)
class WarmStep:
    """The warm prior after a trial: its model (fitted once per trial) and its weight, recorded."""

    model: WarmModel
    weight: WarmWeight


def step(study: optuna.Study, finished: FrozenTrial, lock: Callable[[], AbstractContextManager]) -> WarmStep:
    """After a trial of a warm-started study: record the prior's weight (under ``lock``, the study's budget lock)."""
    model = WarmModel(StudyRecord.of(study).warm_measurements or [])
    current = weight(model, study.get_trials(deepcopy=False), maximizes(study), finished.number)
    with lock():
        records.write_study(study, warm_weights=[current])
    return WarmStep(model, current)


def queue_next(study: optuna.Study, space: SearchSpace, warm: WarmStep,
               lock: Callable[[], AbstractContextManager]) -> None:  # fmt: skip
    """While the prior's weight is trusted, queue the configuration it ranks first (under ``lock``: one worker queues
    at a time)."""
    if warm.weight.weight < TRUST:
        return
    ranked = ranking(space, warm.model, warm.weight.weight)  # outside the lock: slow
    with lock():
        fixed = next_configuration(study, space, ranked)
        if fixed is not None:
            queue_fixed(study, fixed)
