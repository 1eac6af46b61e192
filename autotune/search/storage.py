"""A study's storage: its URL checked before anything connects, and its calls kept going through an outage.

A URL that cannot work is one line saying what is wrong (in-memory SQLite is refused: a study must outlive the
process). Once a storage is open, a call that fails for a connection reason (PostgreSQL restarting or stopped, the
network gone) is retried with backoff for ``AUTOTUNE_STORAGE_RETRY_S`` seconds (default 120) while the engine keeps
running; a worker that gives up stops with one line and leaves its trial RUNNING, so that it goes stale and is
retried. A SQLite file that can no longer be written (disk full, read-only) is one line with the fix at once: waiting
does not free a disk; one that is empty or damaged is one line too (``autotune.search.study_file``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import sqlalchemy
from sqlalchemy.engine import URL, make_url

from autotune.errors import AutotuneError
from autotune.records import optuna_private
from autotune.search.study_file import damaged, make_whole, refuse_empty, sqlite_path
from autotune.settings import Settings
from autotune.space.redact import mask_url
from autotune.text import shorten

log = logging.getLogger(__name__)
_CREATE_ATTEMPTS = 5
_CONNECT_TIMEOUT_S = 10  # a host that does not answer is an outage to retry, not a call that hangs for minutes
_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # then every 4 s until the storage answers or the retry time is spent
_CONNECTION_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                      sqlalchemy.exc.DisconnectionError)  # fmt: skip
# SQLite's ways of saying that the file cannot be written, whatever the wait: the disk is full or read-only
_SQLITE_UNWRITABLE = ("database or disk is full", "readonly database", "disk i/o error", "unable to open database")
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
# a failed connection to PostgreSQL, as libpq words it: what is wrong, and the fix
_CONNECT_FAILURES = (
    (r'database "(?P<name>[^"]+)" does not exist', "database '{name}' does not exist on {where}",
     "create it (createdb -h {host} -p {port} {name}) or correct the database name in the URL"),
    (r'(password authentication failed for user|role) "(?P<name>[^"]+)"', "{where} refused user '{name}'",
     "correct the user and password in the URL"),
    (r"no pg_hba\.conf entry", "{where} does not let this host in (pg_hba.conf)",
     "allow this host in the server's pg_hba.conf, or connect from one it allows"),
    (r"Connection refused", "nothing accepts connections at {where} (connection refused)",
     "start PostgreSQL there, or correct the host and port in the URL"),
    (r"resolve host|translate host name", "unknown host '{host}'", "correct the host in the URL"),
    (r"timeout expired", f"no answer from {{where}} within {_CONNECT_TIMEOUT_S} s",
     "check that the host is up and reachable, or correct the host and port in the URL"),
)  # fmt: skip


class _NoFallbackNoise(logging.Filter):
    """Optuna logs a connection lost mid-query in a dozen lines, then fails anyway: the retry says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Caught an error from sqlalchemy") and "connection" in message)


logging.getLogger(optuna_private.RDB_STORAGE_LOGGER).addFilter(_NoFallbackNoise())


class StorageLost(AutotuneError):
    """The storage stopped answering and did not come back within the retry time (the worker stops)."""


class StorageUnwritable(AutotuneError):
    """The storage's file (or any file of the study) cannot be written: the disk is full or read-only."""


def unwritable(exc: OSError) -> StorageUnwritable | None:
    """A file write that failed because its disk is full or read-only, as the one-line error; else None."""
    if exc.errno not in _DISK_ERRNOS:
        return None
    where = Path(exc.filename).parent if exc.filename else "the studies directory"
    return StorageUnwritable(f"cannot write {exc.filename or 'a file of the study'}: {exc.strerror}; fix: free "
                             f"space on the disk of {where} (or make it writable), then rerun the same command: the "
                             "study resumes")  # fmt: skip


def check_url(url: str) -> URL:
    """The storage URL, parsed, or an error naming what is wrong with it (before anything connects).

    Raises:
        AutotuneError: not a URL, a malformed host or port, in-memory SQLite, a missing directory of a SQLite file,
            a database kind whose driver is not installed.
    """
    masked = mask_url(url)
    try:
        parsed = make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        problem = (
            "not a database URL" if isinstance(exc, sqlalchemy.exc.ArgumentError) else f"malformed host or port ({exc})"
        )
        raise AutotuneError(f"storage {masked}: {problem}; fix: e.g. postgresql+psycopg://USER@HOST:5432/DB or "
                            "sqlite:///path/to/study.db (an IPv6 host in brackets: [::1])") from None  # fmt: skip
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise AutotuneError(f"storage {masked}: port {parsed.port} out of range; fix: a port from 1 to 65535")
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_file(parsed, masked)
    _check_driver(parsed, masked)
    return parsed


def _check_sqlite_file(parsed: URL, masked: str) -> None:
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:") or parsed.query.get("mode") == "memory":
        raise AutotuneError(f"storage {masked}: an in-memory SQLite database ends with the process, and a study must "
                            "outlive it; fix: a file, e.g. sqlite:///studies/NAME.db")  # fmt: skip
    directory = Path(database.removeprefix("file:")).parent
    if directory.is_dir():
        return
    studies_dir = Settings().studies_dir
    if directory.resolve() == studies_dir.resolve():  # the default storage's: ours to make
        directory.mkdir(parents=True, exist_ok=True)
        return
    raise AutotuneError(f"storage {masked}: directory {directory} does not exist; fix: create it "
                        f"(mkdir -p {directory}) or correct the path")  # fmt: skip


def _check_driver(parsed: URL, masked: str) -> None:
    try:
        parsed.get_dialect().import_dbapi()
    except sqlalchemy.exc.NoSuchModuleError:
        raise AutotuneError(f"storage {masked}: unknown database kind {parsed.drivername!r}; fix: "
                            "postgresql+psycopg://... or sqlite:///...") from None  # fmt: skip
    except ImportError as exc:
        fix = f"install the Python driver of {parsed.drivername} (module {exc.name})"
        if parsed.get_backend_name() == "postgresql":  # the extra only where psycopg really cannot be imported
            try:
                importlib.import_module("psycopg")
                fix = "write postgresql+psycopg:// (psycopg is installed)"
            except ImportError:
                fix = "install the postgres extra: pip install 'autotune[postgres]'"
        raise AutotuneError(f"storage {masked}: driver {parsed.drivername!r} not installed; fix: {fix}") from None


def _engine_kwargs(parsed: URL) -> dict:
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": _CONNECT_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def open_storage(url: str, heartbeat_s: int | None = None, on_stale_trial: Callable | None = None,
                 retry_s: float | None = None) -> RetryingStorage:  # fmt: skip
    """An RDB storage with heartbeats (``on_stale_trial``: what to do with a dead worker's trial) whose calls ride
    out an outage for ``retry_s`` seconds (default ``AUTOTUNE_STORAGE_RETRY_S``); a failure to connect is one line
    (password masked), at once: a wrong URL is not an outage.

    Raises:
        AutotuneError: the URL cannot work, or the storage cannot be reached (says why: refused, no such database,
            credentials...).
    """
    parsed = check_url(url)
    kwargs = {"heartbeat_interval": heartbeat_s or None, "grace_period": (heartbeat_s or None) and 3 * heartbeat_s,
              "heartbeat_stale_trial_callback": on_stale_trial if heartbeat_s else None,
              "engine_kwargs": _engine_kwargs(parsed)}  # fmt: skip
    retry_s = Settings().storage_retry_s if retry_s is None else retry_s
    if (path := sqlite_path(parsed)) is not None:
        refuse_empty(path)
        make_whole(path, kwargs["engine_kwargs"])
    try:
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                return RetryingStorage(url, retry_s, **kwargs)
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as exc:
                # two workers creating the schema of a new database at once: one wins, the other retries (SQLite
                # says "table ... already exists")
                raced = isinstance(exc, sqlalchemy.exc.IntegrityError) or "already exists" in str(exc)
                if not raced or attempt == _CREATE_ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:  # Optuna wraps a commit's
        if path is not None and (error := damaged(exc, path)):
            raise error from None
        if not isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
            raise
        raise AutotuneError(f"cannot open storage {mask_url(url)}: {_connect_failure(exc, parsed)}") from None
    raise AssertionError("unreachable")


def _connect_failure(exc: sqlalchemy.exc.SQLAlchemyError, parsed: URL) -> str:
    """What is wrong and its fix, for a storage that could not be opened."""
    message = str(getattr(exc, "orig", None) or exc)
    host, port = parsed.host or "localhost", parsed.port or 5432
    for pattern, what, fix in _CONNECT_FAILURES:
        if found := re.search(pattern, message):
            fields = {"name": found.groupdict().get("name"), "host": host, "port": port, "where": f"{host}:{port}"}
            return f"{what.format(**fields)}; fix: {fix.format(**fields)}"
    if unwritable_reason := _sqlite_unwritable(exc, parsed):
        return f"{unwritable_reason}; fix: make {Path(parsed.database).parent} writable (and not full)"
    return shorten(message.splitlines()[0], 200) if message else type(exc).__name__


def _sqlite_unwritable(exc: BaseException, parsed: URL) -> str | None:
    """SQLite's message where the error (or what it wraps) says its file cannot be written, else None."""
    if parsed.get_backend_name() != "sqlite":
        return None
    cause = _root(exc, sqlalchemy.exc.OperationalError)
    message = str(getattr(cause, "orig", "") or "")
    return message if cause is not None and any(s in message.lower() for s in _SQLITE_UNWRITABLE) else None


def _root(exc: BaseException, kinds: type | tuple[type, ...]) -> BaseException | None:
    """The error of ``kinds`` that ``exc`` is or came from: Optuna wraps a failed commit in StorageInternalError, and
    a connection lost mid-query surfaces as SQLAlchemy's PendingRollbackError, raised while handling the loss."""
    seen = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def retry_backoff(attempt: int) -> float:
    """How long to wait before the next try of a call that failed ``attempt + 1`` times for a connection reason."""
    return _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]


class _Outage:
    """What one storage knows about its connection, across its threads: since when its calls fail, when it answered
    again, and the error it gave up with (every later call fails with it at once: the worker is stopping)."""

    def __init__(self, parsed: URL, retry_s: float) -> None:
        self.parsed, self.retry_s = parsed, retry_s
        self.file = sqlite_path(parsed)  # a SQLite study's file: named where it is damaged
        self.lock = threading.Lock()
        self.failing_since: float | None = None
        self.answered_again: float | None = None  # when it answered after an outage, or after a silence
        self.answered_last: float | None = None
        self.silence_s = math.inf  # a gap between answers this long is a silence (a heartbeat's grace period)
        self.gave_up: AutotuneError | None = None

    def call(self, function: Callable, *args, **kwargs):
        """``function(*args, **kwargs)``, retried while it fails for a connection reason, for ``retry_s`` seconds
        from the first failure of the outage."""
        for attempt in itertools.count():
            try:
                return self.once(function, *args, **kwargs)
            except _CONNECTION_ERRORS:
                since = self.failing_since
                if since is not None and time.monotonic() - since >= self.retry_s:
                    raise self._give_up(StorageLost(
                        f"storage {self.parsed} unreachable for {self.retry_s:g} s; fix: bring it back, then rerun "
                        "the same command: the study resumes and retries this worker's trial")) from None  # fmt: skip
                time.sleep(retry_backoff(attempt))
        raise AssertionError("unreachable")

    def once(self, function: Callable, *args, **kwargs):
        """One try, noting how it went; raises the connection error it failed with (unwrapped from Optuna's)."""
        if self.gave_up is not None:
            raise self.gave_up
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            if self.file is not None and (error := damaged(exc, self.file)):
                raise self._give_up(error) from None
            if reason := _sqlite_unwritable(exc, self.parsed):
                raise self._give_up(StorageUnwritable(
                    f"cannot write the study's storage {self.parsed.database}: {reason}; fix: free space on its disk "
                    "(or make its directory writable), then rerun the same command: the study resumes")) from None  # fmt: skip
            cause = None if self.parsed.get_backend_name() == "sqlite" else _root(exc, _CONNECTION_ERRORS)
            if cause is None:
                raise
            self._failed(cause)
            raise cause from None
        now, recovered = time.monotonic(), self.failing_since is not None
        with self.lock:
            # a silence: this process asked nothing for a grace period (it waited through the outage on the budget
            # lock, say), so it could not have watched the other workers' heartbeats meanwhile either
            if recovered or (self.answered_last is not None and now - self.answered_last > self.silence_s):
                self.failing_since, self.answered_again = None, now
            self.answered_last = now
        if recovered:
            log.warning("storage %s answers again", self.parsed)
        return result

    def _failed(self, cause: BaseException) -> None:
        with self.lock:
            first = self.failing_since is None
            if first:
                self.failing_since = time.monotonic()
        if first:
            reason = shorten(str(getattr(cause, "orig", None) or cause).splitlines()[0], 160)
            log.warning("storage %s unreachable (%s); retrying for up to %g s", self.parsed, reason,
                        self.retry_s)  # fmt: skip

    def _give_up(self, error: AutotuneError) -> AutotuneError:
        with self.lock:
            self.gave_up = self.gave_up or error
        return self.gave_up

    def answered_within(self, seconds: float) -> bool:
        """Whether the storage came back from an outage, or this process from a silence, less than ``seconds`` ago."""
        return self.answered_again is not None and time.monotonic() - self.answered_again < seconds


# What Optuna's cached storage and studies call on an RDB storage (the cache sits above these retries)
_RETRIED_CALLS = optuna_private.RDB_STORAGE_CALLS


class RetryingStorage(optuna_private.StaleTrialsRDBStorage):
    """Optuna's RDB storage whose calls ride out an outage (see the module). A write whose commit reached the
    database just as the connection died is made again: at worst a trial that goes stale and is retried."""

    def __init__(self, url: str, retry_s: float, **kwargs) -> None:
        self.outage = _Outage(make_url(url), retry_s)
        super().__init__(url, **kwargs)
        self.outage.silence_s = self.grace_period or math.inf

    def beat(self, trial_id: int) -> bool:
        """Record the trial's heartbeat once; False where the storage did not answer (the caller tries again)."""
        try:
            self.outage.once(super().record_heartbeat, trial_id)
        except _CONNECTION_ERRORS:
            return False
        return True

    def find_stale_trial_ids(self, study_id: int) -> list[int]:
        # Right after an outage (or this process's own silence) every worker's heartbeat is old: the live ones are
        # given a grace period to beat again, or the first worker back would fail (and rerun) all the others' trials.
        # Asked first: this very call may be the one that ends a silence.
        stale = self.outage.call(super().find_stale_trial_ids, study_id)
        return [] if self.grace_period and self.outage.answered_within(self.grace_period) else stale


def _retried(name: str) -> Callable:
    @functools.wraps(getattr(optuna.storages.RDBStorage, name))
    def call(self: RetryingStorage, *args, **kwargs):
        # Optuna's method looked up at each call, not once at import: what patches RDBStorage (a test's fault
        # injection, a profiler) patches this storage too
        return self.outage.call(getattr(optuna.storages.RDBStorage, name), self, *args, **kwargs)

    return call


for _name in _RETRIED_CALLS:
    setattr(RetryingStorage, _name, _retried(_name))


@contextlib.contextmanager
def advisory_lock(engine: sqlalchemy.Engine, key: int, retry_s: float | None = None) -> Iterator[None]:
    """PostgreSQL's session lock ``key``, taken through an outage as storage calls are. A connection that dies while
    it is held has released it (the server ends the session's locks): its unlock is then moot."""
    outage = _Outage(engine.url, Settings().storage_retry_s if retry_s is None else retry_s)
    connection = outage.call(_locked_connection, engine, key)
    try:
        yield
    finally:
        try:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except _CONNECTION_ERRORS:
            connection.invalidate()
        finally:
            connection.close()


def _locked_connection(engine: sqlalchemy.Engine, key: int) -> sqlalchemy.Connection:
    connection = engine.connect()
    try:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
    except BaseException:
        connection.close()
        raise
    return connection


def lock_engine_kwargs(url: str) -> dict:
    """How to make an engine for the slot lock: as the storage's, with one pooled connection."""
    return {**_engine_kwargs(make_url(url)), "pool_size": 1}
