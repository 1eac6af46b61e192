"""The self-calibrating prior: the performance model's predictions corrected by what this study's launches measured.

A performance model is rarely right in absolute terms (the analytic model's TTFT can be off by 10x, so it calls
every configuration SLO-infeasible), but its errors are regular: a factor on a metric, a factor per knob value.
After every launch that measured something, a **residual model** (``autotune.search.residuals``) is refit, and the
corrected metrics of every configuration at every load give its calibrated value (its best SLO-feasible load, as
the prior ranks; in a several-workload space the calibrated mix, ``autotune.search.mix_model``, one residual model
per workload); the remaining space is re-ranked.

**Its use**: after each trial, the best calibrated configuration that no trial has tried, no learned rule refuses
and the model still predicts to start is queued next (marked ``calibrated_predicted``), as long as it is predicted
to beat the incumbent; when nothing is, the incumbent's untried neighbours (one launch knob away), best calibrated
first alternating with the next value up or down of an ordered knob, taking turns with the sampler (a neighbour is never followed by another). A pick that came in below the
incumbent gives the next turn to a neighbour: the model is trusted only as far as it predicts. A wrong model costs
the launches that showed it wrong (each is a measurement that corrects it), at most every other launch; the
neighbour steps find what lies next to the best so far, which a model alone may keep ranking below another corner.

**Its error**, recorded after every trial (``StudyRecord.calibration``, printed by ``study show``): the objective's
median error factor at the loads that trial measured, of the raw model and of the model calibrated on the trials
before it (an out-of-sample error: what the calibration knew when it would have ranked that trial).

The error is the first workload's in a several-workload space (the model's error per workload differs, its
corrections are fitted per workload).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import CalibrationError, StudyRecord, TrialRecord
from autotune.search.learning import rule_broken
from autotune.search.mix_model import MixCalibration
from autotune.search.objective import config_key
from autotune.search.prior import PredictedLoad, Ranked, prior_model, rank
from autotune.search.ranking import best_of, maximizes, sign
from autotune.search.ranking import ranked as best_first
from autotune.search.residuals import Calibration, measured_configurations
from autotune.search.setup import with_engine
from autotune.search.trial_queue import FixedConfiguration, queue_within_budget, queued_params
from autotune.space.schema import SearchSpace

LAST = 10  # `study show` gives the error over the whole study and over this many last trials
CENTRES = 3  # the neighbourhoods of at most this many of the best configurations are measured, best first


class Calibrated(Protocol):
    """A calibrated model: ``Calibration`` (one workload) or ``MixCalibration`` (a mix of several)."""

    rows: int  # the measured loads it is fitted to

    def value(self, space: SearchSpace, ranked: Ranked) -> float | None: ...


_KEYED: dict[tuple[str, str], dict[str, Ranked]] = {}  # like the ranking it keys: one per space and model


def keyed_ranking(space: SearchSpace, model: str) -> dict[str, Ranked]:
    """The prior's ranking of ``space`` by ``model``, best first, by each configuration's key (the trials' own
    ``config_key``): made once per space, since every trial's step looks its configurations up."""
    key = (space.model_dump_json(), model)
    if key not in _KEYED:
        _KEYED[key] = {config_key(space.point_from_params(with_engine(space, r.engine, r.params))): r
                       for r in rank(space, model)}  # fmt: skip
    return _KEYED[key]


def _error(space: SearchSpace, loads: tuple[PredictedLoad, ...], measured: list[records.LoadRecord]) -> float | None:
    """The median factor between the objective predicted by ``loads`` and measured at the same loads."""
    name = space.objective.metrics[0].name
    predicted = {json.dumps(p.load, sort_keys=True): p.metrics.get(name) for p in loads}
    factors = []
    for level in measured:
        model, got = predicted.get(json.dumps(level.load, sort_keys=True)), (level.metrics or {}).get(name)
        if model and isinstance(got, int | float) and got > 0 and model > 0:
            factors.append(math.exp(abs(math.log(got / model))))
    return round(statistics.median(factors), 3) if factors else None


def _calibration(measured: list[tuple[Ranked, list[records.LoadRecord]]], record: StudyRecord) -> Calibration:
    """The residual model of ``measured``; in a warm-started study also of its sources' residuals, weighted by the
    warm prior's last weight (``autotune.search.warm_model``): they count while this study's measurements agree
    with what the sources found, and fade as they do not."""
    trust = record.warm_weights[-1].weight if record.warm_weights else 0.0
    return Calibration(measured, record.warm_residuals or [], trust)


def calibrated_model(study: optuna.Study, space: SearchSpace,
                     trials: list[FrozenTrial]) -> tuple[dict[str, Ranked], Calibration] | None:  # fmt: skip
    """The prior's ranking by configuration key and the calibration fitted to ``trials`` (one workload), or None
    where the space has no performance model or several workloads."""
    model = prior_model(space)
    if model is None or space.is_mix:
        return None
    keyed = keyed_ranking(space, model)
    return keyed, _calibration(measured_configurations(space, keyed, trials), StudyRecord.of(study))


def error_after(space: SearchSpace, keyed: dict[str, Ranked], trials: list[FrozenTrial],
                finished: FrozenTrial, record: StudyRecord) -> CalibrationError | None:  # fmt: skip
    """The raw and the calibrated model's error on ``finished`` (calibrated on the trials before it), or None where
    it measured nothing the model predicts."""
    mine = measured_configurations(space, keyed, [finished])
    if not mine:
        return None
    ranked, loads = mine[0]
    earlier = _calibration(measured_configurations(space, keyed, trials, before=finished.number), record)
    raw, calibrated = _error(space, ranked.loads, loads), _error(space, earlier.corrected(ranked), loads)
    return CalibrationError(trial=finished.number, raw=raw, calibrated=calibrated, fitted_loads=earlier.rows)


def next_configuration(study: optuna.Study, space: SearchSpace, keyed: dict[str, Ranked],
                       calibration: Calibrated) -> FixedConfiguration | None:  # fmt: skip
    """The best calibrated configuration no trial has tried or queued, no learned rule refuses and the model
    predicts to start, if it is predicted to beat the incumbent (``calibration``'s value: a mix's in a
    several-workload space); else, unless a neighbour took the last turn, the best calibrated untried neighbour of the incumbent, or once all of its are tried of a runner-up's (``_centres``,
    ``_neighbours``); else None (the sampler's turn)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):  # queued ones go first; the next step looks again
        return None
    better = sign(space.objective.metrics[0].direction)
    centres = _centres(trials, maximizes(study))  # the incumbent first
    incumbent = centres[0] if centres else None
    tried, queued = {records.config_key(t) for t in trials}, queued_params(study)
    record, by_number = StudyRecord.of(study), {t.number: t for t in trials}  # read once: the loop asks no storage

    def untried(key: str, ranked: Ranked) -> dict | None:
        params = with_engine(space, ranked.engine, ranked.params)
        if params in queued or key in tried or rule_broken(record, by_number, params)[0] is not None:
            return None
        return params

    values = {key: calibration.value(space, r) for key, r in keyed.items()}
    scored = sorted(((v, k) for k, v in values.items() if v is not None), key=lambda entry: -better * entry[0])
    predicted = None
    for value, key in scored:
        if incumbent is not None and incumbent.values and better * value <= better * incumbent.values[0]:
            break
        if (params := untried(key, keyed[key])) is not None:
            predicted = FixedConfiguration(params, records.stored(calibrated_predicted=round(value, 3)))
            break
    if predicted is not None and not _model_missed_last(trials, maximizes(study)):
        return predicted
    if incumbent is None or _took_last_turn(trials):
        return predicted
    for centre in centres:
        for key in _neighbours(keyed, records.config_key(centre), values, better):
            if (params := untried(key, keyed[key])) is not None:
                value = values[key]
                marks = {"calibrated_predicted": round(value, 3)} if value is not None else {}
                return FixedConfiguration(params, records.stored(neighbour_of=centre.number, **marks))
    return predicted


def _centres(trials: list[FrozenTrial], maximize: bool) -> list[FrozenTrial]:
    """Whose neighbourhoods are measured: the incumbent's, then (once it is all tried) the runners-up's, up to
    ``CENTRES`` distinct configurations: on a table of aiconfigurator's the optimum can be a narrow peak next to a
    runner-up, two knobs from the incumbent."""
    centres: dict[str | None, FrozenTrial] = {}
    for trial in best_first(trials, maximize):
        if len(centres) >= CENTRES:
            break
        centres.setdefault(records.config_key(trial), trial)
    return list(centres.values())


def _last_finished(trials: list[FrozenTrial]) -> FrozenTrial | None:
    finished = [t for t in trials if t.state.is_finished()]
    return max(finished, key=lambda t: t.number) if finished else None


def _model_missed_last(trials: list[FrozenTrial], maximize: bool) -> bool:
    """Whether the last trial to finish was queued for being predicted to beat the incumbent and did not: the
    model is trusted only as far as it predicts, so a miss gives the next turn to the incumbent's neighbours (a
    model wrong about one corner can otherwise spend a dozen launches there while the optimum lies next door)."""
    last = _last_finished(trials)
    if last is None or last.state == TrialState.PRUNED:  # stopped part-way, it measured nothing the model can miss
        return False
    record = TrialRecord.of(last)
    if record.calibrated_predicted is None or record.neighbour_of is not None:
        return False
    incumbent = best_of((t for t in trials if t.number < last.number), maximize)
    # best_of breaks ties for the earlier trial and skips an infeasible one: a tie or a miss is not a win
    return incumbent is not None and best_of([incumbent, last], maximize) is incumbent


def _took_last_turn(trials: list[FrozenTrial]) -> bool:
    """Whether the last trial to finish was a neighbour: neighbours and the sampler take turns, so that a local
    optimum the neighbourhood cannot leave holds the sampler's exploration back by half, never wholly."""
    last = _last_finished(trials)
    return last is not None and TrialRecord.of(last).neighbour_of is not None


def _neighbours(keyed: dict[str, Ranked], around: str | None, values: dict[str, float | None],
                better: int) -> list[str]:  # fmt: skip
    """The configurations one launch knob away from configuration ``around`` (a key of ``keyed``): first those
    predicted feasible, best calibrated first, but every other place goes to the best remaining one-step move (the
    next value up or down of an ordered numeric knob, ``_one_step``); then those predicted to start but miss an SLO,
    then those predicted not to start. The one-step moves read the slope at the centre, which a model that overrates
    a far corner ranks last: on a table of aiconfigurator's the optimum is often the next batch limit."""
    centre = keyed.get(around) if around is not None else None
    if centre is None:
        return []
    near = {key: r for key, r in keyed.items() if r.engine == centre.engine and len(_differing(centre, r)) == 1}

    def order(key: str) -> tuple[int, float]:
        value = values[key]
        return (0, -better * value) if value is not None else (1 if keyed[key].loads else 2, 0.0)

    ordered = sorted(near, key=order)
    feasible = [key for key in ordered if values[key] is not None]
    steps = [key for key in feasible if _one_step(keyed, centre, near[key])]
    interleaved = [key for pair in itertools.zip_longest(feasible, steps) for key in pair if key is not None]
    return list(dict.fromkeys(interleaved + ordered))  # each once, where it first comes


def _differing(centre: Ranked, other: Ranked) -> list[str]:
    return [name for name, value in other.params.items() if centre.params.get(name) != value]


def _one_step(keyed: dict[str, Ranked], centre: Ranked, neighbour: Ranked) -> bool:
    """Whether ``neighbour`` differs from ``centre`` by the next value up or down of a numeric knob, among that
    knob's values on the engine."""
    (knob,) = _differing(centre, neighbour)
    here, there = centre.params.get(knob), neighbour.params[knob]
    if not (_numeric(here) and _numeric(there)):
        return False
    ladder = sorted({v for r in keyed.values() if r.engine == centre.engine and _numeric(v := r.params.get(knob))})
    return abs(ladder.index(here) - ladder.index(there)) == 1


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def step(study: optuna.Study, space: SearchSpace, finished: FrozenTrial,
         lock: Callable[[], AbstractContextManager]) -> CalibrationError | None:  # fmt: skip
    """After a trial: record the raw and calibrated model's error on it, refit, and queue the configuration the
    calibrated model ranks first if it is predicted to beat the incumbent (under ``lock``, the study's budget lock:
    one worker queues at a time)."""
    model = prior_model(space)
    if model is None:
        return None
    keyed = keyed_ranking(space, model)
    trials = study.get_trials(deepcopy=False)
    record = StudyRecord.of(study)
    error = error_after(space, keyed, trials, finished, record)
    calibration: Calibrated = (
        MixCalibration(space, keyed, trials, record.mix_reference) if space.is_mix
        else _calibration(measured_configurations(space, keyed, trials), record))  # fmt: skip
    with lock():
        if error is not None:
            records.write_study(study, calibration=[error])
        if calibration.rows:
            fixed = next_configuration(study, space, keyed, calibration)
            if fixed is not None:
                queue_within_budget(study, fixed)
    return error


def summary(study: optuna.Study) -> list[str]:
    """The performance model's error in lines (``study show``): the median factor, raw and calibrated, over every
    trial it predicted and over the last ``LAST`` (nothing for a study without a performance model)."""
    errors = StudyRecord.of(study).calibration
    if not errors:
        return []

    def medians(part: list[CalibrationError]) -> str:
        raw = [e.raw for e in part if e.raw is not None]
        calibrated = [e.calibrated for e in part if e.calibrated is not None]
        return (f"x{statistics.median(raw):.2f} raw, x{statistics.median(calibrated):.2f} calibrated"
                if raw and calibrated else "-")  # fmt: skip

    return [
        f"performance model: median error on the measured launches {medians(errors)} "
        f"({len(errors)} trials); on the last {min(LAST, len(errors))}: {medians(errors[-LAST:])}"
    ]
