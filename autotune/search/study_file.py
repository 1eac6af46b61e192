"""A study's SQLite file that is not a study: empty (0 bytes) or damaged (a page overwritten, cut short, another file
in its place) is one line naming the file and the fix, from every command, instead of a new study started silently
over it or three tracebacks.

SQLite creates a file empty when it first connects, and writes its schema only at the first commit, so a study file
made in place would be empty for a moment, and a second worker opening it then would take it for a damaged one. A new
study file is therefore made whole under a temporary name and linked into place (``make_whole``): an empty study
file is never one autotune is making.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

import optuna
import sqlalchemy
from sqlalchemy.engine import URL

from autotune.errors import AutotuneError

# SQLite's words for a file that is not (or no longer) a database: SQLITE_CORRUPT, SQLITE_NOTADB and a damaged schema
_DAMAGED = ("database disk image is malformed", "file is not a database", "malformed database schema")


class StorageDamaged(AutotuneError):
    """The study's SQLite file is empty or damaged: no command can read it, and none writes over it."""


def sqlite_path(parsed: URL) -> Path | None:
    """The file of a SQLite storage URL, or None (another database, or a ``file:`` URI, which SQLite resolves)."""
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.query.get("uri"):
        return None
    return Path(parsed.database.removeprefix("file:"))


def refuse_empty(path: Path) -> None:
    """Refuse a study file of 0 bytes: SQLite would read it as an empty database and a new study would start over it.

    Raises:
        StorageDamaged: the file is there and empty.
    """
    with contextlib.suppress(OSError):  # not there: a new study
        if path.stat().st_size == 0:
            raise StorageDamaged(f"study file {path} is empty (0 bytes), not a study (a full disk, an interrupted copy?); "
                                 f"fix: restore it from a backup, or delete it to start a new study under its name")  # fmt: skip


def damaged(exc: BaseException, path: Path) -> StorageDamaged | None:
    """The one-line error for a storage call that failed because the file is damaged (SQLite says so in the error, or
    in one it came from: Optuna wraps a failed commit); else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.DatabaseError):
            reason = str(seen.orig or "")
            if any(words in reason.lower() for words in _DAMAGED):
                aside = f"mv {shlex.quote(str(path))} {shlex.quote(f'{path}.damaged')}"
                return StorageDamaged(f"study file {path} is damaged (SQLite: {reason}); fix: restore it from a backup, "
                                      f"or move it aside ({aside}) to start a new study under its name")  # fmt: skip
        seen = seen.__cause__ or seen.__context__
    return None


def make_whole(path: Path, engine_kwargs: dict) -> None:
    """Make a new study file with Optuna's schema under a temporary name beside it, then link it into place; nothing
    where the file is there already, or another process links its own first (its file is the one used). Where the
    file system has no hard links the file is left for SQLite to make in place (the moment it is empty remains)."""
    if path.exists():
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.new")  # not *.db: never listed as a study
    try:
        made = optuna.storages.RDBStorage(f"sqlite:///{temporary}", engine_kwargs=engine_kwargs)
        made.engine.dispose()  # closed: everything written to the file, no journal left beside it
        os.link(temporary, path)  # unlike a rename, never replaces a file another process linked meanwhile
    except (OSError, sqlalchemy.exc.SQLAlchemyError):
        # linked by another process first (its file is used), or no hard links here, or the directory cannot be
        # written: opening the file in place follows, and says what is wrong where something is
        pass
    finally:
        temporary.unlink(missing_ok=True)
