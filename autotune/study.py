"""Create or resume a study and run trials in it, alone or beside other workers on the same storage.

The trial budget is a number of launches (``autotune.budget``); the study's set-up (``autotune.study_setup``) queues
each engine's baseline (its default configuration in the space, the seed study's step 1) and the prior's picks.
Workers start trials under a lock (a PostgreSQL advisory lock, or a file lock for SQLite) only while the launches so
far and the trials running are fewer than the budget (``autotune.trial_queue``), so workers at once never launch more
than asked; a trial that launches nothing (a duplicate, a rejection) does not count, and a study whose space is
exhausted stops sooner. Heartbeats mark a worker's running trial; when a worker dies, the next one to start finds the
trial stale, kills the engine process group it left (recorded in the trial), and queues its configuration again; on
the dead worker's own host the next run does so at once, before it launches anything, and counts the engine's time
(``autotune.orphans``).
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

from autotune import budget, names, records, stopping, study_setup, trial_queue
from autotune.engines import Engine
from autotune.errors import AutotuneError, EngineNotInstalled, FailureKind, UsageError
from autotune.gpus import GpuPool, node_lock_dir
from autotune.notes import save_trial_note, trial_note
from autotune.objective import REASON_LIMIT, Objective, TrialEnvironment, engine_for
from autotune.orphans import KillOrphanAndRetry as _KillOrphanAndRetry  # open_storage's stale callback
from autotune.orphans import dead_workers_trials, end_dead_workers_trials, mark_worker
from autotune.records import Outcome
from autotune.server import check_executable
from autotune.space import ENUMERATION_LIMIT, SearchSpace
from autotune.spacefile import check_dataset
from autotune.status import StatusCallback, no_status
from autotune.storage import Heartbeat, advisory_lock, lock_engine_kwargs, open_storage, unwritable
from autotune.text import shorten

log = logging.getLogger(__name__)
# We drive ask/tell ourselves (to start trials under a lock) and record heartbeats with our own thread.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# how often a worker with no room left in the budget looks whether the trials still running have ended
_IDLE_POLL_S = 1.0
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
    # the first checkpoints of each load are skipped by the objective (autotune.objective._pruning_hook)
    if space.search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_min_trials=3)
    # Optuna's percentile is the share *kept* ("top of 25th percentile trials are kept"): 25 would stop the bottom
    # three quarters. 75 keeps the top three quarters, so only a trial under the 25th percentile is stopped
    return optuna.pruners.PercentilePruner(75.0, n_startup_trials=3, n_min_trials=3)


def create_or_load(space: SearchSpace, space_path: Path, options: RunOptions, storage,
                   on_status: StatusCallback = no_status) -> optuna.Study:  # fmt: skip
    """The study, made or loaded, with what its set-up still lacks done (``autotune.study_setup``: a creator killed
    part-way leaves a study the next run finishes) and its budget set or raised (``--more`` adds once per run)."""
    study = study_setup.open_study(space, options.name, storage, make_sampler(space, options.seed), make_pruner(space))
    first = [] if study_setup.first_queued(study) else study_setup.first_configurations(space, options.n_trials,
                                                                                          on_status)  # fmt: skip
    with slot_lock(options.storage, options.name, options.studies_dir):  # workers starting at once: each step once
        study_setup.set_up(study, space, space_path, first)
        budget.set_budget(study, options.n_trials, options.more_trials)
    return study


def node_minutes_spent(study: optuna.Study) -> float:
    """What the study's trials have cost so far (``node_minutes`` of each: launches, benchmarks, failures)."""
    return node_minutes_of(study.get_trials(deepcopy=False))


def node_minutes_of(trials: Iterable[optuna.trial.FrozenTrial]) -> float:
    """The node-minutes of ``trials`` together (for a caller that has read them already)."""
    return sum(records.node_minutes(t) for t in trials)


@contextlib.contextmanager
def slot_lock(storage_url: str, study_name: str, studies_dir: Path) -> Iterator[None]:
    """Only one worker at a time counts the budget and starts a trial (and ends a dead worker's)."""
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


@dataclass
class PreparedStudy:
    """A study ready to run: checked, opened, set up, with its budget."""

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
    study_setup.refuse_all_infeasible(space)
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
    """Run trials until the study's budget is used up, its space is exhausted (or the timeout); a SIGTERM stops
    cleanly."""
    study = prepared.study
    started = time.monotonic()
    try:
        with stopping.stop_on_sigterm():
            _run_trials_until_done(prepared, on_trial, started)
    except stopping.Terminated:
        raise AutotuneError("stopped by SIGTERM; the running trial will be retried by the next `study run`") from None
    return study


def _run_trials_until_done(prepared: PreparedStudy, on_trial, started: float) -> None:
    study, options = prepared.study, prepared.options
    while options.timeout_s is None or time.monotonic() - started < options.timeout_s:
        stopping.raise_if_requested()  # a SIGTERM whose exception was swallowed where it landed
        if options.budget_node_minutes is not None and node_minutes_spent(study) >= options.budget_node_minutes:
            log.info("study %s: node-minute budget spent", options.name)
            break
        # looked at outside the slot lock (it reads every trial): a worker that starts one more trial meanwhile
        # finds a duplicate, which launches nothing
        if (reason := budget.exhausted(study, prepared.catalogue)) is not None:
            log.info("study %s: space exhausted: %s", options.name, reason)
            break
        # looked for outside the slot lock, which 16 workers wait for in turn; ended under it (once), before the
        # trial starts: a dead tuner's engine on this host is gone before this worker launches anything
        dead = bool(dead_workers_trials(study))
        with slot_lock(options.storage, options.name, options.studies_dir):
            if dead:
                end_dead_workers_trials(study)  # a dead worker's trial is queued again
            trial = trial_queue.start_trial(study, prepared.storage, options.heartbeat_s)
        if trial is None:
            # no room left; a trial still running elsewhere may yet launch nothing, or go stale and be retried
            if options.heartbeat_s and study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                # looked at often: the study ends when its last trial does, not up to a heartbeat later
                time.sleep(min(options.heartbeat_s, _IDLE_POLL_S))
                continue
            break
        mark_worker(trial)
        frozen = _run_trial(study, prepared.storage, trial, prepared.objective, options.heartbeat_s)
        if budget.is_duplicate(frozen):
            _refine(prepared)
        if on_trial:
            on_trial(study, frozen)


def _refine(prepared: PreparedStudy) -> None:
    """After a duplicate: an untried neighbour of the incumbent is queued (``autotune.refine``), under the slot lock,
    where no other worker's refinement queues the same one meanwhile."""
    options = prepared.options
    with slot_lock(options.storage, options.name, options.studies_dir):
        neighbour = prepared.objective.neighbour_after_duplicate(prepared.study)
        if neighbour is not None:
            trial_queue.queue_fixed(
                prepared.study,
                trial_queue.FixedConfiguration(neighbour.params, records.stored(neighbour_of=neighbour.of)),
            )


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
    each = dataclasses.replace(options, n_trials=budget.study_budget(study), more_trials=0)
    # forked by a server process that imported autotune once: no storage connection or thread of ours inherited,
    # and no worker pays for the imports again
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["autotune.study", "autotune.cli.study"])
    # a seed of its own for each worker: one seed would make every worker suggest the same configurations
    seeds = [None if options.seed is None else options.seed + index for index in range(workers)]
    processes = [context.Process(target=_node_worker, args=(space, space_path, dataclasses.replace(each, seed=seed),
                                                            os.getpid(), on_trial)) for seed in seeds]  # fmt: skip
    try:
        with stopping.stop_on_sigterm():
            for process in processes:
                process.start()
            while any(process.is_alive() for process in processes):
                stopping.raise_if_requested()  # a SIGTERM swallowed where it landed: the workers are told all the same
                if on_progress:
                    on_progress(study)
                for process in processes:
                    process.join(timeout=1.0 / len(processes))
    except BaseException as exc:
        # whatever ends this process (a SIGTERM, Ctrl-C, a storage that stayed away): each worker stops its engine
        # and leaves its trial to be retried, rather than being SIGKILLed with it (PDEATHSIG) and orphaning the engine
        for process in processes:
            if process.pid and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            if process.pid:
                process.join()
        if isinstance(exc, stopping.Terminated):
            raise AutotuneError(
                "stopped by SIGTERM; the running trials will be retried by the next `study run`"
            ) from None
        raise
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
    except (AutotuneError, OSError) as exc:
        if isinstance(exc, OSError) and (exc := unwritable(exc)) is None:
            raise  # not a full or read-only disk: a bug, with its traceback
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


def _run_trial(study, storage, trial, objective, heartbeat_s) -> optuna.trial.FrozenTrial:
    with Heartbeat(storage, trial._trial_id, heartbeat_s):
        try:
            values = objective(trial)
            stopping.raise_if_requested()  # a result cut short by a SIGTERM is no result: the trial is retried
        except optuna.TrialPruned:
            return _tell(study, trial, objective, state=TrialState.PRUNED)
        except optuna.exceptions.UpdateFinishedTrialError:
            # another worker took this trial for a dead one (its heartbeat went stale: a paused process, an outage
            # this one rode out) and queued its configuration again, which the retry measures: go on
            log.warning("trial %d was ended by another worker as stale; its retry measures it", trial.number)
            return study._storage.get_trial(trial._trial_id)
        except (EngineNotInstalled, UsageError) as exc:  # the machine's or the client's fault: counts no launch
            outcome = FailureKind.NOT_INSTALLED if isinstance(exc, EngineNotInstalled) else FailureKind.CLIENT_INPUT
            trial_queue.requeue_not_installed(study, _tell_failed(study, trial, objective, exc, outcome=outcome))
            raise AutotuneError(f"trial {trial.number}: {exc}") from exc
        except AutotuneError as exc:
            stopping.raise_if_requested()  # an engine killed by the same SIGTERM is not a failure of its configuration
            _tell_failed(study, trial, objective, exc)
            raise AutotuneError(f"trial {trial.number}: {exc}") from exc
        except Exception as exc:
            _tell_failed(study, trial, objective, exc)  # a bug in the tuner, not a property of the configuration
            raise
        return _tell(study, trial, objective, values)


def _tell(study, trial, objective: Objective, values=None, state=None) -> optuna.trial.FrozenTrial:
    """Tell Optuna the trial's result, then write its dashboard note (from the finished trial, pruned ones too)."""
    # skip_if_finished: a write that reached the database just as its connection died is made again by the retry
    frozen = study.tell(trial, values, state=state, skip_if_finished=True)
    save_trial_note(trial, trial_note(frozen, objective.space.objective))
    return frozen


def _tell_failed(study, trial, objective: Objective, exc: Exception,
                 outcome: str = Outcome.ERROR) -> optuna.trial.FrozenTrial:  # fmt: skip
    # before the tell: a finished trial's attributes are read-only
    records.write(trial, outcome=outcome, error=shorten(f"{type(exc).__name__}: {exc}", REASON_LIMIT))
    return _tell(study, trial, objective, state=TrialState.FAIL)


def fail_stale_trials(options: RunOptions, study: optuna.Study) -> None:
    """``autotune.orphans.end_dead_workers_trials``, under the study's slot lock: two workers that both saw a trial
    stale would both retry it, and the study would run more trials than its budget."""
    with slot_lock(options.storage, options.name, options.studies_dir):
        end_dead_workers_trials(study)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
