"""Every private API of Optuna and optuna-dashboard that autotune uses, behind small functions: the one module to
read, and to change, when either package makes a release. No other module of autotune touches a private name of
either (``tests/test_optuna_private.py`` greps for them, checks that each one below exists in the installed
packages, and that those are of the versions tested).

Tested with optuna 5.0.0 and 5.1.0, and optuna-dashboard 0.17.0 to 0.21.0 (``SUPPORTED_OPTUNA``,
``SUPPORTED_OPTUNA_DASHBOARD``): the private names below are the same in all of them.

Optuna's, and why (none has a public equivalent):

- ``Study._storage``, ``Study._study_id``: a study's storage and its id there. autotune writes several attributes in
  one call (below), makes a WAITING trial, and reads stale trials: all through the storage, by the study's id.
- ``Trial._trial_id``, ``FrozenTrial._trial_id``: the id the storage knows a trial by (``number`` counts within a
  study); every storage call about a trial takes it.
- ``Trial._cached_frozen_trial``: the trial's own view of its attributes, updated as ``Trial.set_user_attr`` updates
  it, where autotune writes them in one call instead.
- ``_CachedStorage._backend``: the RDB storage behind the cache that a study's storage is.
- ``BaseStorage.create_new_trial(study_id, template_trial=...)`` through ``Study._storage``: ``enqueue_trial`` makes a
  WAITING trial only with its parameters fixed, ``ask`` a RUNNING one; the sampler's WAITING trial has no public way.
- ``optuna.storages._heartbeat.BaseHeartbeat`` and ``_get_stale_trial_ids`` (of ``_CachedStorage`` and
  ``RDBStorage``): whether a storage records heartbeats, and which RUNNING trials went stale. The public
  ``fail_stale_trials`` fails them at once; autotune first kills the engine they left and counts its time.
- ``optuna.storages._rdb.models`` (``TrialModel``, ``StudyModel``, ``TrialUserAttributeModel``,
  ``StudyUserAttributeModel``, ``StudySystemAttributeModel``, ``TrialHeartbeatModel``),
  ``optuna.storages._rdb.storage._create_scoped_session`` and ``RDBStorage._set_trial_attr_without_commit``: several
  attributes in one transaction (Optuna commits each attribute alone: one storage call each), and the time of a
  trial's last heartbeat (no public read).
- ``RDBStorage``'s private methods that Optuna's cache calls (``_create_new_trial``, ``_set_trial_param``,
  ``_get_trials``, ``_get_best_trial_id``) and ``_get_stale_trial_ids``, which ``autotune.search.storage`` wraps to
  ride out an outage; and the logger of RDBStorage's module (``optuna.storages._rdb.storage``), whose messages about a
  lost connection it quietens.

- the ``fixed_params`` system attribute: where ``Study.enqueue_trial`` keeps a queued trial's parameters. A WAITING
  trial has no ``params`` yet, and Optuna has no public read of what it will be given.

optuna-dashboard's: ``optuna_dashboard._note`` (``note_ver_key``, ``note_str_key_prefix``, ``split_body``), how a
trial's note is kept in the study's system attributes. The public ``save_note`` makes four or more storage calls, two
of which read every trial's note; autotune writes a trial's note in one call that reads that note alone.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.orm
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial
from packaging.specifiers import SpecifierSet
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

SUPPORTED_OPTUNA = SpecifierSet(">=5.0,<5.2")
SUPPORTED_OPTUNA_DASHBOARD = SpecifierSet(">=0.18,<0.22")  # 0.17 works too; its trial cache is process-wide

# Every private name this module uses, for tests/test_optuna_private.py: (module, attribute path) found by import
PRIVATE_SYMBOLS: tuple[tuple[str, str], ...] = (
    ("optuna.storages._heartbeat", "BaseHeartbeat"),
    ("optuna.storages._cached_storage", "_CachedStorage._get_stale_trial_ids"),
    ("optuna.storages._rdb.storage", "_create_scoped_session"),
    ("optuna.storages._rdb.storage", "RDBStorage._set_trial_attr_without_commit"),
    ("optuna.storages._rdb.storage", "RDBStorage._get_stale_trial_ids"),
    ("optuna.storages._rdb.storage", "RDBStorage._create_new_trial"),
    ("optuna.storages._rdb.storage", "RDBStorage._set_trial_param"),
    ("optuna.storages._rdb.storage", "RDBStorage._get_trials"),
    ("optuna.storages._rdb.storage", "RDBStorage._get_best_trial_id"),
    ("optuna.storages._rdb.models", "TrialModel.find_or_raise_by_id"),
    ("optuna.storages._rdb.models", "StudyModel.find_or_raise_by_id"),
    ("optuna.storages._rdb.models", "TrialUserAttributeModel"),
    ("optuna.storages._rdb.models", "StudyUserAttributeModel"),
    ("optuna.storages._rdb.models", "StudySystemAttributeModel"),
    ("optuna.storages._rdb.models", "TrialHeartbeatModel.where_trial_id"),
    ("optuna_dashboard._note", "note_ver_key"),
    ("optuna_dashboard._note", "note_str_key_prefix"),
    ("optuna_dashboard._note", "split_body"),
)
# and the private attributes of objects (set in __init__, so found on an instance): class -> attributes
PRIVATE_INSTANCE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "optuna.study.Study": ("_storage", "_study_id"),
    "optuna.trial.Trial": ("_trial_id", "_cached_frozen_trial"),
    "optuna.trial.FrozenTrial": ("_trial_id",),
    "optuna.storages._CachedStorage": ("_backend",),
}

# What Optuna's cached storage and studies call on an RDB storage, its private methods among them
RDB_STORAGE_CALLS = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr", "get_study_id_from_name",
    "get_study_name_from_id", "get_study_directions", "get_study_user_attrs", "get_study_system_attrs",
    "get_trial_user_attrs", "get_trial_system_attrs", "get_all_studies", "create_new_trial", "_create_new_trial",
    "set_trial_param", "_set_trial_param", "get_trial_param", "set_trial_state_values",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials", "_get_trials", "get_best_trial",
    "_get_best_trial_id", "record_heartbeat", "get_trial_number_from_id",
)  # fmt: skip
# The logger of the module that defines RDBStorage (it logs there, under its module's name)
RDB_STORAGE_LOGGER = optuna.storages.RDBStorage.__module__

Write = Callable[[sqlalchemy.orm.Session, optuna.storages.RDBStorage], Any]


# -- ids and storages --------------------------------------------------------------------------------------------------
def queued_params(trial: FrozenTrial) -> dict[str, Any] | None:
    """The parameters ``enqueue_trial`` fixed for ``trial`` (None: it was not queued with any)."""
    return trial.system_attrs.get("fixed_params")


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage (for an RDB one, Optuna's cache in front of it)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The study's id in its storage."""
    return study._study_id


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (not its number, which counts within the study)."""
    return trial._trial_id


def keep_user_attrs_view(trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """Update the trial's own view of its user attributes after they were stored around ``Trial.set_user_attr``, as
    that method updates it."""
    trial._cached_frozen_trial.user_attrs.update(attrs)


def rdb_of(storage: optuna.storages.BaseStorage) -> optuna.storages.RDBStorage | None:
    """The RDB storage behind ``storage`` (a study's storage is Optuna's cache in front of it), or None."""
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, optuna.storages.RDBStorage) else None


def create_trial_from_template(study: optuna.Study, template: FrozenTrial) -> int:
    """Make a trial of the study as ``template`` is (its state, e.g. WAITING); its id."""
    return study._storage.create_new_trial(study._study_id, template_trial=template)


# -- heartbeats ----------------------------------------------------------------------------------------------------
def records_heartbeats(storage: optuna.storages.BaseStorage) -> bool:
    """Whether the storage records trials' heartbeats (it was opened with a heartbeat interval)."""
    return isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None


def stale_trial_ids(study: optuna.Study) -> list[int]:
    """The ids of the study's RUNNING trials whose heartbeat is older than the grace period (none where the storage
    records no heartbeats)."""
    storage = study._storage
    return list(storage._get_stale_trial_ids(study._study_id)) if records_heartbeats(storage) else []


class StaleTrialsRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose stale trials (what ``fail_stale_trials`` and ``stale_trial_ids`` ask, through the
    private ``_get_stale_trial_ids``) are ``find_stale_trial_ids``'s, which a subclass may override."""

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self.find_stale_trial_ids(study_id)

    def find_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's answer: the study's RUNNING trials whose heartbeat is older than the grace period."""
        return super()._get_stale_trial_ids(study_id)


def last_heartbeat(storage: optuna.storages.BaseStorage, trial_id: int) -> float | None:
    """When the trial's last heartbeat was recorded, in this host's epoch seconds (the database's clock makes both
    the heartbeat and its "now", so only their difference is used); None without one."""
    rdb = rdb_of(storage)
    if rdb is None or not records_heartbeats(storage):
        return None
    return through_outage(rdb, _read_last_heartbeat, rdb, trial_id)


def _read_last_heartbeat(rdb: optuna.storages.RDBStorage, trial_id: int) -> float | None:
    session = rdb.scoped_session()
    try:
        heartbeat = models.TrialHeartbeatModel.where_trial_id(trial_id, session)
        if heartbeat is None:
            return None
        now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
        return time.time() - (now - heartbeat.heartbeat).total_seconds()
    finally:
        session.close()


# -- several attributes in one transaction (autotune.records.batch) ------------------------------------------------
def through_outage(rdb: optuna.storages.RDBStorage, function: Callable, *args: Any) -> Any:
    """``function(*args)``, through the storage's outage handling where it has one
    (``autotune.search.storage.RetryingStorage``), as its own calls are."""
    outage = getattr(rdb, "outage", None)
    return outage.call(function, *args) if outage is not None else function(*args)


def in_one_transaction(rdb: optuna.storages.RDBStorage, write: Write) -> Any:
    """``write(session, rdb)`` in one session, committed once (rolled back on an error), through the storage's
    outage handling."""

    def run() -> Any:
        with _create_scoped_session(rdb.scoped_session, True) as session:
            return write(session, rdb)

    return through_outage(rdb, run)


def upsert_trial_user_attrs(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage, *, trial_id: int,
                            attrs: Mapping[str, Any]) -> None:  # fmt: skip
    """Store ``attrs`` as the trial's user attributes in ``session``; the trial must be unfinished (else Optuna's
    ``UpdateFinishedTrialError``, as ``set_trial_user_attr`` raises)."""
    trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
    rdb.check_trial_is_updatable(trial_id, trial.state)
    rows = [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
    if not _upsert(session, rdb, models.TrialUserAttributeModel, rows, ("trial_id", "key")):
        for key, value in attrs.items():
            rdb._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)


def upsert_study_user_attrs(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage, *, study_id: int,
                            attrs: Mapping[str, Any]) -> None:  # fmt: skip
    """Store ``attrs`` as the study's user attributes in ``session``."""
    models.StudyModel.find_or_raise_by_id(study_id, session)
    rows = [{"study_id": study_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
    if not _upsert(session, rdb, models.StudyUserAttributeModel, rows, ("study_id", "key")):
        _write_rows(session, models.StudyUserAttributeModel, study_id, rows)


def update_study_system_attrs(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage, *, study_id: int,
                              keys: tuple[str, ...], prefix: str,
                              update: Callable[[dict[str, Any]], dict[str, Any]]) -> None:  # fmt: skip
    """Read the study's system attributes named ``keys`` or starting with ``prefix`` in ``session``, and store
    ``update(them)``."""
    models.StudyModel.find_or_raise_by_id(study_id, session)
    model = models.StudySystemAttributeModel
    found = session.query(model.key, model.value_json).filter(
        model.study_id == study_id,
        sqlalchemy.or_(model.key.in_(keys), model.key.startswith(prefix, autoescape=True)),
    )
    attrs = update({key: json.loads(value) for key, value in found})
    rows = [{"study_id": study_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
    if rows and not _upsert(session, rdb, model, rows, ("study_id", "key")):
        _write_rows(session, model, study_id, rows)


def _write_rows(session: sqlalchemy.orm.Session, model: type, study_id: int, rows: list[dict]) -> None:
    """A study attribute row per key, each inserted or updated by itself (a database without an upsert)."""
    for row in rows:
        attribute = session.query(model).filter_by(study_id=study_id, key=row["key"]).one_or_none()
        if attribute is None:
            session.add(model(**row))
        else:
            attribute.value_json = row["value_json"]


def _upsert(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage, model: type, rows: list[dict],
            unique: tuple[str, str]) -> bool:  # fmt: skip
    """Insert ``rows``, replacing the value of a key already there, in one statement; False on a database where
    this module has no such statement (the caller writes them one by one)."""
    if rdb.engine.name == "postgresql":
        insert = postgresql.insert(model).values(rows)
    elif rdb.engine.name == "sqlite" and sqlite3.sqlite_version_info >= (3, 24, 0):
        insert = sqlite_dialect.insert(model).values(rows)
    else:
        return False
    columns = [getattr(model, name) for name in unique]
    session.execute(insert.on_conflict_do_update(index_elements=columns,
                                                 set_={"value_json": insert.excluded.value_json}))  # fmt: skip
    return True


# -- optuna-dashboard's notes --------------------------------------------------------------------------------------
def _dashboard_note() -> Any:
    """optuna-dashboard's note module (ImportError where optuna-dashboard is not installed)."""
    importlib.import_module("optuna_dashboard")  # the package first: a blocked one fails here, not its submodule
    return importlib.import_module("optuna_dashboard._note")


def dashboard_note_keys(trial_id: int) -> tuple[str, str]:
    """The study system attribute that holds the version of the trial's note in optuna-dashboard, and the prefix of
    those holding its text, in pieces (ImportError where optuna-dashboard is not installed)."""
    note = _dashboard_note()
    return note.note_ver_key(trial_id), note.note_str_key_prefix(trial_id)


def dashboard_note_pieces(text: str, trial_id: int) -> dict[str, str]:
    """The trial's note ``text`` as optuna-dashboard stores it: study system attributes, each holding a piece."""
    return _dashboard_note().split_body(text, trial_id)
