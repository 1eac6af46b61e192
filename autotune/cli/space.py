"""``autotune space validate|show FILE``."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli.options import JsonOpt, SpaceArg
from autotune.engines import broken_rules, get_engine
from autotune.engines.models import resolve_model
from autotune.search.preflight import check_before_launch
from autotune.space.files import find_space, load_space, shipped_spaces
from autotune.space.schema import ENUMERATION_LIMIT, ChoiceParam, FloatParam, IntParam, SearchSpace, TiedParam

app = typer.Typer(no_args_is_help=True, help="List, validate and inspect search spaces.")
# Beyond ENUMERATION_LIMIT points a fixed-seed uniform sample estimates the share the static rules reject.
_SAMPLE_SIZE = 2_000


@app.command(name="list")
def list_spaces(as_json: JsonOpt = False) -> None:
    """The spaces shipped with autotune: name, engines, whether simulated, and what each is for."""
    rows = []
    for name, path in shipped_spaces().items():
        space = load_space(path)
        rows.append({"name": name, "engines": list(space.engines), "simulated": space.simulate is not None,
                     "description": space.description or "", "path": str(path)})  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table("name", "engines", "simulated", "description")
    for row in rows:
        table.add_row(row["name"], ", ".join(row["engines"]), "yes" if row["simulated"] else "no",
                      escape(row["description"]))  # fmt: skip
    Console().print(table)


@app.command()
def validate(file: SpaceArg) -> None:
    """Check a space and what its first launch needs (the workload's file, the model's tokenizer, files the engine
    reads); exit 2 with one line naming the key path or the missing thing, and the fix."""
    space = load_space(file)
    check_before_launch(space, find_space(file))
    sizes = ", ".join(f"{engine}: {_count(space.size(engine))}" for engine in space.engines)
    print(f"{file}: valid ({sizes} points)")


@app.command()
def show(file: SpaceArg, as_json: JsonOpt = False) -> None:
    """Parameters, size of the space per engine, the static rules that apply, and how many points they reject."""
    space = load_space(file)
    summary = summarize(space)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    _print_summary(summary, Console())


def summarize(space: SearchSpace) -> dict[str, Any]:
    """Everything ``show`` prints, as plain data."""
    engines = {}
    for name, section in space.engines.items():
        adapter = get_engine(name, section.executable)
        default = space.default_point(name).server
        engines[name] = {
            "version": str(adapter.version(default)),
            "executable": list(adapter.executable),
            "model": _model_note(default.model),
            "fixed": {**space.fixed, **section.fixed},
            "params": {param: _describe(p) for param, p in space.engine_params(name).items()},
            "size": _count(space.launch_size(name)),  # launch configurations; each is swept over the loads
            "loads": len(space.load_levels(name)),
            "rejected_by_rules": _rejected_share(space, name),
            "rules": {rule.name: rule.description for rule in adapter.rules},
        }
    return {
        "name": space.name,
        "hardware": space.hardware.model_dump(),
        "engines": engines,
        "workload": space.workload.model_dump(mode="json"),
        "objective": space.objective.model_dump(mode="json"),
    } | ({"workloads": [w.model_dump(mode="json") for w in space.workloads]} if space.workloads else {})


def _model_note(model: str) -> str:
    info = resolve_model(model)
    if info is None:
        return f"{model} (unknown: no model-specific rules)"
    return f"{model} ({info.architecture}, from {info.source})"


def _describe(param: Any) -> str:
    if isinstance(param, ChoiceParam):
        text = f"choices {json.dumps(param.choices)}"
    elif isinstance(param, TiedParam):
        text = "tied " + " | ".join(param.labels())
    elif isinstance(param, IntParam | FloatParam):
        kind = "int" if isinstance(param, IntParam) else "float"
        text = f"{kind} [{param.bounds[0]}, {param.bounds[1]}]" + (f" step {param.step}" if param.step else "")
        text += " log" if param.log else ""
    return text + f" (default {json.dumps(param.default_value())})"


def _count(size: float) -> int | str:
    return "continuous" if math.isinf(size) else int(size)


def _rejected_share(space: SearchSpace, engine: str) -> dict[str, Any]:
    """The share of the space the static rules reject before launch: counted exactly, or estimated from a sample."""
    exact = space.launch_size(engine) <= ENUMERATION_LIMIT
    rng = random.Random(0)
    points = (
        space.enumerate(engine, launches_only=True)
        if exact
        else (space.random_point(engine, rng) for _ in range(_SAMPLE_SIZE))
    )
    rules = list(broken_rules(engine, (p.server for p in points), space.hardware))
    rejected = sum(rule is not None for rule in rules)
    return {"rejected": rejected, "checked": len(rules), "exact": exact, "share": rejected / len(rules)}


def _print_summary(summary: dict[str, Any], console: Console) -> None:
    console.print(f"[bold]{summary['name'] or 'search space'}[/] on {summary['hardware']}")
    for name, info in summary["engines"].items():
        table = Table(title=f"{name} {info['version']} — {info['model']}", title_justify="left")
        table.add_column("parameter")
        table.add_column("values")
        for param, text in info["params"].items():
            table.add_row(param, escape(text))
        for knob, value in info["fixed"].items():
            table.add_row(f"[dim]{knob}[/]", f"[dim]fixed {escape(json.dumps(value))}[/]")
        console.print(table)
        rejected = info["rejected_by_rules"]
        how = "" if rejected["exact"] else f" (estimated from {rejected['checked']} random points)"
        console.print(
            f"size: {info['size']} launch configurations × {info['loads']} loads; static rules reject {rejected['share']:.0%} before any launch{how}"
        )
        rules = Table("static rule (checked before launch)", "what it requires", title_justify="left")
        for rule, text in info["rules"].items():
            rules.add_row(rule, text)
        console.print(rules)
    console.print(escape(f"workload: {summary['workload']}"))
    console.print(escape(f"objective: {summary['objective']}"))
