"""Several attributes in one storage call: one transaction on an RDB storage, where Optuna makes one call (one
session, one commit) per attribute.

A trial's record is written a few fields at a time (``autotune.records.write``), and a field such as the chosen
load's ``metrics`` is ten attributes: one call each was most of a trial's storage calls (25 of 70,
benchmarks/workers_stress.py). Here each write is one call: the trial is looked up (and checked unfinished, as Optuna
does) once, then every attribute is upserted by one statement on PostgreSQL and SQLite (one statement per attribute
on other databases, in the same transaction). Through ``RetryingStorage``'s outage handling when the storage has it,
as its own calls are (a write is an upsert: made again after a lost commit, it writes the same). A storage that is
not an RDB one (Optuna's in-memory storage, in tests) gets Optuna's calls, one per attribute. The transactions use
Optuna's private tables, so they are written in ``autotune.records.optuna_private``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.records import optuna_private


def one_call(rdb: optuna.storages.RDBStorage, write: optuna_private.Write) -> Any:
    """``write(session, rdb)`` in one session, committed once: one storage call (what a benchmark counts), through
    the storage's outage handling where it has one (``autotune.search.storage.RetryingStorage``)."""
    return optuna_private.in_one_transaction(rdb, write)


def set_trial_user_attrs(storage: optuna.storages.BaseStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Store ``attrs`` as the trial's user attributes in one call (all or none); the trial must be unfinished (else
    Optuna's ``UpdateFinishedTrialError``, as ``set_trial_user_attr`` raises)."""
    if not attrs:
        return
    rdb = optuna_private.rdb_of(storage)
    if rdb is None or len(attrs) == 1:  # one attribute: Optuna's own call is one already
        for name, value in attrs.items():
            storage.set_trial_user_attr(trial_id, name, value)
        return
    one_call(rdb, functools.partial(optuna_private.upsert_trial_user_attrs, trial_id=trial_id, attrs=attrs))


def set_study_user_attrs(storage: optuna.storages.BaseStorage, study_id: int, attrs: Mapping[str, Any]) -> None:
    """Store ``attrs`` as the study's user attributes in one call (all or none)."""
    rdb = optuna_private.rdb_of(storage)
    if rdb is None or len(attrs) <= 1:
        for name, value in attrs.items():
            storage.set_study_user_attr(study_id, name, value)
        return
    one_call(rdb, functools.partial(optuna_private.upsert_study_user_attrs, study_id=study_id, attrs=attrs))


def update_study_system_attrs(storage: optuna.storages.BaseStorage, study_id: int, keys: tuple[str, ...],
                              prefix: str, update: Callable[[dict[str, Any]], dict[str, Any]]) -> None:  # fmt: skip
    """Read the study's system attributes named ``keys`` or starting with ``prefix`` (not all of them: a study keeps
    every trial's dashboard note there), and store ``update(them)``, in one call: one transaction."""
    rdb = optuna_private.rdb_of(storage)
    if rdb is None:
        attrs = storage.get_study_system_attrs(study_id)
        for name, value in update({k: v for k, v in attrs.items() if k in keys or k.startswith(prefix)}).items():
            storage.set_study_system_attr(study_id, name, value)
        return
    one_call(rdb, functools.partial(optuna_private.update_study_system_attrs, study_id=study_id, keys=keys,
                                    prefix=prefix, update=update))  # fmt: skip
