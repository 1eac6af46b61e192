"""What a study's first launch needs that can be known before it, checked before it.

One list of checks, read alike by ``autotune doctor`` (which prints them all), ``autotune space validate`` and
``autotune study run`` (which refuse the space at the first failure, before any engine is launched): each workload's
dataset file, the model's tokenizer for every engine whose workloads count prompts with it (``autotune.engines.hub``:
the model's directory, the Hugging Face cache the engine reads, or a download of the tokenizer alone), and every file a
launch reads (a chat template). A simulated space needs no tokenizer and no engine file: the simulator serves it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.bench.datasets import needs_tokenizer
from autotune.config import FILE_KNOBS, ServerConfig, names_a_file
from autotune.engines import get_engine
from autotune.errors import SpaceError, UsageError
from autotune.space.files import check_dataset
from autotune.space.schema import ChoiceParam, SearchSpace, TiedParam


class PreflightCheck(BaseModel):
    """One thing a first launch needs: what (``check``), whether it is there, and where it was found or the fix.
    ``needed``: a launch of this space cannot do without it (a simulated space's engine files are not)."""

    model_config = ConfigDict(frozen=True)
    check: str
    ok: bool
    detail: str
    needed: bool = True
    key: str = ""  # the space's key that names what is missing (a refusal names it, as every space error does)

    @property
    def fails(self) -> bool:
        """Missing and needed: the study must not launch."""
        return self.needed and not self.ok


def preflight(space: SearchSpace, space_path: str | Path, download: bool = True,
              datasets: bool = True) -> list[PreflightCheck]:  # fmt: skip
    """Every check of the space, in the order a user fixes them: datasets, tokenizers, the engines' files.

    Args:
        space: the space.
        space_path: its file, named in a dataset's error.
        download: a hub model's tokenizer may be downloaded (the tokenizer alone) where the cache lacks it.
        datasets: check the workloads' files too (a large ShareGPT file is read once, bounded).
    """
    checks = [_dataset_check(space, space_path)] if datasets else []
    if space.simulate is None:
        checks += _tokenizer_checks(space, download)
    return checks + _file_checks(space)


def refuse_failures(checks: list[PreflightCheck], space_path: str | Path) -> None:
    """Raise at the first failed check, naming the space's file and key, with the fix its detail carries.

    Raises:
        SpaceError: a needed thing is missing.
    """
    if failed := [check for check in checks if check.fails]:
        problem, _, fix = failed[0].detail.partition("; fix: ")
        more = f" (and {len(failed) - 1} more: `autotune doctor` lists them)" if len(failed) > 1 else ""
        raise SpaceError(str(space_path), failed[0].key, f"{failed[0].check}: {problem}", (fix or "see above") + more)


def check_before_launch(space: SearchSpace, space_path: str | Path) -> list[PreflightCheck]:
    """``preflight`` and ``refuse_failures`` in one: what ``study run`` and ``space validate`` call.

    Raises:
        SpaceError: the first missing thing, at the space's key that names it, with its fix.
    """
    check_dataset(space, space_path)  # raised as it is: a SpaceError names the file and the key
    checks = preflight(space, space_path, datasets=False)
    refuse_failures(checks, space_path)
    return checks


def _dataset_check(space: SearchSpace, space_path: str | Path) -> PreflightCheck:
    try:
        check_dataset(space, space_path)
    except UsageError as exc:
        return PreflightCheck(check="dataset", ok=False, detail=str(exc))
    files = sorted({w.path or w.dataset for w in space.mix_workloads() if w.dataset != "random"})
    return PreflightCheck(
        check="dataset", ok=True, detail=", ".join(files) + " readable" if files else "random prompts"
    )


def _tokenizer_checks(space: SearchSpace, download: bool) -> list[PreflightCheck]:
    """One check per tokenizer asked for (``workload.tokenizer``, else each engine's model in its environment): the
    engines of one model and one cache share it."""
    wanted = [w.tokenizer for w in space.mix_workloads() if needs_tokenizer(w)]
    asked: dict[tuple, list[str]] = {}  # (model, override, the hub's env) -> engines
    configs = {}
    for engine_name, override in itertools.product(space.engines, dict.fromkeys(wanted)):
        config = space.default_point(engine_name).server
        hub_env = tuple(sorted((k, v) for k, v in config.env.items() if k.startswith(("HF_", "HUGGINGFACE_"))))
        key = (config.model, override, hub_env)
        asked.setdefault(key, []).append(engine_name)
        configs[key] = config
    return [_tokenizer_check(space, configs[key], key[1], engines, download) for key, engines in asked.items()]


def _tokenizer_key(space: SearchSpace, engine: str, override: str | None) -> str:
    if override:
        return "workloads[].tokenizer" if space.workloads else "workload.tokenizer"
    return f"engines.{engine}.fixed.model" if "model" in space.engines[engine].fixed else "fixed.model"


def _tokenizer_check(space: SearchSpace, config: ServerConfig, override: str | None, engines: list[str],
                     download: bool) -> PreflightCheck:  # fmt: skip
    name, key = f"tokenizer ({', '.join(engines)})", _tokenizer_key(space, engines[0], override)
    engine = get_engine(engines[0], space.engines[engines[0]].executable)
    try:
        source = engine.tokenizer_source(config, override, download)
    except UsageError as exc:
        return PreflightCheck(check=name, ok=False, detail=str(exc), key=key)
    try:  # a file that is there but is no tokenizer fails here, not in the first benchmark
        source.load()
    except Exception as exc:  # tokenizers raises its own Exception on a file it cannot parse
        fix = "fix: set workload.tokenizer to the model's tokenizer.json"
        return PreflightCheck(check=name, ok=False, detail=f"{source.file} is no tokenizer ({exc}); {fix}", key=key)
    return PreflightCheck(check=name, ok=True, detail=f"{override or config.model}: {source.where}, {source.file}")


def _file_checks(space: SearchSpace) -> list[PreflightCheck]:
    """Each file a launch of the space may read (a chat template), looked for from here: where `study run` starts."""
    readers: dict[str, set[str]] = {}  # path -> "engine knob" of the launches that read it
    keys: dict[str, str] = {}  # path -> the first key naming it
    for engine, section in space.engines.items():
        settings = [space.fixed, section.fixed] + [param.knob_values(name.split(".", 1)[-1], value)
                                                   for name, param in space.engine_params(engine).items()
                                                   if isinstance(param, ChoiceParam | TiedParam)
                                                   for value in param.values()]  # fmt: skip
        for knobs, knob in itertools.product(settings, FILE_KNOBS):
            if path := names_a_file(knob, knobs.get(knob)):
                readers.setdefault(path, set()).add(f"{engine} {knob}")
                keys.setdefault(path, f"engines.{engine}.{knob}")
    checks = []
    for path, users in sorted(readers.items()):
        where, ok = ", ".join(sorted(users)), Path(path).expanduser().is_file()
        fix = f"no such file; fix: put it at {Path(path).expanduser().absolute()} or change {where} in the space"
        checks.append(PreflightCheck(check="file", ok=ok, detail=f"{path} ({where}): {'found' if ok else fix}",
                                     needed=space.simulate is None, key=keys[path]))  # fmt: skip
    return checks
