"""Load a search space from YAML; every problem becomes one ``SpaceError`` naming the file, the key path and the fix."""

from __future__ import annotations

import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from autotune.config import CLIENT_KNOBS, KNOBS, knob_adapter
from autotune.engines import ENGINES
from autotune.errors import SpaceError, UsageError
from autotune.space.schema import (
    ENGINE_PARAM,
    PARAM_KINDS,
    ChoiceParam,
    FloatParam,
    IntParam,
    Param,
    SearchSpace,
    TiedParam,
)
from autotune.text import brief_repr, lowercase_first
from autotune.yamlload import TooLarge, load_yaml, refuse_oversized, yaml_problem

# Knobs a space sets through its structure, not through fixed/params.
_STRUCTURAL_KNOBS = {"engine": "list the engine under engines:", "engine_version": "set engines.<name>.version"}
_SERVER_KNOBS = [k for k in KNOBS if k not in _STRUCTURAL_KNOBS]


def _shipped_spaces_dir() -> Path:
    """Where the shipped spaces are: ``search_spaces/`` at the top of the checkout, installed as package data
    ``autotune/search_spaces/`` by a non-editable install (pyproject.toml maps the one to the other); an editable
    install or a checkout on the path finds them beside the package."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "search_spaces"
    return installed if installed.is_dir() else package.parent / "search_spaces"


SHIPPED_SPACES = _shipped_spaces_dir()


def shipped_spaces() -> dict[str, Path]:
    """The spaces installed with autotune (package data), by name."""
    return {p.stem: p for p in sorted(SHIPPED_SPACES.glob("*.yaml"))}


def find_space(ref: str | Path) -> Path:
    """The file a space argument means: a path when one exists there, else a shipped space's name.

    Raises:
        SpaceError: neither a readable path nor a shipped space.
    """
    path = Path(ref)
    shipped = shipped_spaces()
    if path.exists():
        return path
    if len(path.parts) == 1 and path.suffix in ("", ".yaml") and path.stem in shipped:
        return shipped[path.stem]
    names = f"{', '.join(shipped)} (`autotune space list`)"
    if len(path.parts) == 1 and not path.suffix:
        raise SpaceError(str(ref), "", "no such file, and no shipped space has that name",
                         f"give a path to a YAML file or one of: {names}")  # fmt: skip
    raise SpaceError(str(ref), "", "cannot read the file (no such file)",
                     f"check the path, or name a shipped space: {names}")  # fmt: skip


def load_space(ref: str | Path) -> SearchSpace:
    """Read and validate a search-space file, given as a path or a shipped space's name.

    Raises:
        SpaceError: the file cannot be read, is not valid YAML, or does not describe a valid space.
    """
    path = find_space(ref)
    source = str(path)
    try:
        refuse_oversized(path.stat().st_size)  # before reading: a space is a few KiB, a mistaken file may be GBs
        text = path.read_text(encoding="utf-8")
    except TooLarge as exc:
        raise SpaceError(source, *yaml_problem(exc)) from None
    except OSError as exc:
        raise SpaceError(source, "", f"cannot read the file ({exc.strerror})", "check the path") from None
    except UnicodeDecodeError as exc:
        raise SpaceError(source, f"byte {exc.start}", "not a text file (not UTF-8)",
                         "give the search-space YAML file, not a binary one") from None  # fmt: skip
    return parse_space(text, source)


def parse_space(text: str, source: str = "<string>") -> SearchSpace:
    """Validate a search space given as YAML text; ``source`` names it in errors."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise SpaceError(source, *yaml_problem(exc)) from None
    if not isinstance(data, dict):
        raise SpaceError(
            source,
            "(top level)",
            f"expected a mapping of keys, got {type(data).__name__}",
            "start from a shipped space in search_spaces/",
        )
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise _space_error(source, exc.errors()[0]) from None
    _check_semantics(space, source)
    return space


def check_dataset(space: SearchSpace, source: str | Path) -> None:
    """Each workload's file read as its benchmarks will read it (bounded), so that ``space validate`` and a study
    refuse one that gives no prompts before any engine is launched (not part of loading: a report does not need it).

    Raises: SpaceError at ``workload.path`` (``workloads[i].path``; classes: ``.classes``), naming file and fix."""
    from autotune.bench.datasets import check  # the load generator only where a file is read

    for index, workload in enumerate(space.mix_workloads()):
        try:
            check(workload)
        except UsageError as exc:
            problem, _, fix = str(exc).partition("; fix: ")
            where = f"workloads[{index}]" if space.workloads else "workload"
            key = f"{where}.classes" if workload.classes else f"{where}.path"
            raise SpaceError(str(source), key, problem, fix or "check the file") from None


# ---- pydantic errors -> one line ---------------------------------------------------------------------------------


def _space_error(source: str, error: ErrorDetails) -> SpaceError:
    path, parent = _walk(error["loc"])
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        return SpaceError(source, path, f"unknown key {brief_repr(key)}", _valid_keys_hint(key, parent))
    if kind == "missing":
        return SpaceError(source, path, "required key is missing", "add it (see the shipped spaces in search_spaces/)")
    if kind == "param_kind":
        return SpaceError(
            source, path, f"{error['msg']}, got {brief_repr(value)}", "write e.g. {choices: [a, b]} or {int: [1, 8]}"
        )
    if kind == "value_error" and "; fix: " in error["msg"]:
        # a validator that says its own fix; the value is not echoed (it may be a credential)
        message, _, fix = error["msg"].removeprefix("Value error, ").partition("; fix: ")
        return SpaceError(source, path, message, fix)
    fix = _FIXES.get(kind, "give a value of the expected type")
    return SpaceError(source, path, f"{lowercase_first(error['msg'])} (got {brief_repr(value)})", fix)


_FIXES = {
    "literal_error": "use one of the values listed",
    "too_short": "give at least one entry",
    "tuple_type": "give a two-element list [low, high]",
    "too_long": "give exactly [low, high]",
    "dict_type": "give a mapping of key: value",
    "list_type": "give a YAML list",
    "bool_type": "use true or false",
    "bool_parsing": "use true or false",
}


def _walk(loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """The dotted key path for a pydantic location, and the model class at its parent (for key suggestions).

    Pydantic puts the discriminator tag of a parameter into the location; it is not a key of the file, so it is
    dropped here.
    """
    parts: list[str] = []
    current: Any = SearchSpace
    for i, item in enumerate(loc):
        parent = current
        if _is_param_union(current) and item in PARAM_KINDS:
            current = {"choices": ChoiceParam, "int": IntParam, "float": FloatParam, "tied": TiedParam}[item]
            continue
        parts.append(f"[{item}]" if isinstance(item, int) else (("." if parts else "") + str(item)))
        current = _child_type(current, item)
        if i == len(loc) - 1:
            return "".join(parts), parent if isinstance(parent, type) and issubclass(parent, BaseModel) else None
    return "".join(parts), None


def _is_param_union(tp: Any) -> bool:
    return tp is Param


def _child_type(tp: Any, key: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if key in (name, field.alias):
                return _unwrap(field.annotation)
        return None
    origin = typing.get_origin(tp)
    if origin is dict:
        return _unwrap(typing.get_args(tp)[1])
    if origin in (list, tuple):
        return _unwrap(typing.get_args(tp)[0])
    return None


def _unwrap(tp: Any) -> Any:
    """``X | None`` and ``Annotated[X, ...]`` → X, so the walk can go on into X's fields."""
    if tp is Param:
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return _unwrap(args[0]) if len(args) == 1 else tp
    if typing.get_origin(tp) is typing.Annotated:
        return _unwrap(args[0])
    return tp


def _valid_keys_hint(key: str, model: type[BaseModel] | None) -> str:
    if model is None:
        return "remove it"
    valid = [field.alias or name for name, field in model.model_fields.items()]
    close = difflib.get_close_matches(key, valid, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"{guess}valid keys here: {', '.join(valid)}"


# ---- rules pydantic cannot express: knob names, value types per knob, ranges ---------------------------------------


def _check_semantics(space: SearchSpace, source: str) -> None:
    def fail(path: str, problem: str, fix: str) -> typing.NoReturn:
        raise SpaceError(source, path, problem, fix)

    for engine in space.engines:
        if engine not in ENGINES:
            fail(f"engines.{engine}", f"unknown engine {brief_repr(engine)}", f"use one of: {', '.join(ENGINES)}")
    _check_fixed(space.fixed, "fixed", fail)
    _check_params(space.params, "params", fail)
    for engine, section in space.engines.items():
        prefix = f"engines.{engine}"
        _check_fixed(section.fixed, f"{prefix}.fixed", fail)
        _check_params(section.params, f"{prefix}.params", fail)
        _check_version(section.version, f"{prefix}.version", fail)
        _check_overlaps(space, engine, fail)
        try:
            space.default_point(engine)
        except ValidationError as exc:  # each value was checked above; what is left is a required knob
            knob = ".".join(str(p) for p in exc.errors()[0]["loc"])
            fail(f"{prefix}.fixed", f"knob {knob!r} is not set for engine {engine}", f"add {knob}: … under fixed:")
    if space.simulate and space.simulate.performance_model == "table":
        _check_table(space.simulate.table or "", fail)


def _check_table(path: str, fail) -> None:
    from autotune.sim.models import read_table

    try:
        read_table(path)
    except UsageError as exc:
        fail("simulate.table", str(exc).split("; fix:")[0], 'give a CSV in the table format (README "Table model")')


def _check_version(version: str | None, path: str, fail) -> None:
    if version is not None:
        try:
            knob_adapter("engine_version").validate_python(version)
        except ValidationError as exc:
            fail(path, exc.errors()[0]["msg"], "write the engine's release, e.g. 0.13.0")


def _unknown_knob(name: str, path: str, fail, allowed: list[str]) -> None:
    if name in _STRUCTURAL_KNOBS:
        fail(path, f"{brief_repr(name)} cannot be set here", _STRUCTURAL_KNOBS[name])
    close = difflib.get_close_matches(name, allowed, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    fail(path, f"unknown knob {brief_repr(name)}", f"{guess}`autotune knobs` lists them ({', '.join(allowed)})")


def _check_value(knob: str, value: Any, path: str, fail) -> None:
    try:
        knob_adapter(knob).validate_python(value, strict=not isinstance(value, (dict, list)))
    except ValidationError as exc:
        error = exc.errors()[0]
        for item in error["loc"]:  # into a mapping or list (env, extra_args): name the bad entry, echo only it
            if isinstance(value, dict) and item in value:
                path, value = f"{path}.{item}", value[item]
            elif isinstance(value, list) and isinstance(item, int) and 0 <= item < len(value):
                path, value = f"{path}[{item}]", value[item]
        problem = lowercase_first(error["msg"])
        fail(path, f"{brief_repr(value)} is not a valid {knob}: {problem}", f"give a valid value for {knob}")


def _check_fixed(fixed: dict[str, Any], path: str, fail) -> None:
    for knob, value in fixed.items():
        if knob not in _SERVER_KNOBS:
            _unknown_knob(knob, f"{path}.{knob}", fail, _SERVER_KNOBS)
        _check_value(knob, value, f"{path}.{knob}", fail)


def _check_params(params: dict[str, Any], path: str, fail) -> None:
    knobs = _SERVER_KNOBS + list(CLIENT_KNOBS)
    for name, param in params.items():
        here = f"{path}.{name}"
        if name == ENGINE_PARAM:
            fail(here, "'engine' is chosen from the engines: section", "list the engines under engines:")
        if isinstance(param, TiedParam):
            if name in KNOBS:
                fail(here, f"a tied group is named after the knob {brief_repr(name)}", "name the group, e.g. layout")
            for i, option in enumerate(param.tied):
                for knob, value in option.items():
                    if knob not in knobs:
                        _unknown_knob(knob, f"{here}.tied[{i}].{knob}", fail, knobs)
                    _check_value(knob, value, f"{here}.tied[{i}].{knob}", fail)
            if param.default is None:
                fail(
                    f"{here}.default",
                    "a tied group needs a default option (the engine's baseline runs it)",
                    "add default: {…}",
                )
            if param.default not in param.tied:
                fail(
                    f"{here}.default",
                    f"{brief_repr(param.default)} is not one of the tied options",
                    "copy one option verbatim",
                )
            continue
        if name not in knobs:
            _unknown_knob(name, here, fail, knobs)
        _check_param_values(name, param, here, fail)


def _check_param_values(knob: str, param: Any, path: str, fail) -> None:
    if isinstance(param, ChoiceParam):
        if len(set(map(repr, param.choices))) != len(param.choices):
            fail(f"{path}.choices", "a value is listed twice", "list each value once")
        for i, value in enumerate(param.choices):
            if value is not None:
                _check_value(knob, value, f"{path}.choices[{i}]", fail)
        if param.default not in param.choices:
            null = " (no default means null: leave the knob to the engine)" if param.default is None else ""
            fail(
                f"{path}.default",
                f"{brief_repr(param.default)} is not among the choices{null}",
                "pick one of the choices",
            )
        return
    kind = "int" if isinstance(param, IntParam) else "float"
    low, high = param.bounds
    for bound in (low, high):
        _check_value(knob, bound, f"{path}.{kind}", fail)
    if not low <= high or (isinstance(low, float) and not math.isfinite(high - low)):
        fail(
            f"{path}.{kind}",
            f"empty range [{brief_repr(low)}, {brief_repr(high)}]",
            "write [low, high] with low <= high",
        )
    if param.log and low <= 0:
        fail(f"{path}.{kind}", f"a log range must start above 0, got {brief_repr(low)}", "raise low or drop log: true")
    if param.log and (param.step not in (None, 1)):
        fail(f"{path}.step", "log: true cannot be combined with a step", "drop one of them")
    if param.step is not None and param.step > high - low and low != high:
        fail(
            f"{path}.step",
            f"step {brief_repr(param.step)} is wider than the range [{brief_repr(low)}, {brief_repr(high)}]",
            "use a smaller step",
        )
    if param.default is None:
        fail(
            f"{path}.default",
            "a range needs a default (the engine's baseline runs it)",
            "add default: VALUE in the range",
        )
    if not low <= param.default <= high:
        fail(
            f"{path}.default",
            f"{brief_repr(param.default)} is outside [{brief_repr(low)}, {brief_repr(high)}]",
            "pick a default inside the range",
        )


def _check_overlaps(space: SearchSpace, engine: str, fail) -> None:
    places: dict[str, str] = {}

    def claim(knob: str, path: str) -> None:
        if knob in places:
            fail(path, f"knob {knob!r} is also set by {places[knob]}", "set each knob in one place only")
        places[knob] = path

    for section, fixed in (("fixed", space.fixed), (f"engines.{engine}.fixed", space.engines[engine].fixed)):
        for knob in fixed:
            claim(knob, f"{section}.{knob}")
    for name, param in space.engine_params(engine).items():
        short = name.split(".", 1)[-1]
        path = f"params.{short}" if name in space.params else f"engines.{engine}.params.{short}"
        knobs = {k for option in param.tied for k in option} if isinstance(param, TiedParam) else {short}
        for knob in sorted(knobs):
            claim(knob, path)
