"""Create or resume a study and run trials in it, alone or beside other workers on the same storage.

The trial budget is a set of WAITING trials ("slots") created with the study: each engine's baseline (its default
configuration in the space, the seed study's step 1) and N − baselines empty slots the sampler fills. Workers pop
slots under a lock (a PostgreSQL advisory lock, or a file lock for SQLite), so two workers never make more trials than
asked. Heartbeats mark a worker's running trial; when a worker dies, the next one to start finds the trial stale,
kills the engine process group it left (recorded in the trial), and retries the configuration in a new slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import socket
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

from autotune.engines import broken_rules
from autotune.errors import AutotuneError
from autotune.notes import save_trial_note, trial_note
from autotune.objective import Objective, Outcome, TrialEnvironment
from autotune.prior import prior_model, rank
from autotune.redact import mask_url
from autotune.server import check_executable, kill_group, recorded_group_alive
from autotune.space import ENGINE_PARAM, ENUMERATION_LIMIT, SearchSpace

log = logging.getLogger(__name__)
# We drive ask/tell ourselves (to pop slots under a lock) and record heartbeats with our own thread.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
_READY_ATTR, _BUDGET_ATTR = "autotune_slots_ready", "autotune_n_trials"
_READY_WAIT_S = 60.0
_CREATE_ATTEMPTS = 5
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # which `study run` process ran a trial


@dataclass(frozen=True)
class RunOptions:
    name: str
    storage: str
    studies_dir: Path
    n_trials: int  # the study's budget of trials in all (baselines included), not trials to add
    more_trials: int = 0  # instead of n_trials: add this many to the budget an existing study has (else n_trials)
    timeout_s: float | None = None
    seed: int | None = None
    heartbeat_s: int = 10
    executables: dict[str, list[str]] | None = None
    budget_node_minutes: float | None = None  # stop starting trials once the study's trials cost this much


def default_storage(name: str, studies_dir: Path) -> str:
    return f"sqlite:///{studies_dir / name}.db"


def open_storage(url: str, heartbeat_s: int | None = None) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats; a failure to connect is one clear line (password masked)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    callback = _KillOrphanAndRetry() if heartbeat_s else None
    kwargs = {"heartbeat_interval": heartbeat_s or None, "grace_period": (heartbeat_s or None) and 3 * heartbeat_s,
              "heartbeat_stale_trial_callback": callback, "engine_kwargs": {"pool_pre_ping": True}}  # fmt: skip
    try:
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                return optuna.storages.RDBStorage(url, **kwargs)
            except sqlalchemy.exc.IntegrityError:
                # two workers creating the schema of a new database at once: one wins, the other retries
                if attempt == _CREATE_ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if isinstance(exc, ImportError) or "psycopg" in reason:
            reason += "; install the postgres extra: pip install 'autotune[postgres]'"
        raise AutotuneError(f"cannot open storage {mask_url(url)}: {reason}") from None


class _KillOrphanAndRetry:
    """For a trial whose worker died: kill the engine it left running, then retry its configuration."""

    def __init__(self) -> None:
        self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback()

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        record = trial.user_attrs.get("engine_process")
        if recorded_group_alive(record):
            log.warning("trial %d: killing the engine process group %d its dead worker left", trial.number,
                        record["pgid"])  # fmt: skip
            kill_group(record["pgid"])
        self.retry(study, trial)


def baseline_params(space: SearchSpace, engine: str) -> dict:
    """The Optuna params of an engine's default configuration in the space (its launch; loads are swept)."""
    params = {name: param.default_value() for name, param in space.launch_params(engine).items()}
    return _with_engine(space, engine, params)


def _with_engine(space: SearchSpace, engine: str, params: dict) -> dict:
    return {ENGINE_PARAM: engine, **params} if len(space.engines) > 1 else params


def make_sampler(space: SearchSpace, seed: int | None) -> optuna.samplers.BaseSampler:
    """The space's ``search.sampler``: TPE (multivariate, grouped for engine-conditional parameters) or random."""
    if space.search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, group=True, n_startup_trials=max(4, len(space.engines) + 2))


def make_pruner(space: SearchSpace) -> optuna.pruners.BasePruner:
    """The space's ``search.pruner``, watching each trial's first benchmark."""
    if space.search.pruner == "none":
        return optuna.pruners.NopPruner()
    # judged only against 3 or more trials measured at the same load and checkpoint (one faster trial is no verdict);
    # the first checkpoints of each load are skipped by the objective (autotune.objective._pruning_hook)
    if space.search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_min_trials=3)
    return optuna.pruners.PercentilePruner(25.0, n_startup_trials=3, n_min_trials=3)


def create_or_load(space: SearchSpace, space_path: Path, options: RunOptions, storage) -> optuna.Study:
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
    priors = _prior_params(space, baselines, options.n_trials - len(baselines))
    for position, (params, predicted) in enumerate(priors, 1):
        study.enqueue_trial(params, user_attrs={"prior": position, "prior_predicted": predicted, "slot": True})
    for _ in range(options.n_trials - len(engines) - len(priors)):
        study.enqueue_trial({}, user_attrs={"slot": True})
    study.set_user_attr(_BUDGET_ATTR, options.n_trials)
    study.set_user_attr(_READY_ATTR, True)
    return study


def _prior_params(space: SearchSpace, baselines: list[dict], room: int) -> list[tuple[dict, float]]:
    """The prior's best-predicted launch configurations (not the baselines), at most ``search.prior_trials``."""
    model = prior_model(space)
    if model is None or room <= 0 or space.search.prior_trials == 0:
        return []
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
    return sum(t.user_attrs.get("node_minutes") or 0.0 for t in study.get_trials(deepcopy=False))


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
    """The study's budget of trials in all (the slots it has made)."""
    return study.user_attrs.get(_BUDGET_ATTR, 0)


def _top_up(study: optuna.Study, n_trials: int) -> None:
    """A later run that asks for more trials than the study's budget adds the difference as slots."""
    budget = study_budget(study)
    for _ in range(max(0, n_trials - budget)):
        study.enqueue_trial({}, user_attrs={"slot": True})
    if n_trials > budget:
        study.set_user_attr(_BUDGET_ATTR, n_trials)


@contextlib.contextmanager
def slot_lock(storage_url: str, study_name: str, studies_dir: Path) -> Iterator[None]:
    """Only one worker at a time checks for a slot and pops it."""
    if storage_url.startswith("postgresql"):
        key = int(hashlib.sha256(study_name.encode()).hexdigest()[:15], 16)
        engine = sqlalchemy.create_engine(storage_url)
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        finally:
            engine.dispose()
        return
    studies_dir.mkdir(parents=True, exist_ok=True)
    with (studies_dir / f".{study_name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Heartbeat:
    """Records the running trial's heartbeat from a thread (study.optimize does this; we drive ask/tell ourselves)."""

    def __init__(self, storage: optuna.storages.RDBStorage, trial_id: int, interval_s: int) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.storage.record_heartbeat(self.trial_id)
            self.stop.wait(self.interval)

    def __enter__(self) -> _Heartbeat:
        if self.interval:  # 0: no heartbeats (a study that no other worker watches, e.g. a benchmark's)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


class _Terminated(BaseException):
    """SIGTERM turned into an exception, so the running engine is taken down by its context manager."""


@dataclass
class PreparedStudy:
    """A study ready to run: checked, opened, with its slots."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    objective: Objective
    options: RunOptions


def prepare_study(space: SearchSpace, space_path: Path, options: RunOptions) -> PreparedStudy:
    """Check what can be checked before any launch, open the storage, create or resume the study.

    Raises:
        AutotuneError: an engine executable is missing, every configuration breaks a rule, the storage cannot be
            opened, or the study was made with another space.
    """
    for engine, section in space.engines.items() if space.simulate is None else ():  # the simulator runs instead
        check_executable(((options.executables or {}).get(engine) or section.executable or [engine])[0])
    _refuse_all_infeasible(space)
    storage = open_storage(options.storage, options.heartbeat_s)
    study = create_or_load(space, space_path, options, storage)
    study_dir = options.studies_dir / options.name
    environment = TrialEnvironment(study_dir, FileSystemArtifactStore(str(_mkdir(study_dir / "artifacts"))),
                                   options.executables or {})  # fmt: skip
    return PreparedStudy(study, storage, Objective(space, environment), options)


def run_trials(prepared: PreparedStudy,
               on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None) -> optuna.Study:  # fmt: skip
    """Run trials until the study's slots are used up (or the timeout); a SIGTERM stops cleanly."""
    study, options = prepared.study, prepared.options
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        while options.timeout_s is None or time.monotonic() - started < options.timeout_s:
            if options.budget_node_minutes is not None and node_minutes_spent(study) >= options.budget_node_minutes:
                log.info("study %s: node-minute budget spent", options.name)
                break
            optuna.storages.fail_stale_trials(study)  # a dead worker's trial goes back to the slots
            with slot_lock(options.storage, options.name, options.studies_dir):
                trial = study.ask() if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) else None
                if trial is not None and options.heartbeat_s:
                    # at once, under the lock: every running trial has a heartbeat that can go stale
                    prepared.storage.record_heartbeat(trial._trial_id)
            if trial is None:
                # no slot left; a trial still running elsewhere may yet go stale and come back to be retried
                if options.heartbeat_s and study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    time.sleep(options.heartbeat_s)
                    continue
                break
            trial.set_user_attr("worker", WORKER)
            frozen = _run_trial(study, prepared.storage, trial, prepared.objective, options.heartbeat_s)
            if on_trial:
                on_trial(study, frozen)
    except _Terminated:
        raise AutotuneError("stopped by SIGTERM; the running trial will be retried by the next `study run`") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return study


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
    with _Heartbeat(storage, trial._trial_id, heartbeat_s):
        try:
            values = objective(trial)
        except optuna.TrialPruned:
            return _tell(study, trial, objective, state=TrialState.PRUNED)
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


def _tell_failed(study, trial, objective: Objective, exc: Exception) -> None:
    trial.set_user_attr("outcome", Outcome.ERROR)  # before the tell: a finished trial's attributes are read-only
    trial.set_user_attr("error", f"{type(exc).__name__}: {exc}"[:500])
    _tell(study, trial, objective, state=TrialState.FAIL)


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
