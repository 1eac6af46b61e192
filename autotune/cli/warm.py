"""``study run --warm-start``: which studies a new study starts from, and what it took from them, in lines."""

from __future__ import annotations

from pathlib import Path

import optuna
from rich.console import Console

from autotune.cli.options import storage_url, storage_urls
from autotune.errors import UsageError
from autotune.search.names import study_name
from autotune.search.warm_start import WarmSource, auto_sources, identity_of, open_source
from autotune.space.schema import SearchSpace

WARM_HELP = ("earlier studies to start from, STUDY[,STUDY...] or `auto` (every finished study of the storage with "
             "the same model family, hardware and engines): their learned rules carry over (re-checked once on "
             "another engine version), their best configurations are measured again first, a model of their "
             "measurements ranks the space while this study's measurements agree with it, and the performance "
             "model's error they measured starts this study's calibration")  # fmt: skip
WARM_STORAGE_HELP = "the storage of the --warm-start studies (default: where `autotune study list` looks)"


def warm_sources(spec: str | None, storage: str | None, space: SearchSpace, name: str,
                 console: Console) -> tuple[WarmSource, ...]:  # fmt: skip
    """The studies ``--warm-start`` names (checked to exist), or for ``auto`` those of the same kind.

    Raises:
        UsageError: a named study does not exist, or the study would start from itself.
    """
    if not spec:
        return ()
    if spec.strip() == "auto":
        found = auto_sources(storage_urls(storage), identity_of(space), exclude=name)
        if not found:
            console.print("warm start: no finished study of the same model family, hardware and engines; "
                          "starting cold", markup=False)  # fmt: skip
        return tuple(found)
    sources = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        source = study_name(part, "--warm-start")
        if source == name:
            raise UsageError(f"--warm-start {source}: a study cannot start from itself; fix: a new --study name")
        found = WarmSource(storage=storage or storage_url(source, None), study=source)
        sqlite = found.storage.removeprefix("sqlite:///")
        if found.storage.startswith("sqlite:///") and not Path(sqlite).exists():  # opening it would make it
            raise UsageError(f"--warm-start: no study {source!r} ({sqlite} is not there); fix: `autotune study list`")
        open_source(found)  # refused here, before anything is made, if it is not there
        sources.append(found)
    return tuple(sources)


def print_warm(console: Console, study: optuna.Study) -> None:
    """What a warm-started study took from its sources (nothing for a cold study)."""
    from autotune.search.warm_start import summary

    for line in summary(study):
        console.print(line, markup=False, soft_wrap=True)
