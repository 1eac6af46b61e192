"""Create or resume a study: its storage, sampler and pruner, its set-up and its budget.

The trial budget is a number of launches (``autotune.search.budget``); the study's set-up (``autotune.search.setup``) queues
each engine's baseline (its default configuration in the space, the seed study's step 1) and the prior's picks.
``prepare_study`` checks what can be checked before any launch and returns the study ready for its workers
(``autotune.search.workers``, which start trials under the budget lock and run them). A dead worker's trial is ended and its
configuration queued again by the next worker (``autotune.search.orphans``, ``fail_stale_trials``).
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore

from autotune import records
from autotune.engines import Engine
from autotune.errors import AutotuneError, UsageError
from autotune.search import budget, calibration, names, warm_model, warm_start
from autotune.search import setup as study_setup
from autotune.search.backends import engine_for
from autotune.search.locks import budget_lock
from autotune.search.objective import Objective, TrialEnvironment
from autotune.search.orphans import KillOrphanAndRetry as _KillOrphanAndRetry  # open_storage's stale callback
from autotune.search.orphans import end_dead_workers_trials
from autotune.search.preflight import check_before_launch
from autotune.search.status import StatusCallback, no_status
from autotune.search.storage import open_storage
from autotune.serving.gpus import GpuPool, node_lock_dir
from autotune.serving.process import check_executable
from autotune.space.schema import SearchSpace

__all__ = ["PreparedStudy", "RunOptions", "create_or_load", "default_storage", "open_storage", "prepare_study"]

log = logging.getLogger(__name__)
# We drive ask/tell ourselves (to start trials under a lock) and record heartbeats with our own thread.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


DEFAULT_TRIALS = 8  # the budget of launches of a space that sets no `trials`


@dataclass(frozen=True)
class RunOptions:
    """How a worker runs study ``name``: where it is stored, its budget of launches, when to stop, the sampler's seed,
    the heartbeat, engine executables to override, and the node's GPUs its trials lease theirs from."""

    name: str
    storage: str
    studies_dir: Path
    n_trials: int  # the study's budget of launches in all (baselines included), not launches to add
    more_trials: int = 0  # instead of n_trials: add this many to the budget an existing study has (else n_trials)
    # whether n_trials was asked for (``study run --n-trials``): True sets an existing study's budget to it, lower too;
    # False keeps an existing study's budget; None (the Python API, a node's workers) only ever raises it
    n_trials_given: bool | None = None
    timeout_s: float | None = None
    seed: int | None = None
    heartbeat_s: int = 10
    executables: dict[str, list[str]] | None = None
    budget_node_minutes: float | None = None  # stop starting trials once the study's trials cost this much
    gpus: tuple[str, ...] | None = None  # the node's GPUs this worker's trials lease theirs from (--gpus)
    warm_start: tuple[warm_start.WarmSource, ...] = ()  # studies a new study starts from (autotune.search.warm_start)
    # stop once the chance that an untried configuration beats the incumbent falls below this (--stop-when-unlikely)
    stop_when_unlikely: float | None = None


def default_storage(name: str, studies_dir: Path) -> str:
    return f"sqlite:///{studies_dir / names.study_name(name)}.db"


def engine_as_launched(space: SearchSpace, name: str,
                       executables: dict[str, list[str]] | None = None) -> tuple[Engine, dict[str, str]]:  # fmt: skip
    """The adapter a trial of ``name`` launches (its executable as the trials run it) and the environment its
    baseline's launch adds to ours (the space's env knobs: a PYTHONPATH there is part of where the engine runs)."""
    engine = engine_for(space, name, executables)
    try:
        return engine, engine.launch_spec(space.default_point(name).server).env
    except AutotuneError:  # a baseline that cannot be rendered is the rules' business, not this check's
        return engine, {}


def make_sampler(space: SearchSpace, seed: int | None) -> optuna.samplers.BaseSampler:
    """The space's ``search.sampler``: TPE (multivariate, grouped for engine-conditional parameters) or random."""
    if space.search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant liar: a running trial (another worker's, or a concurrent one of this node) counts as a poor result,
    # so that workers asking at once are steered apart instead of all to the same configuration
    return optuna.samplers.TPESampler(seed=seed, group=True, constant_liar=True,
                                      n_startup_trials=max(4, len(space.engines) + 2))  # fmt: skip


def make_pruner(space: SearchSpace) -> optuna.pruners.BasePruner:
    """The space's ``search.pruner``, watching each trial's first benchmark: ``percentile`` stops a trial in the bottom
    quarter, ``median`` one in the bottom half (of the trials measured at the same load and checkpoint)."""
    if space.search.pruner == "none":
        return optuna.pruners.NopPruner()
    # judged only against 3 or more trials measured at the same load and checkpoint (one faster trial is no verdict);
    # the first checkpoints of each load are skipped by the objective (autotune.search.pruning.pruning_hook)
    if space.search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_min_trials=3)
    # Optuna's percentile is the share *kept* ("top of 25th percentile trials are kept"): 25 would stop the bottom
    # three quarters. 75 keeps the top three quarters, so only a trial under the 25th percentile is stopped
    return optuna.pruners.PercentilePruner(75.0, n_startup_trials=3, n_min_trials=3)


def create_or_load(space: SearchSpace, space_path: Path, options: RunOptions, storage,
                   on_status: StatusCallback = no_status) -> optuna.Study:  # fmt: skip
    """The study, made or loaded, with what its set-up still lacks done (``autotune.search.setup``: a creator killed
    part-way leaves a study the next run finishes) and its budget set or raised (``--more`` adds once per run)."""
    study = study_setup.open_study(space, options.name, storage, make_sampler(space, options.seed), make_pruner(space))
    fresh = not study_setup.first_queued(study)
    if not fresh and options.warm_start and records.StudyRecord.of(study).warm_sources is None:
        raise UsageError(f"--warm-start: study {options.name!r} was made already, without a warm start, and a warm "
                         "start is taken when a study is made; fix: drop --warm-start to go on with it, or give a "
                         "new --study name")  # fmt: skip
    first = study_setup.first_configurations(space, options.n_trials, on_status) if fresh else []
    # read outside the lock (other storages); a study made already keeps what it was started with
    warm = warm_start.snapshot(space, list(options.warm_start)) if fresh and options.warm_start else None
    if warm is not None:  # the sources' best few, measured again, placed among the baselines (warm_start)
        baselines = [f for f in first if f.marks.get("baseline")]
        lead = warm_start.first_configurations(space, warm, baselines)
        taken = [f.params for f in lead]
        # no more than the budget launches: a pick queued past it would be left WAITING when the study stops (the
        # prior's picks go first, then the sources' runners-up; the warm prior queues more if the budget is raised)
        first = (lead + [f for f in first[len(baselines) :] if f.params not in taken])[: options.n_trials]
    with budget_lock(options.storage, options.name, options.studies_dir):  # workers starting at once: each step once
        described = records.StudyRecord.of(study)
        if warm is not None and described.warm_sources is None and not described.first_queued:
            warm_start.record(study, warm)  # before the first trial: rules and measurements in place
        if described.identity is None:  # what `--warm-start auto` asks of a study
            records.write_study(study, identity=warm_start.identity_of(space))
        study_setup.set_up(study, space, space_path, first)
        budget.set_budget(study, options.n_trials, options.more_trials, given=options.n_trials_given)
    return study


def node_minutes_spent(study: optuna.Study) -> float:
    """What the study's trials have cost so far (``node_minutes`` of each: launches, benchmarks, failures)."""
    return node_minutes_of(study.get_trials(deepcopy=False))


def node_minutes_of(trials: Iterable[optuna.trial.FrozenTrial]) -> float:
    """The node-minutes of ``trials`` together (for a caller that has read them already)."""
    return sum(records.node_minutes(t) for t in trials)


@dataclass
class PreparedStudy:
    """A study ready to run: checked, opened, set up, with its budget."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    objective: Objective
    options: RunOptions
    catalogue: budget.LaunchCatalogue  # the space's launch configurations, to know when every one was tried
    warm: bool = False  # warm-started: after each trial the warm prior's weight is updated (``after_trial``)
    # the sources' model residuals start the calibration: it picks before the warm prior (copied in when the study is
    # made, so read once)
    calibrated_first: bool = False


def prepare_study(space: SearchSpace, space_path: Path, options: RunOptions,
                  on_status: StatusCallback = no_status) -> PreparedStudy:  # fmt: skip
    """Check what can be checked before any launch, open the storage, create or resume the study.

    Raises:
        AutotuneError: an engine executable is missing, every configuration breaks a rule, the storage cannot be
            opened, or the study was made with another space (or without the warm start asked now).
    """
    check_before_launch(space, space_path)
    for engine in space.engines if space.simulate is None else ():  # the simulator runs instead
        check_executable(*engine_as_launched(space, engine, options.executables))
    study_setup.refuse_all_infeasible(space)
    storage = open_storage(options.storage, options.heartbeat_s, _KillOrphanAndRetry())
    study = create_or_load(space, space_path, options, storage, on_status)
    study_dir = options.studies_dir / options.name
    pool = GpuPool(options.gpus, node_lock_dir(options.studies_dir)) if options.gpus else None
    environment = TrialEnvironment(study_dir, FileSystemArtifactStore(str(_mkdir(study_dir / "artifacts"))),
                                   options.executables or {}, pool, functools.partial(fail_stale_trials, options),
                                   on_status)  # fmt: skip
    record = records.StudyRecord.of(study)
    return PreparedStudy(study, storage, Objective(space, environment), options, budget.LaunchCatalogue(space),
                         warm=bool(record.warm_measurements), calibrated_first=bool(record.warm_residuals))  # fmt: skip


def after_trial(prepared: PreparedStudy, finished: optuna.trial.FrozenTrial) -> None:
    """After each trial: a warm-started study's warm prior, its weight (``autotune.search.warm_model.step``) and its
    next pick (``queue_next``); then the performance model's calibration, its error and its next pick
    where the warm prior picked none (``autotune.search.calibration.step``). Where the calibration starts from the
    sources' residuals it is the better-informed of the two (it predicts this workload's metrics, the warm prior
    only the sources' values), so it picks first and the warm prior after it."""
    options, space, study = prepared.options, prepared.objective.space, prepared.study
    lock = functools.partial(budget_lock, options.storage, options.name, options.studies_dir)
    warm = warm_model.step(study, finished, lock) if prepared.warm else None
    if warm is not None and not prepared.calibrated_first:
        warm_model.queue_next(study, space, warm, lock)
    calibration.step(study, space, finished, lock)
    if warm is not None and prepared.calibrated_first:
        warm_model.queue_next(study, space, warm, lock)


def fail_stale_trials(options: RunOptions, study: optuna.Study) -> None:
    """``autotune.search.orphans.end_dead_workers_trials``, under the study's budget lock: two workers that both saw a trial
    stale would both retry it, and the study would run more trials than its budget."""
    with budget_lock(options.storage, options.name, options.studies_dir):
        end_dead_workers_trials(study)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
