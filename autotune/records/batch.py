"""Several attributes in one storage call: one transaction on an RDB storage, where Optuna makes one call (one
session, one commit) per attribute.

A trial's record is written a few fields at a time (``autotune.records.write``), and a field such as the chosen
load's ``metrics`` is ten attributes: one call each was most of a trial's storage calls (25 of 70,
benchmarks/workers_stress.py). Here each write is one call: the trial is looked up (and checked unfinished, as Optuna
does) once, then every attribute is upserted by one statement on PostgreSQL and SQLite (one statement per attribute
on other databases, in the same transaction). Through ``RetryingStorage``'s outage handling when the storage has it,
as its own calls are (a write is an upsert: made again after a lost commit, it writes the same). A storage that is
not an RDB one (Optuna's in-memory storage, in tests) gets Optuna's calls, one per attribute.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

import optuna
import sqlalchemy.orm
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

Write = Callable[[sqlalchemy.orm.Session, optuna.storages.RDBStorage], Any]


def rdb_of(storage: optuna.storages.BaseStorage) -> optuna.storages.RDBStorage | None:
    """The RDB storage behind ``storage`` (a study's storage is Optuna's cache in front of it), or None."""
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, optuna.storages.RDBStorage) else None


def one_call(rdb: optuna.storages.RDBStorage, write: Write) -> Any:
    """``write(session, rdb)`` in one session, committed once: one storage call (what a benchmark counts), through
    the storage's outage handling where it has one (``autotune.search.storage.RetryingStorage``)."""

    def run() -> Any:
        with _create_scoped_session(rdb.scoped_session, True) as session:
            return write(session, rdb)

    outage = getattr(rdb, "outage", None)
    return outage.call(run) if outage is not None else run()


def set_trial_user_attrs(storage: optuna.storages.BaseStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Store ``attrs`` as the trial's user attributes in one call (all or none); the trial must be unfinished (else
    Optuna's ``UpdateFinishedTrialError``, as ``set_trial_user_attr`` raises)."""
    if not attrs:
        return
    rdb = rdb_of(storage)
    if rdb is None or len(attrs) == 1:  # one attribute: Optuna's own call is one already
        for name, value in attrs.items():
            storage.set_trial_user_attr(trial_id, name, value)
        return

    def write(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage) -> None:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        rdb.check_trial_is_updatable(trial_id, trial.state)
        rows = [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
        if not _upsert(session, rdb, models.TrialUserAttributeModel, rows, ("trial_id", "key")):
            for key, value in attrs.items():
                rdb._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, trial_id, key, value)

    one_call(rdb, write)


def set_study_user_attrs(storage: optuna.storages.BaseStorage, study_id: int, attrs: Mapping[str, Any]) -> None:
    """Store ``attrs`` as the study's user attributes in one call (all or none)."""
    rdb = rdb_of(storage)
    if rdb is None or len(attrs) <= 1:
        for name, value in attrs.items():
            storage.set_study_user_attr(study_id, name, value)
        return

    def write(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage) -> None:
        models.StudyModel.find_or_raise_by_id(study_id, session)
        rows = [{"study_id": study_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
        if not _upsert(session, rdb, models.StudyUserAttributeModel, rows, ("study_id", "key")):
            for row in rows:
                found = session.query(models.StudyUserAttributeModel).filter_by(study_id=study_id, key=row["key"])
                attribute = found.one_or_none()
                if attribute is None:
                    session.add(models.StudyUserAttributeModel(**row))
                else:
                    attribute.value_json = row["value_json"]

    one_call(rdb, write)


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


def update_study_system_attrs(storage: optuna.storages.BaseStorage, study_id: int, keys: tuple[str, ...],
                              prefix: str, update: Callable[[dict[str, Any]], dict[str, Any]]) -> None:  # fmt: skip
    """Read the study's system attributes named ``keys`` or starting with ``prefix`` (not all of them: a study keeps
    every trial's dashboard note there), and store ``update(them)``, in one call: one transaction."""
    rdb = rdb_of(storage)
    if rdb is None:
        attrs = storage.get_study_system_attrs(study_id)
        for name, value in update({k: v for k, v in attrs.items() if k in keys or k.startswith(prefix)}).items():
            storage.set_study_system_attr(study_id, name, value)
        return

    def write(session: sqlalchemy.orm.Session, rdb: optuna.storages.RDBStorage) -> None:
        models.StudyModel.find_or_raise_by_id(study_id, session)
        model = models.StudySystemAttributeModel
        found = session.query(model.key, model.value_json).filter(
            model.study_id == study_id,
            sqlalchemy.or_(model.key.in_(keys), model.key.startswith(prefix, autoescape=True)),
        )
        attrs = update({key: json.loads(value) for key, value in found})
        rows = [{"study_id": study_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]
        if rows and not _upsert(session, rdb, model, rows, ("study_id", "key")):
            for row in rows:
                attribute = session.query(model).filter_by(study_id=study_id, key=row["key"]).one_or_none()
                if attribute is None:
                    session.add(model(**row))
                else:
                    attribute.value_json = row["value_json"]

    one_call(rdb, write)
