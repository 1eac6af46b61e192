"""The prior: before the first real launch, rank the space's launch configurations with a performance model.

Each configuration that passes the static rules is evaluated by the simulator in process (no GPU; the backend
``autotune.search.backends.prediction_backend`` hands out) at every load of the space; its predicted value is its best SLO-feasible load's objective. The study enqueues the few
best (``search.prior_trials``, marked ``prior`` in the dashboard) and the sampler takes over from there: the prior
orders the first launches, it never removes a configuration from the space.

The model is the analytic one (``autotune.sim.analytic``) or aiconfigurator (optional extra). ``prior: auto`` picks
the analytic model for a GPU space whose model it knows, except where the space is itself simulated by it: a prior
from the model that makes the landscape would prove nothing.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.engines import get_engine
from autotune.errors import AutotuneError, UnsupportedConfig
from autotune.search.backends import prediction_backend, simulator_knows_model
from autotune.search.mix import Share, mix_value
from autotune.search.ranking import maximized, sign
from autotune.search.status import StatusEvent
from autotune.serving.seam import Backend, Serving
from autotune.space.schema import SearchSpace, Workload

log = logging.getLogger(__name__)
PRIOR_PROMPTS = 32  # requests per predicted benchmark: the ranking needs the order, not the last percent
RANKED_LIMIT = 400  # at most this many configurations are ranked (a random sample beyond): minutes, not hours
_NO_WORKDIR = Path(".")  # the simulator in process writes nothing


@dataclass(frozen=True)
class PredictedLoad:
    """What the model predicts at one load of a configuration: the objective's and the SLOs' metrics."""

    load: dict[str, Any]
    metrics: dict[str, float]


@dataclass(frozen=True)
class Ranked:
    """A launch configuration and what the prior predicts for it: its value (None: predicted infeasible) and the
    metrics at every load the model could evaluate (none: it would not start); the metrics are what the
    self-calibrating prior (``autotune.search.calibration``) corrects. ``loads`` are the first workload's; in a
    several-workload space ``by_workload`` holds every workload's, by name, and ``predicted`` is the predicted mix
    (``autotune.search.mix_model``)."""

    engine: str
    params: dict[str, Any]
    predicted: float | None
    loads: tuple[PredictedLoad, ...] = ()
    by_workload: dict[str, tuple[PredictedLoad, ...]] = field(default_factory=dict)

    def of_workload(self, name: str) -> Ranked:
        """This configuration with ``loads`` the predictions of workload ``name`` (none outside a mix)."""
        return replace(self, loads=self.by_workload.get(name, ()))


def prior_model(space: SearchSpace) -> str | None:
    """The performance model the space's prior uses, or None for no prior."""
    choice = space.search.prior
    if choice != "auto":
        return None if choice == "none" else choice
    simulated_by = space.simulate.performance_model if space.simulate else None
    models = {section.fixed.get("model", space.fixed.get("model")) for section in space.engines.values()}
    known = all(isinstance(m, str) and simulator_knows_model(m) for m in models)
    return "analytic" if space.hardware.gpus > 0 and known and simulated_by != "analytic" else None


Mapper = Callable[..., Iterable[Any] | Iterator[Any]]  # builtins.map, or an executor's map
RankingCallback = Callable[[int, int], None]  # (configurations predicted, of how many): what `study run` shows
_RANKINGS: dict[tuple[str, str], list[Ranked]] = {}  # a ranking is deterministic: one per space and model


def no_progress(done: int, total: int) -> None:
    """The default progress callback: nobody is watching."""


@dataclass(frozen=True)
class RankingStatus(StatusEvent):
    """``Phase.RANKING`` with how far the ranking is: ``done`` configurations predicted of ``total``, as the study's
    set-up reports it (``autotune.cli.ranking_progress`` renders it; a display that knows only ``StatusEvent``
    shows the phase)."""

    done: int = 0
    total: int = 0


def rank(space: SearchSpace, model: str, mapper: Mapper = map,
         on_progress: RankingCallback = no_progress) -> list[Ranked]:  # fmt: skip
    """Every launch configuration of the space that passes the static rules, best predicted first.

    Each configuration is predicted by ``predict_configuration``, through ``mapper`` (a process pool's ``map``
    spreads a large space's ranking over cores: each prediction is independent and deterministic); ``on_progress``
    hears (0, total) first, then after each prediction how many are done (nothing where the ranking was made
    before). The simulator reuses what configurations share (``autotune.sim.direct``): most cost nothing."""
    key = (space.model_dump_json(), model)
    if key not in _RANKINGS:
        _RANKINGS[key] = _rank(space, model, mapper, on_progress)
    return list(_RANKINGS[key])


def _rank(space: SearchSpace, model: str, mapper: Mapper, on_progress: RankingCallback) -> list[Ranked]:
    jobs = [(engine, params) for engine in space.engines for params in _launch_params(space, engine)]
    on_progress(0, len(jobs))
    ranked: list[Ranked] = []
    if jobs:  # (a mapper given no iterables refuses to start)
        for predicted in mapper(functools.partial(predict_configuration, space, model), *zip(*jobs, strict=True)):
            ranked.append(predicted)
            on_progress(len(ranked), len(jobs))
    if space.is_mix:
        ranked = _with_predicted_mix(space, ranked)
    better = sign(space.objective.metrics[0].direction)
    ranked.sort(key=lambda r: (r.predicted is None, -better * (r.predicted or 0.0)))
    return ranked


def _with_predicted_mix(space: SearchSpace, ranked: list[Ranked]) -> list[Ranked]:
    """``ranked`` valued by the predicted mix: each workload's best feasible prediction relative to the space's
    first default configuration's (the study's reference is its first baseline's), or, where the model calls that
    infeasible, to the best predicted on the workload. A workload the model calls infeasible on every configuration
    is judged without its SLO: the model is wrong about that SLO (the analytic model's TTFT on long prompts can be
    10x high), and one such workload would otherwise leave nothing ranked."""
    engine = next(iter(space.engines))
    default = space.default_point(engine).server
    workloads = space.mix_workloads()

    def values(slo: dict[str, dict[str, float]]) -> list[dict[str, float | None]]:
        return [{w.name: best_feasible(space, r.by_workload.get(w.name, ()), slo[w.name]) for w in workloads}
                for r in ranked]  # fmt: skip

    judged = values({w.name: space.workload_slo(w) for w in workloads})
    unjudged = {w.name for w in workloads if all(v[w.name] is None for v in judged)}
    if unjudged:
        judged = values({w.name: {} if w.name in unjudged else space.workload_slo(w) for w in workloads})
    at_default = next((v for r, v in zip(ranked, judged, strict=True)
                       if r.engine == engine and space.point(engine, r.params).server == default), {})  # fmt: skip
    reference = {w.name: at_default.get(w.name) or max((v[w.name] or 0.0 for v in judged), default=0.0)
                 for w in workloads}  # fmt: skip
    return [replace(r, predicted=predicted_mix(space, v, reference)) for r, v in zip(ranked, judged, strict=True)]


def predicted_mix(space: SearchSpace, values: dict[str, float | None], reference: dict[str, float]) -> float | None:
    """The mix (``objective.mix``) of per-workload ``values`` relative to ``reference``; None where a workload's
    value is None (infeasible on it: infeasible for the mix) or it has no positive reference."""
    shares = []
    for workload in space.mix_workloads():
        value, base = values.get(workload.name), reference.get(workload.name)
        if value is None or not base or base <= 0:
            return None
        shares.append(Share(workload.weight, value / base))
    return mix_value(space.objective.mix, shares)


def launch_configurations(space: SearchSpace, engine: str) -> list[dict[str, Any]]:
    """The launch configurations the prior ranks for ``engine`` (those passing the static rules; a random sample
    of ``RANKED_LIMIT`` on a larger space), as Optuna params: what the warm prior ranks too."""
    return _launch_params(space, engine)


def _launch_params(space: SearchSpace, engine: str) -> list[dict[str, Any]]:
    params = space.launch_params(engine)
    names, values = list(params), [p.values() for p in params.values()]
    if space.launch_size(engine) <= RANKED_LIMIT:
        combos = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
    else:
        rng = random.Random(0)
        combos = [{n: p.sample(rng) for n, p in params.items()} for _ in range(RANKED_LIMIT)]
        log.info("prior: ranking a random sample of %d of the space's launch configurations", RANKED_LIMIT)
    adapter = get_engine(engine)
    passing = []
    for combo in combos:
        try:
            adapter.check(space.point(engine, combo).server, space.hardware)
        except UnsupportedConfig:
            continue
        passing.append(combo)
    return passing


def predict_configuration(space: SearchSpace, model: str, engine: str, params: dict[str, Any]) -> Ranked:
    """What ``model`` predicts for one launch configuration of ``space``: the metrics at every load, and its best
    SLO-feasible value over them, or None (fails to start, or no load meets SLOs)."""
    return _predict(space, prediction_backend(space, engine, model), engine, params)


def _predict(space: SearchSpace, backend: Backend, engine: str, params: dict[str, Any]) -> Ranked:
    """The model's metrics at every load, and its best SLO-feasible value over them, or None (fails to start, or no
    load meets SLOs).

    The value is the best of the loads lightest first, up to the first that misses an SLO (latency grows with load);
    the metrics of every load are kept, for the calibration to correct."""
    config = space.point(engine, params).server
    with backend.serve(config, _NO_WORKDIR) as predicted:
        try:
            predicted.wait_ready(0.0)
        except AutotuneError:  # would not start (LaunchFailed), or the model cannot say (a table that is unreadable)
            return Ranked(engine, params, None)
        by_workload = {w.name: _predicted_loads(space, engine, w, predicted) for w in space.mix_workloads()}
    loads = next(iter(by_workload.values()))
    return Ranked(engine, params, best_feasible(space, loads), loads, by_workload if space.is_mix else {})


def _predicted_loads(space: SearchSpace, engine: str, workload: Workload,
                     predicted: Serving) -> tuple[PredictedLoad, ...]:  # fmt: skip
    """The model's metrics for ``workload`` at each load it is swept at (the objective's and its SLOs' metrics)."""
    loads, slo = [], space.workload_slo(workload) if space.is_mix else space.objective.slo
    names = list(dict.fromkeys([space.objective.metrics[0].name, *space.objective.slo, *slo]))
    levels = space.workload_load_levels(engine, workload) if space.is_mix else space.load_levels(engine)
    for load in levels:
        shortened = workload.model_copy(update={**load, "num_prompts": min(workload.num_prompts, PRIOR_PROMPTS)})
        try:
            result = predicted.measure(shortened)
        except AutotuneError:
            continue
        metrics = {m: v for m in names if (v := result.metric(m)) is not None}
        loads.append(PredictedLoad(load, metrics))
    return tuple(loads)


def best_feasible(space: SearchSpace, loads: tuple[PredictedLoad, ...],
                  slo: dict[str, float] | None = None) -> float | None:  # fmt: skip
    """The best objective value among ``loads`` (lightest first) up to the first that misses an SLO (``slo``, by
    default the objective's), or None."""
    objective, best = space.objective, None
    limits = objective.slo if slo is None else slo
    for predicted in loads:
        if any(_or_inf(predicted.metrics.get(m)) > limit for m, limit in limits.items()):
            break
        value = predicted.metrics.get(objective.metrics[0].name)
        if value is None or math.isnan(value):
            continue
        if best is None or (value > best) == maximized(objective.metrics[0].direction):
            best = value
    return best


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value
