"""Warm start: a study that begins from what earlier studies learned (``study run --warm-start``, ``study upgrade``).

When the study is made, what its sources learned is copied into it (``snapshot`` reads, ``record`` writes), so every
worker and every later run sees the same thing and no source storage is opened again:

- **failure knowledge**: their learned rules and out-of-memory failures, tagged with the engine version they were
  learned on (``autotune.search.warm_rules`` applies or re-checks them);
- **measurements**: every configuration they measured, as a value relative to that study's best. Their best few
  (``WARM_FIRST``) are queued first, to be measured again, never copied: the engine or the workload changed (the
  best before this study's baselines, the runners-up after them; in a mix, whose values are relative to the
  baselines' measurements, all after them). The rest teach the warm prior (``autotune.search.warm_model``), which
  ranks the space together with the performance model, and queues the next configuration after each trial while
  this study's own measurements agree with it (its weight, recorded after every trial; under ``TRUST`` the sampler
  leads alone);
- **the performance model's residuals** (one-workload studies ranked by the same performance model, whose space
  file is unchanged): each measured load's ``log(measured / predicted)``, the sources' predictions made again from
  their space. This study's calibration (``autotune.search.residuals.Calibration``) starts from the knob effects they
  show, weighted by the warm prior's weight, and picks before the warm prior; only the sources' best is queued first
  (the calibration ranks the runners-up with the rest).

A study's identity (model family, hardware, engine versions) is recorded when it is made, so ``--warm-start auto``
is a query: every finished study of the storage with the same model family, hardware and engines, whose values
mean what this study's will (a mix's are not a one-workload study's), most alike first
(``autotune.search.warm_similarity``: the same space, then the same workload shape). Each source's best is 1.0 of
itself: of equal relative values, the more alike source's goes first.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict

from autotune import records
from autotune.engines import get_engine
from autotune.errors import AutotuneError, UsageError
from autotune.records import (
    InheritedOom,
    LearnedRule,
    ResidualRow,
    StudyIdentity,
    StudyRecord,
    WarmMeasurement,
    WarmWeight,
)
from autotune.search import warm_rules, warm_similarity
from autotune.search.calibration import keyed_ranking
from autotune.search.prior import prior_model
from autotune.search.ranking import maximized, ranked
from autotune.search.residuals import measured_configurations, residual_rows
from autotune.search.setup import digest, with_engine
from autotune.search.storage import open_storage
from autotune.search.trial_queue import FixedConfiguration
from autotune.space.files import load_space
from autotune.space.schema import ENGINE_PARAM, FloatParam, SearchSpace

log = logging.getLogger(__name__)
WARM_FIRST = 3  # the sources' best configurations, measured again first (1 where the calibration has their residuals)
_SUFFIXES = re.compile(r"(-(instruct|chat|it|hf|base))+$")  # a model's variants of one family


class WarmSource(BaseModel):
    """A study to warm-start from: its storage URL and name."""

    model_config = ConfigDict(frozen=True)
    storage: str
    study: str


class WarmSnapshot(BaseModel):
    """What the sources taught, as the new study keeps it."""

    model_config = ConfigDict(frozen=True)
    sources: list[str]
    rules: dict[str, LearnedRule]
    oom: list[InheritedOom]
    measurements: list[WarmMeasurement]  # every measured configuration that this space can run, best first
    residuals: list[ResidualRow] = []  # their performance model's residuals, where they can teach this one's


def model_family(model: str) -> str:
    """A model's family: its name without the organisation or a directory, lower case, without -Instruct/-Chat."""
    return _SUFFIXES.sub("", PurePosixPath(model.rstrip("/")).name.lower())


def identity_of(space: SearchSpace) -> StudyIdentity:
    """What a study of ``space`` measures on: model family, hardware and the version each engine renders for."""
    models = sorted({str(m) for section in space.engines.values()
                     if (m := section.fixed.get("model", space.fixed.get("model")))})  # fmt: skip
    engines = {
        name: str(section.version or get_engine(name).default_version) for name, section in space.engines.items()
    }
    return StudyIdentity(model_family=",".join(model_family(m) for m in models) or None,
                         hardware=space.hardware.model_dump(mode="json"), engines=engines)  # fmt: skip


def same_kind(a: StudyIdentity, b: StudyIdentity) -> bool:
    """Same model family, hardware and engines (any versions): what ``--warm-start auto`` transfers between."""
    return a.model_family == b.model_family and a.hardware == b.hardware and set(a.engines) == set(b.engines)


def finished(study: optuna.Study) -> bool:
    """No trial running, and at least one measured: a study whose knowledge can be taken."""
    trials = study.get_trials(deepcopy=False)
    return not any(t.state == TrialState.RUNNING for t in trials) and bool(ranked(_measured(trials), True))


def open_source(source: WarmSource) -> optuna.Study:
    """The source study.

    Raises:
        UsageError: there is no such study in that storage.
    """
    try:
        return optuna.load_study(study_name=source.study, storage=open_storage(source.storage))
    except KeyError:
        raise UsageError(f"--warm-start: no study {source.study!r} in its storage; fix: `autotune study list` "
                         "(another storage: --warm-start-storage URL)") from None  # fmt: skip


class NearStudy(BaseModel):
    """A finished study of the same hardware and engines that ``--warm-start auto`` does not take, and why."""

    model_config = ConfigDict(frozen=True)
    study: str
    why_not: str  # e.g. "model llama-3.1-8b", "2 workloads"


def auto_sources(storages: list[str], identity: StudyIdentity, exclude: str, space: SearchSpace | None = None,
                 space_path: Path | None = None) -> list[WarmSource]:  # fmt: skip
    """Every finished study in ``storages`` of the same model family, hardware and engines (not ``exclude``) whose
    values mean what this one's will (not a mix for a one-workload study, nor the reverse), most alike first
    (``autotune.search.warm_similarity``: the same space, then the same workload shape)."""
    found = []
    for url, name, study, record in _studies(storages, exclude):
        if record.identity is None or not same_kind(record.identity, identity):
            continue
        if (space is not None and not warm_similarity.measures_alike(record, space)) or not finished(study):
            continue
        alike = warm_similarity.similarity(record, name, _finished_at(study), identity, space, space_path)
        found.append((alike.order(), WarmSource(storage=url, study=name)))
    return [source for _, source in sorted(found, key=lambda pair: pair[0])]


def near_studies(storages: list[str], identity: StudyIdentity, exclude: str, space: SearchSpace) -> list[NearStudy]:
    """The finished studies of the same hardware and engines ``--warm-start auto`` does not take (another model
    family, or workloads measured another way): what a user may name with ``--warm-start NAME`` instead."""
    near = []
    for _, name, study, record in _studies(storages, exclude):
        theirs = record.identity
        if theirs is None or theirs.hardware != identity.hardware or set(theirs.engines) != set(identity.engines):
            continue
        if not finished(study):
            continue
        count = len(record.workloads or [record.workload])
        if theirs.model_family != identity.model_family:
            near.append(NearStudy(study=name, why_not=f"model {theirs.model_family or 'not recorded'}"))
        elif not warm_similarity.measures_alike(record, space):
            near.append(NearStudy(study=name, why_not=f"{count} workload{'s' if count > 1 else ''}"))
    return near


def _studies(storages: list[str], exclude: str) -> Iterator[tuple[str, str, optuna.Study, StudyRecord]]:
    """(storage URL, name, study, record) of every study in ``storages`` but ``exclude`` (its trials not read yet:
    the callers read them only of a study whose record fits)."""
    for url in storages:
        storage = open_storage(url)
        for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
            if summary.study_name == exclude:
                continue
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            yield url, summary.study_name, study, StudyRecord.of(study)


def _finished_at(study: optuna.Study) -> datetime.datetime | None:
    ends = [t.datetime_complete for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None]
    return max(ends, default=None)


def snapshot(space: SearchSpace, sources: list[WarmSource]) -> WarmSnapshot:
    """Read what ``sources`` learned, in terms of ``space`` (their configurations it cannot run are left out)."""
    identity = identity_of(space)
    rules: dict[str, LearnedRule] = {}
    oom: list[InheritedOom] = []
    measurements: list[WarmMeasurement] = []
    residuals: list[ResidualRow] = []
    for source in sources:
        study = open_source(source)
        record, trials = StudyRecord.of(study), study.get_trials(deepcopy=False)
        for name, rule in _travelling_rules(study.study_name, record, trials).items():
            if name not in rules or rule.engine_version == identity.engines.get(rule.engine or ""):
                rules[name] = rule  # of two sources, the rule of this study's version wins
        oom += list(record.inherited_oom or []) + _oom_failures(study.study_name, trials)
        measurements += _relative(space, study, trials)
        residuals += _residuals(space, study.study_name, record, trials)
    measurements.sort(key=lambda m: -m.relative)  # stable: of equal values, the earlier (more alike) source's first
    return WarmSnapshot(sources=[s.study for s in sources], rules=rules, oom=oom, measurements=measurements,
                        residuals=residuals)  # fmt: skip


def _residuals(space: SearchSpace, name: str, record: StudyRecord, trials: list[FrozenTrial]) -> list[ResidualRow]:
    """The source's performance-model residuals (``autotune.search.residuals``), where they can start this study's
    calibration: both are one-workload studies ranked by the same performance model, and the source's space file is
    still the one it ran (its predictions are made again from it; a file moved or edited since teaches nothing)."""
    model = prior_model(space)
    if model is None or space.is_mix or record.workloads or record.space_path is None:
        return []
    try:
        theirs = load_space(record.space_path)
    except AutotuneError:
        log.info("warm start: %s's space file %s cannot be read: its model residuals are not used", name,
                 record.space_path)  # fmt: skip
        return []
    if digest(theirs) != record.space_digest or theirs.is_mix or prior_model(theirs) != model:
        return []
    return residual_rows(measured_configurations(theirs, keyed_ranking(theirs, model), trials), name)


def _travelling_rules(name: str, record: StudyRecord, trials: list[FrozenTrial]) -> dict[str, LearnedRule]:
    """A source's rules that still hold there, each tagged with the engine and version it was learned on."""
    by_number = {t.number: t for t in trials}
    travelling = {}
    for rule_name, rule in record.learned_rules.items():
        if warm_rules.rule_state(record, rule_name, rule, by_number).dropped:
            continue
        if rule.inherited_from is None:  # learned there: on the version its teaching trial ran
            teacher = records.TrialRecord.of(by_number[rule.trial]) if rule.trial in by_number else None
            engine = teacher.engine if teacher else None
            version = (teacher.engine_version if teacher else None) or warm_rules.current_version(record, engine)
            rule = rule.model_copy(update={"inherited_from": f"{name}:{rule.trial}", "engine": engine,
                                           "engine_version": version})  # fmt: skip
        travelling[rule_name] = rule
    return travelling


def _oom_failures(name: str, trials: list[FrozenTrial]) -> list[InheritedOom]:
    failures = []
    for trial in trials:
        level, config = records.oom_from_level(trial), records.public_config(trial)
        if level is not None and config is not None:
            version = records.TrialRecord.of(trial).engine_version
            failures.append(InheritedOom(config=config, level=level, source=f"{name}:{trial.number}",
                                         engine_version=version))  # fmt: skip
    return failures


def _measured(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Trials that measured their own configuration (launched; not a duplicate's copy)."""
    return [t for t in trials if records.measured_itself(t)]


def _relative(space: SearchSpace, study: optuna.Study, trials: list[FrozenTrial]) -> list[WarmMeasurement]:
    """Each measured configuration the space can run, its value relative to the study's best (1.0)."""
    maximize = maximized(study.directions[0])
    best_first = ranked(_measured(trials), maximize)
    if not best_first or not best_first[0].values[0]:
        return []
    top = best_first[0].values[0]
    found = []
    for trial in best_first:
        params = in_space(space, trial.params, records.TrialRecord.of(trial).engine)
        value = trial.values[0]
        if params is None or value <= 0:
            continue
        relative = value / top if maximize else top / value
        found.append(WarmMeasurement(params=params, relative=round(relative, 4),
                                     source=f"{study.study_name}:{trial.number}"))  # fmt: skip
    return found


def in_space(space: SearchSpace, params: dict[str, Any], engine: str | None = None) -> dict[str, Any] | None:
    """An earlier trial's parameters as this space's launch parameters (what it does not vary: its defaults), or
    None where a value is not one this space allows (or its engine is not in it)."""
    engine = params.get(ENGINE_PARAM) or engine or next(iter(space.engines))
    if engine not in space.engines:
        return None
    mapped = {}
    for name, param in space.launch_params(engine).items():
        value = params.get(name, param.default_value())
        if isinstance(param, FloatParam) and param.step is None:
            if value is not None and not param.bounds[0] <= value <= param.bounds[1]:
                return None
        elif value not in param.values():
            return None
        mapped[name] = value
    return with_engine(space, engine, mapped)


def first_configurations(space: SearchSpace, snap: WarmSnapshot,
                         baselines: list[FixedConfiguration]) -> list[FixedConfiguration]:  # fmt: skip
    """The study's first launches: ``baselines`` and the sources' best configurations (not those), to measure again.

    The sources' best is the likeliest optimum here, so it goes before the baselines, the runners-up after them (an
    upgrade's regression table compares the old best with the baselines: both come first). In a mix all go after the
    baselines: a mix's values are relative to the first baseline's measurement of each workload. Where the snapshot
    has the sources' model residuals, only their best is queued: the calibration ranks the runners-up.
    """
    chosen: list[FixedConfiguration] = []
    seen = [b.params for b in baselines]
    # queued ahead of the calibration, the runners-up are launches spent where it sees better (4 seeds of the SGLang
    # workload pair of benchmarks/transfer_efficiency.py, with the residuals: 105 node-minutes to 99% with three, 87
    # with the best alone)
    first = 1 if snap.residuals else WARM_FIRST
    for measurement in snap.measurements:
        if len(chosen) >= first:
            break
        if measurement.params in seen:
            continue
        seen.append(measurement.params)
        chosen.append(FixedConfiguration(measurement.params, records.stored(warm_of=measurement.source)))
    best_leads = not space.is_mix and chosen and chosen[0].params == snap.measurements[0].params
    return chosen[:1] + baselines + chosen[1:] if best_leads else baselines + chosen


def record(study: optuna.Study, snap: WarmSnapshot) -> None:
    """Copy what the sources taught into the study (under the budget lock, before its first trial); the warm
    prior's weight starts at 1 (nothing measured here disagrees with it yet)."""
    if snap.rules:
        records.write_study(study, learned_rules=snap.rules)
    if snap.residuals:
        records.write_study(study, warm_residuals=snap.residuals)
    records.write_study(study, inherited_oom=snap.oom, warm_measurements=snap.measurements,
                        warm_weights=[WarmWeight(trial=-1, weight=1.0, pairs=0, concordant=0)],
                        warm_sources=snap.sources)  # fmt: skip


def summary(study: optuna.Study) -> list[str]:
    """What a warm-started study took from its sources, in lines for people (none for a cold study)."""
    record_ = StudyRecord.of(study)
    if not record_.warm_sources:
        return []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    inherited = {n: r for n, r in record_.learned_rules.items() if r.inherited_from is not None}
    lines = [
        f"warm start from {', '.join(record_.warm_sources)}: {len(record_.warm_measurements or [])} "
        f"measurements, {len(inherited)} rules, {len(record_.inherited_oom or [])} out-of-memory failures"
        + (f", {len(record_.warm_residuals)} performance-model residuals" if record_.warm_residuals else "")
    ]
    lines += [f"  rule '{n}': {warm_rules.rule_state(record_, n, r, trials).text}" for n, r in inherited.items()]
    if record_.warm_weights:
        trail = ", ".join(f"{w.weight:.2f}" + (f" (#{w.trial})" if w.trial >= 0 else "") for w in record_.warm_weights)
        lines.append(f"  warm prior's weight: {trail}")
    return lines
