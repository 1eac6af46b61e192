"""Study names. A name becomes file names in the studies directory (its SQLite file ``NAME.db``, its directory
``NAME/`` of trials, artifacts, reports and validations, its lock ``.NAME.lock``), so it must be one plain file name
there: otherwise ``..``, ``a/b`` or an absolute path would write anywhere the tuner can. Every place a name turns into
a path asks ``study_name`` first, whether the name came from ``--study``, a space's ``name``, its file name or a
storage."""

from __future__ import annotations

import re

from autotune.errors import UsageError

MAX_LENGTH = 100
ALLOWED = f"letters, digits, '.', '_' and '-', not starting with '.' or '-', at most {MAX_LENGTH} characters"
# ASCII only: a name must read the same on every file system and in every shell; the first character is not '.' (so
# that '.', '..' and hidden files, the lock files and .gpus/, are never a study) nor '-' (read as an option in a shell)
_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}", re.ASCII)
_SHOWN = 60  # characters of a refused name echoed in the error


def is_study_name(name: str) -> bool:
    """Whether ``name`` is a study name (a plain file name in the studies directory)."""
    return _NAME.fullmatch(name) is not None


def study_name(name: str, origin: str = "--study") -> str:
    """``name``, checked to be a study name.

    Args:
        name: the name as given.
        origin: where it came from, for the error (``--study``, ``the space's name``...).

    Raises:
        UsageError: it is not (one line: the allowed characters and a name that would do).
    """
    if is_study_name(name):
        return name
    shown = repr(name[:_SHOWN]) + ("…" if len(name) > _SHOWN else "")
    raise UsageError(f"study name {shown} ({origin}) is not a plain file name: use {ALLOWED}; "
                     f"fix: --study {_suggestion(name)}")  # fmt: skip


def _suggestion(name: str) -> str:
    """A study name close to ``name``: each run of other characters becomes '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name, flags=re.ASCII).lstrip(".-")[:MAX_LENGTH] or "my-study"
