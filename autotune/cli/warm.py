"""``study run --warm-start``: which studies a new study starts from, and what it took from them, in lines."""

from __future__ import annotations

from pathlib import Path

import optuna
from rich.console import Console

from autotune.cli.options import storage_url, storage_urls
from autotune.errors import UsageError
from autotune.search.names import study_name
from autotune.search.warm_start import WarmSource, auto_sources, identity_of, near_studies, open_source
from autotune.space.redact import mask_url
from autotune.space.schema import SearchSpace

WARM_HELP = ("earlier studies to start from, STUDY[,STUDY...] or `auto` (every finished study of the storage with "
             "the same model family, hardware and engines, those of the same space file first, then those of the "
             "same workload shape): their learned rules carry over (re-checked once on another engine version), "
             "their best configurations are measured again first, a model of their measurements ranks the space "
             "while this study's measurements agree with it, and the performance model's error they measured starts "
             "this study's calibration")  # fmt: skip
WARM_STORAGE_HELP = ("the storage of the --warm-start studies (default: --storage, then where `autotune study list` "
                     "looks)")  # fmt: skip


def warm_sources(spec: str | None, storage: str | None, space: SearchSpace, name: str, console: Console, *,
                 run_storage: str | None = None, space_path: Path | None = None) -> tuple[WarmSource, ...]:  # fmt: skip
    """The studies ``--warm-start`` names (checked to exist), or for ``auto`` those of the same kind, most alike
    first. They are looked for in ``storage`` (``--warm-start-storage``) alone where it is given, else in
    ``run_storage`` (the new study's ``--storage``: its sibling studies are there) and then where `autotune study
    list` looks.

    Raises:
        UsageError: a named study does not exist, or the study would start from itself.
    """
    if not spec:
        return ()
    urls = [storage] if storage else _unique(([run_storage] if run_storage else []) + storage_urls(None))
    if spec.strip() == "auto":
        found = auto_sources(urls, identity_of(space), exclude=name, space=space, space_path=space_path)
        if not found:
            console.print(_nothing_found(urls, space, name), markup=False, soft_wrap=True)
        return tuple(found)
    sources = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        source = study_name(part, "--warm-start")
        if source == name:
            raise UsageError(f"--warm-start {source}: a study cannot start from itself; fix: a new --study name")
        where = [storage] if storage else _unique(([run_storage] if run_storage else []) + [storage_url(source, None)])
        sources.append(_located(source, where))
    return tuple(sources)


def _located(source: str, urls: list[str]) -> WarmSource:
    """Study ``source`` in the first of ``urls`` that has it (refused here, before anything is made, if none has).

    Raises:
        UsageError: none of them holds it.
    """
    for url in urls:
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
            continue  # opening it would make it
        found = WarmSource(storage=url, study=source)
        try:
            open_source(found)
        except UsageError:
            continue
        return found
    looked = ", ".join(mask_url(url) for url in urls)
    raise UsageError(f"--warm-start: no study {source!r} in {looked}; fix: `autotune study list` (another storage: "
                     "--warm-start-storage URL)")  # fmt: skip


def _nothing_found(urls: list[str], space: SearchSpace, name: str) -> str:
    """``--warm-start auto`` found no source: the line says so, and names what the user could start from instead."""
    identity = identity_of(space)
    near = near_studies(urls, identity, exclude=name, space=space)
    measured_on = "a mix of workloads" if space.is_mix else "one workload"
    cold = (f"warm start: no finished study of the same model family, hardware and engines, measured on "
            f"{measured_on} as this one is; starting cold")  # fmt: skip
    if not near:
        return cold
    listed = ", ".join(f"{n.study} ({n.why_not})" for n in near)
    return f"{cold}. Of the same hardware and engines: {listed}; to start from one of them: --warm-start NAME"


def _unique(urls: list[str]) -> list[str]:
    return list(dict.fromkeys(urls))


def print_warm(console: Console, study: optuna.Study) -> None:
    """What a warm-started study took from its sources (nothing for a cold study)."""
    from autotune.search.warm_start import summary

    for line in summary(study):
        console.print(line, markup=False, soft_wrap=True)
