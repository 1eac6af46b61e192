"""The study's budget lock: one worker at a time counts the budget and starts a trial, sets the study up, or ends a
dead worker's trial. A PostgreSQL advisory lock on a PostgreSQL storage (workers on many hosts), a file lock beside
the SQLite database otherwise (workers of one host)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy

from autotune.search import names
from autotune.search.storage import advisory_lock, lock_engine_kwargs


@contextlib.contextmanager
def budget_lock(storage_url: str, study_name: str, studies_dir: Path) -> Iterator[None]:
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
