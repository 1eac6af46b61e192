"""A dead tuner's trials: kill the engine it left running, count that engine's time, retry the configuration.

A trial records which ``study run`` process runs it (``worker_process``: host, boot, pid and that process's start
time) and the engine it launched (``engine_process``: its process group and when the launch began). A tuner killed
outright (SIGKILL, out of memory) leaves both behind with its trial RUNNING. Two ways such a trial is ended:

- on the same host, at once: the next run finds the tuner's process gone (or its pid given to a later process: another
  start time) before it launches anything, and ends the trial; the orphan would otherwise hold its memory beside the
  next launch until the heartbeat's grace period ran out.
- from any host, once its heartbeat is stale (a host that died, a worker on another machine): the grace period.

Either way the same steps, under the study's budget lock (so a trial is ended and retried once): kill the recorded
engine group if it still runs here, record the trial's node-minutes as its engine's time (launch to kill, or to the
last heartbeat where the kill time is unknown), fail it, and retry its configuration as a queued trial (Optuna's
``RetryHeartbeatStaleTrialCallback``).
"""

from __future__ import annotations

import copy
import logging
import os
import time

import optuna
import pydantic
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import optuna_private
from autotune.serving.process import group_record, kill_group, recorded_group_alive

log = logging.getLogger(__name__)
# A retry must not inherit from the trial it replaces that trial's tuner, engine and cost (a retry popped by a live
# worker must not look like the dead worker's trial until it records its own): it keeps only what marks a fixed
# configuration (``autotune.records.FIXED_MARKS``), not the dead attempt's results, log or failure, which would show on
# the retry (and keep a good result out of the ranking).


class TunerProcess(pydantic.BaseModel):
    """The ``study run`` process running a trial: enough to tell, on its host, that it has exited, even where its pid
    has since been given to another process (the start time differs)."""

    model_config = pydantic.ConfigDict(frozen=True)
    host: str
    boot_id: str | None
    pid: int
    started: int | None  # clock ticks since boot (/proc/PID/stat)

    @classmethod
    def this_one(cls) -> TunerProcess:
        # group_record reads what identifies any process by its id (host, boot, start time), a group's leader or not
        record = group_record(os.getpid())
        return cls(host=record["host"], boot_id=record["boot_id"], pid=os.getpid(), started=record["started"])

    def gone_from_this_host(self) -> bool:
        """Whether it ran on this machine (same host, same boot) and has exited; False for another machine's, whose
        trials only their heartbeat can tell about."""
        now = group_record(self.pid)
        if self.host != now["host"] or self.boot_id is None or self.boot_id != now["boot_id"]:
            return False
        return now["started"] != self.started


class EngineProcess(pydantic.BaseModel):
    """A trial's engine launch: the process group a restarted tuner kills (``autotune.serving.process.group_record``), and when
    it ran (epoch seconds, this host's clock)."""

    pgid: int
    host: str
    boot_id: str | None
    started: int | None  # the group leader's start, clock ticks since boot: tells a recycled group id apart
    launched_at: float | None = None  # when the launch began (None in studies recorded before it was)
    ended_at: float | None = None  # when a tuner that found it orphaned killed it (or its last heartbeat)

    @classmethod
    def launched(cls, pgid: int, launched_at: float) -> EngineProcess:
        return cls(**group_record(pgid), launched_at=launched_at)

    @classmethod
    def of(cls, trial: FrozenTrial) -> EngineProcess | None:
        try:
            return cls.model_validate(records.TrialRecord.of(trial).engine_process)
        except pydantic.ValidationError:  # none recorded (None), or an older study's record
            return None

    def alive_here(self) -> bool:
        """Whether its group still runs on this machine, the same processes."""
        return recorded_group_alive(self.model_dump())

    def node_minutes(self) -> float | None:
        """The engine's time, as a trial's node-minutes count a real engine (its wall time); None when unknown."""
        if self.launched_at is None or self.ended_at is None:
            return None
        return round(max(0.0, self.ended_at - self.launched_at) / 60, 3)


def mark_worker(trial: optuna.Trial) -> None:
    """Record which process runs ``trial``: ``worker`` to read (host:pid), ``worker_process`` to check."""
    tuner = TunerProcess.this_one()
    records.write(trial, worker=f"{tuner.host}:{tuner.pid}", worker_process=tuner.model_dump())


def end_dead_workers_trials(study: optuna.Study) -> list[int]:
    """End the study's RUNNING trials whose tuner is gone from this host, or whose heartbeat is stale: kill, count,
    fail, retry (the module docstring). Call it under the study's budget lock. Returns the numbers of the trials ended."""
    return [trial.number for trial in dead_workers_trials(study) if _end(study, trial)]


def end_own_trials(study: optuna.Study) -> list[int]:
    """End the RUNNING trials this process runs, as a dead worker's are (kill, count, fail, retry): a ``study run``
    interrupted (Ctrl-C) leaves no trial RUNNING; the next run measures the configuration again. Returns their
    numbers."""
    this_one = TunerProcess.this_one().model_dump()
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    own = [t for t in running if records.TrialRecord.of(t).worker_process == this_one]
    return [trial.number for trial in own if _end(study, trial, why="interrupted")]


def dead_workers_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's RUNNING trials whose tuner is gone from this host, or whose heartbeat is stale (only reads: a worker
    looks outside the budget lock first, and takes the lock to end them only when there are any)."""
    stale = set(optuna_private.stale_trial_ids(study))
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return [trial for trial in running if optuna_private.trial_id_of(trial) in stale or _tuner_gone(trial)]


class KillOrphanAndRetry:
    """For a trial whose worker died: kill the engine it left running, then retry its configuration (the last step of
    ``end_dead_workers_trials``; also the storage's stale-trial callback, for Optuna's own ``fail_stale_trials``)."""

    def __init__(self) -> None:
        self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback()

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        engine = EngineProcess.of(trial)
        if engine is not None:
            _kill_orphan(trial.number, engine)
        retried = copy.copy(trial)
        retried.user_attrs = records.fixed_marks(trial)
        self.retry(study, retried)


def _tuner_gone(trial: FrozenTrial) -> bool:
    try:
        tuner = TunerProcess.model_validate(records.TrialRecord.of(trial).worker_process)
    except pydantic.ValidationError:  # not recorded yet (None: just popped), or an older study's trial
        return False
    return tuner.gone_from_this_host()


def _kill_orphan(number: int, engine: EngineProcess) -> float | None:
    """Kill the engine's group where it still runs here; when it was killed, or None when it was not running here."""
    if not engine.alive_here():
        return None
    log.warning("trial %d: killing the engine process group %d its dead worker left", number, engine.pgid)
    kill_group(engine.pgid)
    return time.time()


def _end(study: optuna.Study, trial: FrozenTrial, why: str = "its worker is gone") -> bool:
    """Kill the trial's engine (where it runs here), record its node-minutes, fail it and retry it; False when its own
    worker finished it meanwhile."""
    storage, engine = optuna_private.storage_of(study), EngineProcess.of(trial)
    trial_id = optuna_private.trial_id_of(trial)
    try:
        if engine is not None:
            # gone already, or on another machine: it ran at least until the trial's last heartbeat
            ended_at = _kill_orphan(trial.number, engine) or optuna_private.last_heartbeat(storage, trial_id)
            engine = engine.model_copy(update={"ended_at": ended_at})
            records.write_stored(storage, trial_id, engine_process=engine.model_dump())
            if (minutes := engine.node_minutes()) is not None and not records.is_simulated(trial):
                # a simulated trial's node-minutes are the space's virtual costs (autotune.search.objective), not its time
                records.write_stored(storage, trial_id, node_minutes=minutes)
        if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
            return False
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    log.warning("trial %d: %s; failed, and retried as a new trial", trial.number, why)
    KillOrphanAndRetry()(study, storage.get_trial(trial_id))
    return True
