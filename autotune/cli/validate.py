"""``autotune study validate NAME``: the reference (best baseline) against the candidate (the best trial) on a workload
suite, with repeats and intervals (method: autotune/validate.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import optuna
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from autotune.cli.command import parse_assignments
from autotune.cli.options import JsonOpt, StorageOpt, StudyOpt, load_study
from autotune.config import ServerConfig
from autotune.errors import UsageError
from autotune.ranking import best_of, best_trial, maximizes
from autotune.settings import Settings
from autotune.space import SearchSpace, Workload
from autotune.spacefile import load_space
from autotune.validate import CONFIDENCES, NamedWorkload, context_of, seed_suite, validate


def validate_command(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    workloads: Annotated[
        Path | None,
        typer.Option(help="YAML list of workloads instead of the six: each a mapping of workload keys plus `name`"),
    ] = None,
    repeats: Annotated[
        int, typer.Option(min=2, help="launches of each configuration (at least 2, for an interval)")
    ] = 3,
    reference: Annotated[
        str, typer.Option(help="'baseline' (the best engine baseline) or a trial number")
    ] = "baseline",
    candidate: Annotated[str, typer.Option(help="'best', 'baseline' or a trial number")] = "best",
    set_: Annotated[list[str] | None, typer.Option("--set", help="knob=value applied to the candidate")] = None,
    confidence: Annotated[float, typer.Option(help="interval confidence: 0.95 or 0.99")] = 0.95,
    as_json: JsonOpt = False,
) -> None:
    """Measure the reference and the candidate with repeats on six workloads: the space's own, then random prompts of
    128/4, 2000/100, 4000/200, 32000/100 and 1000/2000 input/output tokens (shortened to fit the context; prompt
    counts scaled by the space's num_prompts / 1000). Prints a table with intervals, marking gains within noise, and
    saves studies/NAME/validate.json."""
    if confidence not in CONFIDENCES:
        raise UsageError(f"--confidence {confidence}: expected one of {', '.join(map(str, CONFIDENCES))}")
    study = load_study(study_name, storage)
    name = study.study_name
    space = _space_of(study)
    configs = {"reference": _config(study, space, reference), "candidate": _config(study, space, candidate)}
    if set_:
        configs["candidate"] = ServerConfig.model_validate(configs["candidate"].model_dump() | parse_assignments(set_))
    suite = _workloads(workloads) if workloads else seed_suite(space, context_of(configs["reference"]))
    console = Console(stderr=True)
    workdir = Settings().studies_dir / name / "validate"
    with console.status("validating") as status:
        rows = validate(space, configs["reference"], {"candidate": configs["candidate"]}, suite, repeats, workdir,
                        confidence, lambda step: status.update(f"validating: {step}"))  # fmt: skip
    (Settings().studies_dir / name).mkdir(parents=True, exist_ok=True)
    record = {"study": name, "simulated": space.simulate is not None, "repeats": repeats,
              "reference": configs["reference"].knobs(), "candidate": configs["candidate"].knobs(), "rows": rows}  # fmt: skip
    (Settings().studies_dir / name / "validate.json").write_text(json.dumps(record, indent=1, default=str))
    if as_json:
        print(json.dumps(record, indent=1, default=str))
        return
    Console(width=max(Console().width, 140)).print(_table(rows, "SIMULATED " if space.simulate else "", confidence))


def _space_of(study: optuna.Study) -> SearchSpace:
    path = study.user_attrs.get("space_path")
    if not path or not Path(path).exists():
        raise UsageError(f"study {study.study_name!r}: its space file {path!r} is gone; fix: restore it")
    return load_space(Path(path))


def _config(study: optuna.Study, space: SearchSpace, which: str) -> ServerConfig:
    """The configuration of a trial, rebuilt from the space (secrets included, unlike the stored copy)."""
    trials = study.get_trials(deepcopy=False)
    if which == "best":
        trial = best_trial(study)
    elif which == "baseline":
        trial = best_of((t for t in trials if t.user_attrs.get("baseline")), maximizes(study))
    elif which.isdigit() and int(which) < len(trials):
        trial = trials[int(which)]
    else:
        raise UsageError(f"{which!r}: expected best, baseline or a trial number below {len(trials)}")
    if trial is None:
        raise UsageError(f"study {study.study_name!r} has no feasible {which} trial to validate")
    return space.point_from_params(trial.params).server


def _workloads(path: Path) -> list[NamedWorkload]:
    try:
        items = yaml.safe_load(path.read_text())
        return [NamedWorkload(item.pop("name"), Workload.model_validate(item)) for item in items]
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValidationError) as exc:
        raise UsageError(f"{path}: not a YAML list of workloads with names ({exc}); fix: see README") from None


def _table(rows: list[dict], simulated: str, confidence: float) -> Table:
    title = f"{simulated}reference vs candidate: total tok/s and mean TPOT (mean ± {confidence:.0%} interval)"
    table = Table(title=title)
    for column in ("workload", "reference tok/s", "TPOT ms", "candidate tok/s", "TPOT ms", "gain", "verdict"):
        table.add_column(column, justify="left" if column in ("workload", "verdict") else "right")
    for row in rows:
        table.add_row(row["workload"], _pm(row, "reference_total_token_throughput"), _pm(row, "reference_mean_tpot_ms"),
                      _pm(row, "candidate_total_token_throughput"), _pm(row, "candidate_mean_tpot_ms"),
                      f"{row['gain_pct']:+.2f}% ± {row['gain_ci_pct']:.2f}", row["verdict"])  # fmt: skip
    return table


def _pm(row: dict, key: str) -> str:
    half = row[f"{key}_ci"]
    return f"{row[key]:.1f} ± {half:.1f}" if math.isfinite(half) else f"{row[key]:.1f}"
