"""Create or resume a study and run trials in it, alone or beside other workers on the same storage.

The trial budget is a set of WAITING trials ("slots") created with the study: each engine's baseline (its default
configuration in the space, the seed study's step 1) and N − baselines empty slots the sampler fills. Workers pop
slots under a lock (a PostgreSQL advisory lock, or a file lock for SQLite), so two workers never make more trials than
asked. The budget counts launches (``autotune.budget``): a trial that launches nothing (a duplicate, a rejection)
gives its slot back, and a study whose space is exhausted stops with slots left. A worker that dies leaves its trial
RUNNING and its engine orphaned: the next run on its host at once, any worker once the trial's heartbeat is stale, kills
the engine, counts its time and retries the configuration in a new slot (``autotune.orphans``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import functools
import hashlib
import logging
import multiprocessing
import os
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

from autotune import budget, names
from autotune.engines import Engine, broken_rules
from autotune.errors import AutotuneError, EngineNotInstalled, FailureKind
from autotune.gpus import GpuPool, node_lock_dir
from autotune.notes import save_trial_note, trial_note
from autotune.objective import REASON_LIMIT, Objective, Outcome, TrialEnvironment, engine_for
from autotune.orphans import KillOrphanAndRetry as _KillOrphanAndRetry  # open_storage's stale callback
from autotune.orphans import end_dead_workers_trials, mark_worker
from autotune.prior import prior_model, rank
from autotune.server import check_executable
from autotune.space import ENGINE_PARAM, ENUMERATION_LIMIT, SearchSpace
from autotune.spacefile import check_dataset
from autotune.status import Phase, StatusCallback, StatusEvent, no_status
from autotune.storage import Heartbeat, advisory_lock, lock_engine_kwargs, open_storage
from autotune.text import shorten

log = logging.getLogger(__name__)
# We drive ask/tell ourselves (to pop slots under a lock) and record heartbeats with our own thread.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
_READY_ATTR = "autotune_slots_ready"
_READY_WAIT_S = 60.0
_IDLE_POLL_S = 1.0  # how often a worker with no slot left looks whether the trials still running have ended
_PR_SET_PDEATHSIG = 1  # Linux prctl: the signal a process gets when its parent dies


@dataclass(frozen=True)
class RunOptions:
    name: str
    storage: str
    studies_dir: Path
    n_trials: int  # the study's budget of launches in all (baselines included), not launches to add
    more_trials: int = 0  # instead of n_trials: add this many to the budget an existing study has (else n_trials)
    timeout_s: float | None = None
    seed: int | None = None
    heartbeat_s: int = 10
    executables: dict[str, list[str]] | None = None
    budget_node_minutes: float | None = None  # stop starting trials once the study's trials cost this much
    gpus: tuple[str, ...] | None = None  # the node's GPUs this worker's trials lease theirs from (--gpus)


def default_storage(name: str, studies_dir: Path) -> str:
    return f"sqlite:///{studies_dir / names.study_name(name)}.db"


def baseline_params(space: SearchSpace, engine: str) -> dict:
    """The Optuna params of an engine's default configuration in the space (its launch; loads are swept)."""
    params = {name: param.default_value() for name, param in space.launch_params(engine).items()}
    return _with_engine(space, engine, params)


def engine_as_launched(space: SearchSpace, name: str,
                       executables: dict[str, list[str]] | None = None) -> tuple[Engine, dict[str, str]]:  # fmt: skip
    """The adapter a trial of ``name`` launches (its executable as the trials run it) and the environment its
    baseline's launch adds to ours (the space's env knobs: a PYTHONPATH there is part of where the engine runs)."""
    engine = engine_for(space, name, executables)
    try:
        return engine, engine.launch_spec(space.default_point(name).server).env
    except AutotuneError:  # a baseline that cannot be rendered is the rules' business, not this check's
        return engine, {}


def _with_engine(space: SearchSpace, engine: str, params: dict) -> dict:
    return {ENGINE_PARAM: engine, **params} if len(space.engines) > 1 else params


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
    # the first checkpoints of each load are skipped by the objective (autotune.objective._pruning_hook)
    if space.search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_min_trials=3)
    # Optuna's percentile is the share *kept* ("top of 25th percentile trials are kept"): 25 would stop the bottom
    # three quarters. 75 keeps the top three quarters, so only a trial under the 25th percentile is stopped
    return optuna.pruners.PercentilePruner(75.0, n_startup_trials=3, n_min_trials=3)


def create_or_load(space: SearchSpace, space_path: Path, options: RunOptions, storage,
                   on_status: StatusCallback = no_status) -> optuna.Study:  # fmt: skip
    """The study, created with its slots (baselines, then the prior's best, then empty) or loaded, waiting until
    its creator made the slots."""
    directions = [m.direction for m in space.objective.metrics]
    sampler, pruner = make_sampler(space, options.seed), make_pruner(space)
    try:
        study = optuna.create_study(storage=storage, study_name=options.name, directions=directions, sampler=sampler,
                                    pruner=pruner)  # fmt: skip
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=options.name, storage=storage, sampler=sampler, pruner=pruner)
        _check_same_space(study, space)
        _wait_ready(study)
        with slot_lock(options.storage, options.name, options.studies_dir):  # workers starting at once add once
            _top_up(study, study_budget(study) + options.more_trials if options.more_trials else options.n_trials)
        return study
    study.set_metric_names([m.name for m in space.objective.metrics])
    study.set_user_attr("space_path", str(Path(space_path).resolve()))  # `study validate` from any directory
    study.set_user_attr("space_name", space.name)
    study.set_user_attr("space_digest", _digest(space))
    study.set_user_attr("objective", space.objective.model_dump(mode="json"))
    study.set_user_attr("workload", space.workload.model_dump(mode="json"))
    engines = list(space.engines)[: options.n_trials]
    baselines = [baseline_params(space, engine) for engine in engines]
    for params in baselines:
        study.enqueue_trial(params, user_attrs={"baseline": True, "slot": True})
    priors = _prior_params(space, baselines, options.n_trials - len(baselines), on_status)
    for position, (params, predicted) in enumerate(priors, 1):
        study.enqueue_trial(params, user_attrs={"prior": position, "prior_predicted": predicted, "slot": True})
    for _ in range(options.n_trials - len(engines) - len(priors)):
        study.enqueue_trial({}, user_attrs={"slot": True})
    study.set_user_attr(budget.BUDGET_ATTR, options.n_trials)
    study.set_user_attr(_READY_ATTR, True)
    return study


def _prior_params(space: SearchSpace, baselines: list[dict], room: int,
                  on_status: StatusCallback = no_status) -> list[tuple[dict, float]]:  # fmt: skip
    """The prior's best-predicted launch configurations (not the baselines), at most ``search.prior_trials``."""
    model = prior_model(space)
    if model is None or room <= 0 or space.search.prior_trials == 0:
        return []
    on_status(StatusEvent(Phase.RANKING))  # the ranking predicts every launch configuration: minutes on a large space
    chosen: list[tuple[dict, float]] = []
    for ranked in rank(space, model):
        params = _with_engine(space, ranked.engine, ranked.params)
        if ranked.predicted is None or len(chosen) >= min(room, space.search.prior_trials):
            break
        if params not in baselines:
            chosen.append((params, round(ranked.predicted, 3)))
    log.info("prior (%s model): enqueued %d configurations", model, len(chosen))
    return chosen


def node_minutes_spent(study: optuna.Study) -> float:
    """What the study's trials have cost so far (``node_minutes`` of each: launches, benchmarks, failures)."""
    return node_minutes_of(study.get_trials(deepcopy=False))


def node_minutes_of(trials: Iterable[optuna.trial.FrozenTrial]) -> float:
    """The node-minutes of ``trials`` together (for a caller that has read them already)."""
    return sum(t.user_attrs.get("node_minutes") or 0.0 for t in trials)


def _digest(space: SearchSpace) -> str:
    return hashlib.sha256(space.model_dump_json().encode()).hexdigest()[:16]


def _check_same_space(study: optuna.Study, space: SearchSpace) -> None:
    if study.user_attrs.get("space_digest") not in (None, _digest(space)):
        raise AutotuneError(f"study {study.study_name!r} was made with another search space "
                            f"({study.user_attrs.get('space_path')}); fix: use --study with a new name")  # fmt: skip


def _wait_ready(study: optuna.Study) -> None:
    deadline = time.monotonic() + _READY_WAIT_S
    while not study.user_attrs.get(_READY_ATTR):
        if time.monotonic() > deadline:
            raise AutotuneError(f"study {study.study_name!r} exists but its creator never finished setting it up")
        time.sleep(0.5)


def study_budget(study: optuna.Study) -> int:
    """The study's budget of launches in all (the slots it has made, less those given back)."""
    return study.user_attrs.get(budget.BUDGET_ATTR, 0)


def _top_up(study: optuna.Study, n_trials: int) -> None:
    """A later run that asks for more launches than the study's budget adds the difference as slots."""
    add_slots(study, [{}] * max(0, n_trials - study_budget(study)))


def add_slots(study: optuna.Study, params: list[dict]) -> None:
    """Add slots to the study's budget, each with the parameters given (``{}``: the sampler's choice)."""
    for fixed in params:
        study.enqueue_trial(fixed, user_attrs={"slot": True})
    if params:
        study.set_user_attr(budget.BUDGET_ATTR, study_budget(study) + len(params))
        budget.mark_raised(study)


def _give_back_slot(prepared: PreparedStudy, trial: optuna.trial.FrozenTrial) -> None:
    """A trial that launched nothing (a duplicate, a rejection) gives its slot back, as an empty slot of the same
    budget: the budget counts launches. Under the slot lock, where a duplicate's refinement then hands the lowest
    empty slot to an untried neighbour of the incumbent (no other worker pops it meanwhile)."""
    if not budget.ended_without_launch(trial):
        return
    options = prepared.options
    with slot_lock(options.storage, options.name, options.studies_dir):
        prepared.study.enqueue_trial({}, user_attrs={"slot": True, "given_back_by": trial.number})
        if budget.is_duplicate(trial):
            prepared.objective.refine_after_duplicate(prepared.study)


@contextlib.contextmanager
def slot_lock(storage_url: str, study_name: str, studies_dir: Path) -> Iterator[None]:
    """Only one worker at a time checks for a slot and pops it."""
    if storage_url.startswith("postgresql"):
        key = int(hashlib.sha256(study_name.encode()).hexdigest()[:15], 16)
        with advisory_lock(_lock_engine(storage_url), key):  # taken through a storage outage, as storage calls are
            yield
        return
    studies_dir.mkdir(parents=True, exist_ok=True)
    with (studies_dir / f".{names.study_name(study_name)}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=4)
def _lock_engine(storage_url: str) -> sqlalchemy.Engine:
    # one pooled connection per storage and process, not a new connection for every trial's lock
    return sqlalchemy.create_engine(storage_url, **lock_engine_kwargs(storage_url))


class _Terminated(BaseException):
    """SIGTERM turned into an exception, so the running engine is taken down by its context manager."""


@dataclass
class PreparedStudy:
    """A study ready to run: checked, opened, with its slots."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    objective: Objective
    options: RunOptions
    catalogue: budget.LaunchCatalogue  # the space's launch configurations, to know when every one was tried


def prepare_study(space: SearchSpace, space_path: Path, options: RunOptions,
                  on_status: StatusCallback = no_status) -> PreparedStudy:  # fmt: skip
    """Check what can be checked before any launch, open the storage, create or resume the study.

    Raises:
        AutotuneError: an engine executable is missing, every configuration breaks a rule, the storage cannot be
            opened, or the study was made with another space.
    """
    check_dataset(space, space_path)
    for engine in space.engines if space.simulate is None else ():  # the simulator runs instead
        check_executable(*engine_as_launched(space, engine, options.executables))
    _refuse_all_infeasible(space)
    storage = open_storage(options.storage, options.heartbeat_s, _KillOrphanAndRetry())
    study = create_or_load(space, space_path, options, storage, on_status)
    study_dir = options.studies_dir / options.name
    pool = GpuPool(options.gpus, node_lock_dir(options.studies_dir)) if options.gpus else None
    environment = TrialEnvironment(study_dir, FileSystemArtifactStore(str(_mkdir(study_dir / "artifacts"))),
                                   options.executables or {}, pool, functools.partial(fail_stale_trials, options),
                                   on_status)  # fmt: skip
    return PreparedStudy(study, storage, Objective(space, environment), options, budget.LaunchCatalogue(space))


def run_trials(prepared: PreparedStudy,
               on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None) -> optuna.Study:  # fmt: skip
    """Run trials until the study's slots are used up, its space is exhausted (or the timeout); a SIGTERM stops
    cleanly."""
    study, options = prepared.study, prepared.options
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        while options.timeout_s is None or time.monotonic() - started < options.timeout_s:
            if options.budget_node_minutes is not None and node_minutes_spent(study) >= options.budget_node_minutes:
                log.info("study %s: node-minute budget spent", options.name)
                break
            # looked at outside the slot lock (it reads every trial): a worker that pops one more slot meanwhile
            # finds a duplicate, which launches nothing
            if (reason := budget.exhausted(study, prepared.catalogue)) is not None:
                log.info("study %s: space exhausted: %s", options.name, reason)
                break
            with slot_lock(options.storage, options.name, options.studies_dir):
                end_dead_workers_trials(study)  # a dead worker's trial goes back to the slots (locked: once)
                trial = _pop_slot(study, prepared.storage, options.heartbeat_s)
            if trial is None:
                # no slot left; a trial still running elsewhere may yet go stale and come back to be retried
                if options.heartbeat_s and study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    # looked at often: the study ends when its last trial does, not up to a heartbeat later
                    time.sleep(min(options.heartbeat_s, _IDLE_POLL_S))
                    continue
                break
            mark_worker(trial)
            frozen = _run_trial(study, prepared.storage, trial, prepared.objective, options.heartbeat_s)
            _give_back_slot(prepared, frozen)
            if on_trial:
                on_trial(study, frozen)
    except _Terminated:
        raise AutotuneError("stopped by SIGTERM; the running trial will be retried by the next `study run`") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return study


def _pop_slot(study: optuna.Study, storage: optuna.storages.RDBStorage, heartbeat_s: int) -> optuna.Trial | None:
    """The study's oldest slot as this worker's RUNNING trial, or None when no slot is left; called under the slot
    lock (``study.ask()`` would make a trial beyond the budget when none is left, so it cannot be called blind).

    What ``ask()`` does, with one read of the slots instead of two: the lock is held by one worker at a time, and
    that read, of every slot left, is most of what it holds it for. The slot's heartbeat is recorded before it is
    RUNNING: a worker killed in between would otherwise leave a RUNNING trial that never goes stale."""
    # read through the study (its cached storage, which the trial's suggestions go through, must know the trial)
    for slot in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):  # oldest first, as ask() pops
        if heartbeat_s:
            storage.record_heartbeat(slot._trial_id)
        if storage.set_trial_state_values(slot._trial_id, state=TrialState.RUNNING):  # False: popped elsewhere
            return optuna.Trial(study, slot._trial_id)  # as ask() makes it: the sampler's before_trial runs here
    return None


def run_node(space: SearchSpace, space_path: Path, options: RunOptions, workers: int,
             on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
             on_progress: Callable[[optuna.Study], None] | None = None,
             on_status: StatusCallback = no_status) -> optuna.Study:  # fmt: skip
    """Run ``workers`` workers of the study on this node at once, their trials leasing disjoint GPUs of
    ``options.gpus``; each a process of its own (two benchmark clients in one interpreter would share its core and
    its lock, and measure each other). They die with this process; a SIGTERM here stops them cleanly.

    ``on_trial`` runs in the worker that ran the trial (a module-level function: it is sent to the worker by name);
    ``on_progress`` here, about once a second."""
    prepared = prepare_study(space, space_path, options, on_status)  # the budget is set once, here (--more adds once)
    study = prepared.study
    each = dataclasses.replace(options, n_trials=study_budget(study), more_trials=0)
    # forked by a server process that imported autotune once: no storage connection or thread of ours inherited,
    # and no worker pays for the imports again
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["autotune.study", "autotune.cli.study"])
    # a seed of its own for each worker: one seed would make every worker suggest the same configurations
    seeds = [None if options.seed is None else options.seed + index for index in range(workers)]
    processes = [context.Process(target=_node_worker, args=(space, space_path, dataclasses.replace(each, seed=seed),
                                                            os.getpid(), on_trial)) for seed in seeds]  # fmt: skip
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        for process in processes:
            process.start()
        while any(process.is_alive() for process in processes):
            if on_progress:
                on_progress(study)
            for process in processes:
                process.join(timeout=1.0 / len(processes))
    except _Terminated:
        for process in processes:
            if process.pid and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)  # each stops its engine and leaves its trial to be retried
        for process in processes:
            process.join()
        raise AutotuneError("stopped by SIGTERM; the running trials will be retried by the next `study run`") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if on_progress:
        on_progress(study)
    failed = [process.exitcode for process in processes if process.exitcode]
    if failed:
        raise AutotuneError(f"{len(failed)} of {workers} workers of this node failed (exit codes {failed}); "
                            "see their messages above")  # fmt: skip
    return study


def _node_worker(space: SearchSpace, space_path: Path, options: RunOptions, parent: int, on_trial) -> None:
    """One worker of ``run_node``: killed with its parent (even by SIGKILL), so no worker runs on unwatched. Its
    parent is the fork server, which exits when ``run_node``'s process does."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        os.kill(parent, 0)
    except ProcessLookupError:  # run_node's process died before the request above took effect
        os._exit(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        prepared = prepare_study(space, space_path, options)
        run_trials(prepared, on_trial)
    except AutotuneError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        sys.exit(1)


def concurrent_trials(space: SearchSpace, gpus: tuple[str, ...], executables: dict | None = None) -> int:
    """How many workers run trials at once on ``gpus``: as many as the space's smallest launch fits, and half as
    many again where launches differ in size (one per GPU when the space is too large to enumerate; then trials that
    need more simply wait for their GPUs). The extra ones keep the GPUs busy while larger trials wait for enough of them:
    on a simulated node (benchmarks/gpu_packing_sim.py, 32 trials of 1/2/4/8 GPUs) 0.48 of the one-at-a-time wall
    time against 0.50 without them; they only wait (their trials count as running for the constant liar)."""
    sizes = set()
    for name in space.engines:
        if space.launch_size(name) > ENUMERATION_LIMIT:
            return len(gpus)
        engine = engine_for(space, name, executables)
        sizes |= {max(1, engine.gpus_used(point.server)) for point in space.enumerate(name, launches_only=True)}
    fits = max(1, len(gpus) // min(sizes | {len(gpus)}))
    return fits + fits // 2 if len({size for size in sizes if size <= len(gpus)}) > 1 else fits


def _refuse_all_infeasible(space: SearchSpace) -> None:
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
                        "(see `autotune space show`)")  # fmt: skip


def _run_trial(study, storage, trial, objective, heartbeat_s) -> optuna.trial.FrozenTrial:
    with Heartbeat(storage, trial._trial_id, heartbeat_s):
        try:
            values = objective(trial)
        except optuna.TrialPruned:
            return _tell(study, trial, objective, state=TrialState.PRUNED)
        except EngineNotInstalled as exc:
            give_back_slot(study, _tell_failed(study, trial, objective, exc, outcome=FailureKind.NOT_INSTALLED))
            raise AutotuneError(f"trial {trial.number}: {exc}") from exc
        except AutotuneError as exc:
            _tell_failed(study, trial, objective, exc)
            raise AutotuneError(f"trial {trial.number}: {exc}") from exc
        except Exception as exc:
            _tell_failed(study, trial, objective, exc)  # a bug in the tuner, not a property of the configuration
            raise
        return _tell(study, trial, objective, values)


def _tell(study, trial, objective: Objective, values=None, state=None) -> optuna.trial.FrozenTrial:
    """Tell Optuna the trial's result, then write its dashboard note (from the finished trial, pruned ones too)."""
    frozen = study.tell(trial, values, state=state)
    save_trial_note(trial, trial_note(frozen, objective.space.objective))
    return frozen


def _tell_failed(study, trial, objective: Objective, exc: Exception,
                 outcome: str = Outcome.ERROR) -> optuna.trial.FrozenTrial:  # fmt: skip
    trial.set_user_attr("outcome", outcome)  # before the tell: a finished trial's attributes are read-only
    trial.set_user_attr("error", shorten(f"{type(exc).__name__}: {exc}", REASON_LIMIT))
    return _tell(study, trial, objective, state=TrialState.FAIL)


_SLOT_ATTRS = ("slot", "baseline", "prior", "prior_predicted")  # what makes a slot what it is (create_or_load)


def give_back_slot(study: optuna.Study, failed: optuna.trial.FrozenTrial) -> None:
    """A FAIL trial that measured nothing for a reason of the machine (the engine is not installed) costs the study
    no trial: its slot is made again, as it was (a baseline stays the baseline, a fixed configuration stays fixed),
    at the end of the queue; the budget stays (it counts slots made for the study, not for a failure of the tuner),
    so the next `study run` after the fix runs every trial asked for."""
    study.enqueue_trial(failed.system_attrs.get("fixed_params", {}),
                        user_attrs={k: v for k, v in failed.user_attrs.items() if k in _SLOT_ATTRS})  # fmt: skip


def fail_stale_trials(options: RunOptions, study: optuna.Study) -> None:
    """``autotune.orphans.end_dead_workers_trials``, under the study's slot lock: two workers that both saw a trial
    stale would both retry it, and the study would run more trials than its budget."""
    with slot_lock(options.storage, options.name, options.studies_dir):
        end_dead_workers_trials(study)


def _raise_terminated(signum: int, frame: object) -> None:
    # once: a second SIGTERM (Slurm signals every process of a step; a node's workers get one from their parent too)
    # must not interrupt the engine's stop that the first one started
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
