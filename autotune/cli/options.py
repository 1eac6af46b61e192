"""Options every command spells the same way: the study (``--study``), its storage (``--storage``), machine output
(``--json``) and a space (a path or a shipped space's name)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import optuna
import typer

from autotune.errors import UsageError
from autotune.search.names import is_study_name, study_name
from autotune.search.study import default_storage, open_storage
from autotune.settings import Settings


def _study_name(name: str | None) -> str | None:
    return None if name is None else study_name(name)


SPACE_HELP = "search space: a YAML file, or the name of a shipped space (`autotune space list`)"
# one spelling of the space argument in every command's usage and help: SPACE (not the parameter's Python name)
SpaceArg = Annotated[str, typer.Argument(metavar="SPACE", help=SPACE_HELP)]
GPUS_HELP = "auto (every GPU nvidia-smi lists), indexes like 0,1,2,3, or a count N (the first N)"
StudyOpt = Annotated[
    str | None,
    typer.Option(
        "--study",
        "-s",
        callback=_study_name,
        help="study name (default: the only study there is; `autotune study list`)",
    ),
]
StorageOpt = Annotated[
    str | None,
    typer.Option(
        help="Optuna storage URL, e.g. postgresql+psycopg://host/db (default: $AUTOTUNE_STORAGE, else "
        "sqlite:///studies/NAME.db under $AUTOTUNE_STUDIES_DIR or ./studies); a storage that stops answering is "
        "retried for $AUTOTUNE_STORAGE_RETRY_S seconds (default 120)"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output (JSON on stdout)")]


def storage_url(name: str, storage: str | None) -> str:
    """Where study ``name`` lives: ``--storage``, else $AUTOTUNE_STORAGE, else its SQLite file under studies/."""
    settings = Settings()
    return storage or settings.storage or default_storage(name, settings.studies_dir)


def storage_urls(storage: str | None) -> list[str]:
    """Every storage to look in: the one named (or $AUTOTUNE_STORAGE), else each SQLite study under studies/."""
    settings = Settings()
    if storage or settings.storage:
        return [storage or settings.storage]
    files = sorted(settings.studies_dir.glob("*.db"))
    return [default_storage(p.stem, settings.studies_dir) for p in files if is_study_name(p.stem)]


def study_names(storage: str | None) -> list[str]:
    return [s.study_name for url in storage_urls(storage) for s in optuna.get_all_study_summaries(open_storage(url))]


def load_study(name: str | None, storage: str | None) -> optuna.Study:
    """The study ``--study`` names (or the only one there is).

    Raises:
        UsageError: no such study, or none named while there are several.
    """
    if name is None:
        names = study_names(storage)
        if len(names) != 1:
            found = f"studies: {', '.join(names)}" if names else "no study there yet"
            raise UsageError(f"which study? {found}; fix: --study NAME (`autotune study list`)")
        name = study_name(names[0], "the only study in the storage")
    url = storage_url(name, storage)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise UsageError(
            f"no study {name!r} under {Settings().studies_dir}/; fix: `autotune study list` shows the studies"
        )
    try:
        return optuna.load_study(study_name=name, storage=open_storage(url))
    except KeyError:
        raise UsageError(f"no study {name!r} in that storage; fix: `autotune study list --storage URL`") from None
