"""``autotune command [FILE] --set key=value ...``: render one configuration as the engine's launch command."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from autotune.cli.options import GPUS_HELP
from autotune.config import KNOBS, Hardware, ServerConfig, knob_adapter
from autotune.engines import get_engine
from autotune.engines.models import resolve_model
from autotune.errors import UsageError
from autotune.serving.gpus import parse_gpus
from autotune.space.files import load_space
from autotune.text import lowercase_first, shorten
from autotune.yamlload import load_yaml

_UNSET = ("null", "none", "")


def command(
    file: Annotated[
        str | None,
        typer.Argument(
            metavar="SPACE",
            help="search space (a YAML file or a shipped space's name); its fixed knobs and defaults are the base",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="knob=value, e.g. tp=8 (knob names as `autotune space show` lists them)"),
    ] = None,
    gpus: Annotated[
        str | None, typer.Option(help=f"the target machine's GPUs, for the static rules: {GPUS_HELP}")
    ] = None,
    port: Annotated[int | None, typer.Option(help="serve on this port (and --host); default: the engine's")] = None,
    host: Annotated[str, typer.Option(help="address to bind when --port is given")] = "127.0.0.1",
    executable: Annotated[str | None, typer.Option(help="how to invoke the engine, e.g. 'python vllm_cli.py'")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print {argv, env, files} as JSON instead of a shell script")
    ] = False,
) -> None:
    """Render one configuration as the engine's launch command; refuse (exit 1) with the rule it breaks."""
    overrides = parse_assignments(set_ or [])
    knobs, hardware, space_executable = _base(file, overrides.get("engine"))
    knobs.update(overrides)
    if gpus is not None:
        hardware = hardware.model_copy(update={"gpus": len(parse_gpus(gpus))})
    try:
        config = ServerConfig.model_validate(knobs)
    except ValidationError as exc:
        error = exc.errors()[0]
        knob = ".".join(map(str, error["loc"])) or "config"
        raise UsageError(
            f"{knob}: {lowercase_first(error['msg'])}; fix: --set {knob}=VALUE with a valid value"
        ) from None
    engine = get_engine(config.engine, shlex.split(executable) if executable else space_executable)
    if resolve_model(config.model) is None:
        print(
            f"note: {config.model} is not a local model nor a known one: no model-specific rules applied",
            file=sys.stderr,
        )
    engine.check(config, hardware)
    spec = engine.launch_spec(config, port, host)
    print(spec.to_json() if as_json else spec.to_shell())


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """``["tp=8", "cuda_graph=false"]`` → ``{"tp": 8, "cuda_graph": False}``, each value validated for its knob.

    Values stay strings unless the knob is a number, a boolean, a list or a mapping, so ``;``, quotes and spaces pass
    through verbatim; ``null`` or ``none`` unsets a knob.
    """
    knobs: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep:
            raise UsageError(f"--set {assignment!r}: expected key=value; fix: e.g. --set tp=8")
        if key not in KNOBS:
            raise UsageError(f"--set {key}: unknown knob; fix: use one of {', '.join(KNOBS)}")
        knobs[key] = _parse_value(key, raw)
    return knobs


def _parse_value(knob: str, raw: str) -> Any:
    if raw.lower() in _UNSET and knob not in ("engine", "model"):
        return None
    value: Any = raw  # structured knobs (env, extra_args) are written as YAML/JSON flow values
    if knob in ("env", "extra_args"):
        try:
            value = load_yaml(raw)
        except yaml.YAMLError:
            raise UsageError(f"--set {knob}: not a YAML/JSON value; fix: e.g. --set 'env={{A: \"1\"}}'") from None
    try:
        return knob_adapter(knob).validate_python(value)
    except ValidationError as exc:
        shown = shorten(raw, 80)
        raise UsageError(
            f"--set {knob}={shown}: {lowercase_first(exc.errors()[0]['msg'])}; fix: give a valid {knob}"
        ) from None


def _base(file: str | None, engine: str | None) -> tuple[dict[str, Any], Hardware, list[str] | None]:
    if file is None:
        return {}, Hardware(), None
    space = load_space(file)
    if engine is None:
        if len(space.engines) > 1:
            raise UsageError(f"{file} has engines {', '.join(space.engines)}; fix: pick one with --set engine=NAME")
        engine = next(iter(space.engines))
    if engine not in space.engines:
        raise UsageError(
            f"--set engine={engine}: {file} has no such engine; fix: use one of {', '.join(space.engines)}"
        )
    server = space.default_point(engine).server
    return server.model_dump(exclude_defaults=True), space.hardware, space.engines[engine].executable
