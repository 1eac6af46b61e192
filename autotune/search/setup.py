"""A study's set-up, in steps that any worker may do, so that one interrupted at any point resumes.

Whichever `study run` finds a step undone does it, under the study's budget lock: the study's description (the space
it was made with and its metrics; ``space_digest``, written last, says it is whole), its first configurations queued
once (each engine's baseline, then the prior's best; ``first_queued`` says they were, and a creator killed while
queueing them leaves those it queued, which are not queued again), and its budget (``autotune.search.budget.set_budget``).
No flag waits for a creator that may have died: a study killed while being made is finished by the next run.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from pathlib import Path

import optuna
from pydantic import BaseModel

from autotune import records
from autotune.engines import broken_rules
from autotune.errors import AutotuneError
from autotune.search.prior import RankingStatus, prior_model, rank
from autotune.search.status import Phase, StatusCallback, StatusEvent, no_status
from autotune.search.trial_queue import FixedConfiguration, queue_fixed, queued_params
from autotune.space.schema import ENGINE_PARAM, ENUMERATION_LIMIT, SearchSpace

log = logging.getLogger(__name__)


def open_study(space: SearchSpace, name: str, storage, sampler: optuna.samplers.BaseSampler,
               pruner: optuna.pruners.BasePruner) -> optuna.Study:  # fmt: skip
    """The study of that name, made if there is none (two workers at once: one makes it, the other loads it)."""
    directions = [m.direction for m in space.objective.metrics]
    try:
        return optuna.create_study(storage=storage, study_name=name, directions=directions, sampler=sampler,
                                   pruner=pruner)  # fmt: skip
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def first_queued(study: optuna.Study) -> bool:
    return records.StudyRecord.of(study).first_queued


def first_configurations(space: SearchSpace, n_trials: int,
                         on_status: StatusCallback = no_status) -> list[FixedConfiguration]:  # fmt: skip
    """What the study launches first: each engine's baseline (as many as the budget has room for), then the prior's
    best-predicted configurations. Computed outside the budget lock: the prior's ranking can take minutes."""
    baselines = [baseline_params(space, engine) for engine in list(space.engines)[:n_trials]]
    first = [FixedConfiguration(params, records.stored(baseline=True)) for params in baselines]
    for position, (params, predicted) in enumerate(_prior_params(space, baselines, n_trials - len(baselines),
                                                                 on_status), 1):  # fmt: skip
        first.append(FixedConfiguration(params, records.stored(prior=position, prior_predicted=predicted)))
    return first


def set_up(study: optuna.Study, space: SearchSpace, space_path: Path, first: list[FixedConfiguration]) -> None:
    """Do what the study's set-up still lacks; under the budget lock (workers starting at once do each step once).

    Raises:
        AutotuneError: the study was made with another search space.
    """
    if records.StudyRecord.of(study).space_digest is None:
        _describe(study, space, space_path)
    described = records.StudyRecord.of(study)
    if described.space_digest != digest(space):
        raise AutotuneError(f"study {study.study_name!r} was made with another search space "
                            f"({described.space_path}); fix: use --study with a new name")  # fmt: skip
    if first_queued(study):
        return
    already = queued_params(study)  # by a creator killed part-way through this step
    for fixed in first:
        if fixed.params not in already:
            queue_fixed(study, fixed)
    records.write_study(study, first_queued=True)


def _describe(study: optuna.Study, space: SearchSpace, space_path: Path) -> None:
    study.set_metric_names([m.name for m in space.objective.metrics])
    # the space's absolute path: `study validate` from any directory; one write, the digest with it: the
    # description is whole or absent; fields added since (mixes, classes) left out at their defaults (``_dump``)
    mix = {"workloads": [w.model_dump(mode="json") for w in space.mix_workloads()]} if space.is_mix else {}
    records.write_study(study, space_path=str(Path(space_path).resolve()), space_name=space.name,
                        objective=_dump(space.objective, "objective"),
                        workload=_dump(space.mix_workloads()[0], "workload"), **mix, space_digest=digest(space))  # fmt: skip


# fields added since studies were first stored, and their defaults: left out of the digest at those, so a study made
# before them resumes (its space reads the same)
_LATER_FIELDS = {None: {"workloads": None}, "objective": {"mix": "geomean"},
                 "workload": {"classes": None, "name": None, "weight": 1.0, "slo": None, "loads": None,
                              "tokenizer": None}}  # fmt: skip


def _at_default(model: BaseModel, section: str | None) -> dict[str, bool]:
    """The later fields of ``model`` (the space's ``section``, None: the space) at their defaults, for exclusion."""
    return {name: True for name, default in _LATER_FIELDS[section].items() if getattr(model, name) == default}


def _dump(model: BaseModel, section: str) -> dict:
    """``model`` as the study stores it: without the later fields at their defaults (the layout of older studies)."""
    return model.model_dump(mode="json", exclude=_at_default(model, section))


def digest(space: SearchSpace) -> str:
    """The space's fingerprint, as a study stores it (``space_digest``): a study refuses another space."""
    exclude: dict = _at_default(space, None)
    for section in ("objective", "workload"):
        exclude[section] = _at_default(getattr(space, section), section)
    return hashlib.sha256(space.model_dump_json(exclude=exclude).encode()).hexdigest()[:16]


def baseline_params(space: SearchSpace, engine: str) -> dict:
    """The Optuna params of an engine's default configuration in the space (its launch; loads are swept)."""
    params = {name: param.default_value() for name, param in space.launch_params(engine).items()}
    return with_engine(space, engine, params)


def with_engine(space: SearchSpace, engine: str, params: dict) -> dict:
    return {ENGINE_PARAM: engine, **params} if len(space.engines) > 1 else params


def _prior_params(space: SearchSpace, baselines: list[dict], room: int,
                  on_status: StatusCallback = no_status) -> list[tuple[dict, float]]:  # fmt: skip
    """The prior's best-predicted launch configurations (not the baselines), at most ``search.prior_trials``."""
    model = prior_model(space)
    if model is None or room <= 0 or space.search.prior_trials == 0:
        return []
    on_status(StatusEvent(Phase.RANKING))  # the ranking predicts every launch configuration: seconds on a large space

    def progress(done: int, total: int) -> None:
        on_status(RankingStatus(Phase.RANKING, done=done, total=total))

    chosen: list[tuple[dict, float]] = []
    for ranked in rank(space, model, on_progress=progress):
        params = with_engine(space, ranked.engine, ranked.params)
        if ranked.predicted is None or len(chosen) >= min(room, space.search.prior_trials):
            break
        if params not in baselines:
            chosen.append((params, round(ranked.predicted, 3)))
    log.info("prior (%s model): queued %d configurations", model, len(chosen))
    return chosen


def refuse_all_infeasible(space: SearchSpace) -> None:
    """A space whose every point breaks a static rule would only record rejections: say so before starting."""
    if any(space.launch_size(engine) > ENUMERATION_LIMIT for engine in space.engines):
        return
    reasons: Counter[str] = Counter()
    for engine in space.engines:
        launches = (p.server for p in space.enumerate(engine, launches_only=True))
        for rule in broken_rules(engine, launches, space.hardware):
            if rule is None:
                return
            reasons[rule] += 1
    raise AutotuneError(f"every configuration of the space breaks a static rule ({dict(reasons)}); fix the space "
                        "(see `autotune space show SPACE`)")  # fmt: skip
