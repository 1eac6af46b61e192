"""The workers of a study: each starts trials within the budget and runs them, alone or beside others.

Workers start trials under the budget lock (``autotune.search.locks``: a PostgreSQL advisory lock, or a file lock for
SQLite) only while the launches so far and the trials running are fewer than the budget (``autotune.search.trial_queue``),
so workers at once never launch more than asked; a trial that launches nothing (a duplicate, a rejection) does not
count, and a study whose space is exhausted stops sooner. Heartbeats mark a worker's running trial; when a worker
dies, the next one to start finds the trial stale, kills the engine process group it left (recorded in the trial),
and queues its configuration again; on the dead worker's own host the next run does so at once, before it launches
anything, and counts the engine's time (``autotune.search.orphans``). ``run_node`` runs several workers of one node, their
trials leasing disjoint GPUs.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune import records
from autotune.errors import AutotuneError, EngineNotInstalled, FailureKind, UsageError
from autotune.evidence.notes import save_trial_note, trial_note
from autotune.records import Outcome, optuna_private
from autotune.search import budget, names, stopping, trial_queue
from autotune.search.backends import engine_for
from autotune.search.heartbeat import Heartbeat
from autotune.search.improvement import chance_to_improve
from autotune.search.locks import budget_lock
from autotune.search.objective import REASON_LIMIT, Objective
from autotune.search.orphans import dead_workers_trials, end_dead_workers_trials, end_own_trials, mark_worker
from autotune.search.status import StatusCallback, no_status
from autotune.search.storage import unwritable
from autotune.search.study import (
    DEFAULT_TRIALS,
    PreparedStudy,
    RunOptions,
    after_trial,
    default_storage,
    node_minutes_spent,
    prepare_study,
)
from autotune.search.tuner_lifeline import die_with
from autotune.settings import Settings
from autotune.space.files import find_space, load_space
from autotune.space.schema import ENUMERATION_LIMIT, SearchSpace
from autotune.text import shorten

log = logging.getLogger(__name__)
# how often a worker with no room left in the budget looks whether the trials still running have ended
_IDLE_POLL_S = 1.0
_PR_SET_PDEATHSIG = 1  # Linux prctl: the signal a process gets when its parent dies


def run_study(space: str | Path = "quickstart", *, study: str | None = None, n_trials: int | None = None,
              storage: str | None = None, seed: int | None = None, timeout_s: float | None = None,
              on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None) -> optuna.Study:  # fmt: skip
    """Run a study from Python, as ``autotune study run`` does with one worker (and the same settings: the studies
    directory and storage of ``AUTOTUNE_STUDIES_DIR`` and ``AUTOTUNE_STORAGE``).

    Args:
        space: a space file or a shipped space's name (``autotune space list``); the quickstart needs no GPU.
        study: the study's name (default: the space's name); an existing study of that name is resumed.
        n_trials: the study's budget of launches in all (default: the space's ``trials``, else 8).
        storage: an Optuna storage URL (default: the study's SQLite file in the studies directory).
        seed: the sampler's seed (same seed, same suggestions).
        timeout_s: no trial starts after this many seconds.
        on_trial: called with the study and each trial as it finishes.

    Returns:
        The study; ``autotune.best_trial(study)`` is its best feasible trial.

    Raises:
        AutotuneError: the space is invalid, an engine is missing, the storage cannot be opened, a trial hit a bug in
            the machine's set-up, or a SIGTERM stopped the run.
    """
    space_file = find_space(space)
    loaded = load_space(space_file)
    name = names.study_name(study if study is not None else loaded.name or space_file.stem, "study")
    settings = Settings()
    options = RunOptions(name=name, storage=storage or settings.storage or default_storage(name, settings.studies_dir),
                         studies_dir=settings.studies_dir, n_trials=n_trials or loaded.trials or DEFAULT_TRIALS,
                         timeout_s=timeout_s, seed=seed, heartbeat_s=settings.heartbeat_s,
                         n_trials_given=True if n_trials else None)  # fmt: skip
    return run_trials(prepare_study(loaded, space_file, options), on_trial)


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
    except KeyboardInterrupt:
        # the engine is down already (its context manager took it down on the way out); its trial is ended and
        # queued again here, under the budget lock, so that no trial stays RUNNING until a heartbeat goes stale
        with budget_lock(prepared.options.storage, prepared.options.name, prepared.options.studies_dir):
            end_own_trials(study)
        raise
    return study


def _run_trials_until_done(prepared: PreparedStudy, on_trial, started: float) -> None:
    study, options = prepared.study, prepared.options
    while options.timeout_s is None or time.monotonic() - started < options.timeout_s:
        stopping.raise_if_requested()  # a SIGTERM whose exception was swallowed where it landed
        if options.budget_node_minutes is not None and node_minutes_spent(study) >= options.budget_node_minutes:
            log.info("study %s: node-minute budget spent", options.name)
            break
        # looked at outside the budget lock (it reads every trial): a worker that starts one more trial meanwhile
        # finds a duplicate, which launches nothing
        if (reason := budget.exhausted(study, prepared.catalogue)) is not None:
            log.info("study %s: space exhausted: %s", options.name, reason)
            break
        # looked for outside the budget lock, which 16 workers wait for in turn; ended under it (once), before the
        # trial starts: a dead tuner's engine on this host is gone before this worker launches anything
        dead = bool(dead_workers_trials(study))
        with budget_lock(options.storage, options.name, options.studies_dir):
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
        after_trial(prepared, frozen)  # the warm prior and the calibrated one: their next pick
        if on_trial:
            on_trial(study, frozen)
        if unlikely_to_improve(prepared):
            break


def unlikely_to_improve(prepared: PreparedStudy) -> bool:
    """Whether ``--stop-when-unlikely P`` stops the study now: the chance to improve on the incumbent is below P."""
    threshold = prepared.options.stop_when_unlikely
    if threshold is None:
        return False
    chance = chance_to_improve(prepared.study, prepared.objective.space)
    if chance is None or not chance.below(threshold):
        return False
    log.info("study %s: %s, below %s: stopping", prepared.options.name, chance.text(), threshold)
    return True


def _refine(prepared: PreparedStudy) -> None:
    """After a duplicate: an untried neighbour of the incumbent is queued (``autotune.search.refine``), under the budget lock,
    where no other worker's refinement queues the same one meanwhile."""
    options = prepared.options
    with budget_lock(options.storage, options.name, options.studies_dir):
        neighbour = prepared.objective.neighbour_after_duplicate(prepared.study)
        if neighbour is not None:
            trial_queue.queue_within_budget(
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
    each = dataclasses.replace(options, n_trials=budget.study_budget(study), more_trials=0, n_trials_given=None)
    # forked by a server process that imported autotune once: no storage connection or thread of ours inherited,
    # and no worker pays for the imports again
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["autotune.search.workers", "autotune.cli.study"])
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
    """One worker of ``run_node``: killed with ``run_node``'s process (even by SIGKILL), so no worker runs on
    unwatched. Its parent is the fork server (PDEATHSIG below), which a SIGKILLed ``run_node`` leaves running as long
    as a worker does, so each worker also watches ``parent`` itself (``autotune.search.tuner_lifeline``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    die_with(parent)  # its parent, the fork server, outlives a SIGKILLed run_node (autotune.search.tuner_lifeline)
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
    with Heartbeat(storage, optuna_private.trial_id_of(trial), heartbeat_s):
        try:
            values = objective(trial)
            stopping.raise_if_requested()  # a result cut short by a SIGTERM is no result: the trial is retried
        except optuna.TrialPruned:
            return _tell(study, trial, objective, state=TrialState.PRUNED)
        except optuna.exceptions.UpdateFinishedTrialError:
            # another worker took this trial for a dead one (its heartbeat went stale: a paused process, an outage
            # this one rode out) and queued its configuration again, which the retry measures: go on
            log.warning("trial %d was ended by another worker as stale; its retry measures it", trial.number)
            return optuna_private.storage_of(study).get_trial(optuna_private.trial_id_of(trial))
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
