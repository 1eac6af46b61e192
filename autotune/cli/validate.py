"""``autotune study validate NAME``: the reference (best baseline) against the candidate (the best trial) on a workload
suite, each at the load its study chose, with repeats, intervals and the study's SLOs (method: autotune/evidence/validate.py)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import optuna
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune import records
from autotune.bench import datasets
from autotune.cli.command import parse_assignments
from autotune.cli.options import JsonOpt, StorageOpt, StudyOpt, load_study
from autotune.config import ServerConfig
from autotune.errors import UsageError
from autotune.evidence.validate import (
    CONFIDENCES,
    Contender,
    NamedWorkload,
    Step,
    context_of,
    load_text,
    misses_text,
    seed_suite,
    study_suite,
    validate,
    workload_slo,
)
from autotune.search.ranking import best_of, best_trial, maximizes
from autotune.settings import Settings
from autotune.space.files import load_space
from autotune.space.schema import Objective, SearchSpace, Workload
from autotune.text import shorten
from autotune.yamlload import AliasBomb, load_yaml

_LOAD_KEYS = ("max_concurrency", "request_rate")  # a workload in a --workloads file that sets one keeps its own load
_REASON_WIDTH = 300  # characters of why a --workloads file was refused (a bad value can be megabytes)


def validate_command(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    workloads: Annotated[
        Path | None,
        typer.Option(
            help="YAML list of workloads instead of the six: each a mapping of workload keys plus `name` "
            "(one that sets max_concurrency or request_rate is measured at that load for both)"
        ),
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
    """Measure the reference and the candidate with repeats on the study's workloads where its space has several;
    else on six: the space's own, then random prompts of 128/4, 2000/100, 4000/200, 32000/100 and 1000/2000
    input/output tokens (shortened to fit the context; prompt counts scaled by the space's num_prompts / 1000).
    Each configuration is measured at the load its study chose for it on each workload (its max_concurrency /
    request_rate), and the SLOs (a workload's own, else the study's) are judged on the means: a miss is shown.
    Prints a table with intervals, marking gains within noise, and saves studies/NAME/validate.json."""
    if confidence not in CONFIDENCES:
        raise UsageError(f"--confidence {confidence}: expected one of {', '.join(map(str, CONFIDENCES))}")
    study = load_study(study_name, storage)
    name = study.study_name
    space = _space_of(study)
    contenders = {"reference": _contender(study, space, reference), "candidate": _contender(study, space, candidate)}
    if set_:
        changed = ServerConfig.model_validate(contenders["candidate"].config.model_dump() | parse_assignments(set_))
        contenders["candidate"] = Contender(changed, contenders["candidate"].load,
                                            f"{contenders['candidate'].source} with --set",
                                            contenders["candidate"].workload_loads)  # fmt: skip
    # a study of several workloads validates on its own; else the seed's six
    suite = (_workloads(workloads) if workloads else study_suite(space) if space.is_mix
             else seed_suite(space, context_of(contenders["reference"].config)))  # fmt: skip
    for named in suite:  # a bad prompt file is refused before any launch
        datasets.check(named.workload)
    objective = _objective(study, space)
    console = Console(stderr=True)
    slo = slo_text(suite, objective)
    console.print(_plan(contenders, slo, len(suite), repeats), highlight=False, soft_wrap=True)
    workdir = Settings().studies_dir / name / "validate"
    with _progress(console) as on_step:
        rows = validate(space, contenders["reference"], {"candidate": contenders["candidate"]}, suite, repeats,
                        workdir, confidence, on_step, objective)  # fmt: skip
    (Settings().studies_dir / name).mkdir(parents=True, exist_ok=True)
    record = {"study": name, "simulated": space.simulate is not None, "repeats": repeats,
              "metric": objective.metrics[0].name, "slo": dict(objective.slo),
              "workload_slo": {named.name: workload_slo(named, objective) for named in suite}}  # fmt: skip
    for label, contender in contenders.items():
        record |= {
            label: contender.config.knobs(),
            f"{label}_load": contender.load,
            f"{label}_source": contender.source,
        } | ({f"{label}_workload_loads": contender.workload_loads} if contender.workload_loads else {})
    record["rows"] = rows
    (Settings().studies_dir / name / "validate.json").write_text(json.dumps(record, indent=1, default=str))
    if as_json:
        print(json.dumps(record, indent=1, default=str))
        return
    table = _table(rows, "SIMULATED " if space.simulate else "", confidence, contenders, objective, slo)
    Console(width=max(Console().width, 140)).print(table)


def slo_text(suite: list[NamedWorkload], objective: Objective) -> str:
    """The SLOs the suite is judged by: the objective's, or each workload's where one has its own."""
    if all(named.workload.slo is None for named in suite):
        return ", ".join(f"{metric} ≤ {limit:g}" for metric, limit in objective.slo.items()) or "none"
    return "; ".join(f"{named.name}: " + (", ".join(f"{m} ≤ {limit:g}" for m, limit in slo.items()) or "none")
                     for named in suite for slo in [workload_slo(named, objective)])  # fmt: skip


def _plan(contenders: dict[str, Contender], slo: str, workloads: int, repeats: int) -> str:
    """One line: what is compared, at which loads, under which SLOs, and how many measurements that takes."""
    sides = ", ".join(f"{label} {c.source} at {_loads_text(c)}" for label, c in contenders.items())
    return (f"validate: {sides}; SLOs: {slo}; {workloads} workload(s) × {repeats} repeats × {len(contenders)} "
            f"configurations")  # fmt: skip


@contextlib.contextmanager
def _progress(console: Console) -> Iterator[Callable[[Step], None]]:
    """A live progress bar on a terminal; one plain line per launch and per workload measured otherwise."""
    if not console.is_terminal:
        yield lambda step: console.print(f"validate [{step.done}/{step.total} done] {step.text()}", highlight=False,
                                         soft_wrap=True)  # fmt: skip
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("validating", total=None)

        def show(step: Step) -> None:
            progress.update(task, description=step.text(), completed=step.done, total=step.total)

        yield show


def _objective(study: optuna.Study, space: SearchSpace) -> Objective:
    """The study's objective and SLOs as it was run (stored at its creation), else the space file's."""
    stored = records.StudyRecord.of(study).objective
    return Objective.model_validate(stored) if stored else space.objective


def _space_of(study: optuna.Study) -> SearchSpace:
    path = records.StudyRecord.of(study).space_path
    if not path or not Path(path).exists():
        raise UsageError(f"study {study.study_name!r}: its space file {path!r} is gone; fix: restore it")
    return load_space(Path(path))


def _contender(study: optuna.Study, space: SearchSpace, which: str) -> Contender:
    """The configuration of a trial, rebuilt from the space (secrets included, unlike the stored copy), at the load the
    trial's sweep chose; a trial that served no load is measured at the space's default load."""
    trials = study.get_trials(deepcopy=False)
    if which == "best":
        trial = best_trial(study)
    elif which == "baseline":
        trial = best_of((t for t in trials if records.is_baseline(t)), maximizes(study))
    elif which.isdigit() and int(which) < len(trials):
        trial = trials[int(which)]
    else:
        raise UsageError(f"{which!r}: expected best, baseline or a trial number below {len(trials)}")
    if trial is None:
        raise UsageError(f"study {study.study_name!r} has no feasible {which} trial to validate")
    point = space.point_from_params(trial.params)
    role = "" if which.isdigit() else f" ({which})"
    if (load := records.chosen_load(trial)) is not None:
        per_workload = {r.name: dict(r.load) for r in records.workload_results(trial) if r.load is not None}
        return Contender(point.server, dict(load), f"trial {trial.number}{role}", per_workload)
    return Contender(point.server, dict(point.client), f"trial {trial.number}{role}, which served no load")


def _loads_text(contender: Contender) -> str:
    """The contender's load, or each workload's of a several-workload study (``chat: max_concurrency=16, ...``)."""
    if not contender.workload_loads:
        return load_text(contender.load)
    return "; ".join(f"{name}: {load_text(load)}" for name, load in contender.workload_loads.items())


def _workloads(path: Path) -> list[NamedWorkload]:
    try:
        items = load_yaml(path.read_text())
        return [NamedWorkload(item.pop("name"), Workload.model_validate(item), any(k in item for k in _LOAD_KEYS))
                for item in items]  # fmt: skip
    except AliasBomb as exc:
        raise UsageError(f"{path}: line {exc.problem_mark.line + 1}: {exc.problem}; fix: {exc.fix}") from None
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValidationError) as exc:
        reason = shorten(str(exc), _REASON_WIDTH)  # one line, however long the bad value
        raise UsageError(
            f"{path}: not a YAML list of workloads with names ({reason}); fix: see docs/evidence.md, section study validate"
        ) from None


def _table(rows: list[dict], simulated: str, confidence: float, contenders: dict[str, Contender],
           objective: Objective, slo: str) -> Table:  # fmt: skip
    metric = objective.metrics[0].name
    # the first SLO's metric that every row has (workloads may have SLOs of their own), else mean TPOT
    latency = next(
        (m for m in (rows[0]["slo"] if rows else {}) if all(m in row["slo"] for row in rows)), "mean_tpot_ms"
    )
    short = {"total_token_throughput": "tok/s", "output_throughput": "output tok/s"}.get(metric, metric)
    title = f"{simulated}reference vs candidate: {short} and {latency} (mean ± {confidence:.0%} interval)"
    caption = "; ".join(f"{label}: {c.source} at {_loads_text(c)}" for label, c in contenders.items())
    table = Table(title=title, caption=f"{caption}; SLOs: {slo}")
    for column in ("workload", f"reference {short}", latency, f"candidate {short}", latency, "gain", "verdict", "SLOs"):
        table.add_column(column, justify="left" if column in ("workload", "verdict", "SLOs") else "right")
    for row in rows:
        table.add_row(row["workload"], _pm(row, f"reference_{metric}"), _pm(row, f"reference_{latency}"),
                      _pm(row, f"candidate_{metric}"), _pm(row, f"candidate_{latency}"),
                      f"{row['gain_pct']:+.2f}% ± {row['gain_ci_pct']:.2f}", row["verdict"], _slo_cell(row))  # fmt: skip
    return table


def _slo_cell(row: dict) -> str:
    """'met', 'none', or who misses which SLO: the gain of a side that misses one is not the study's gain."""
    if not row["slo"]:
        return "none"
    misses = [f"{label} misses {misses_text(row[f'{label}_slo_misses'], row['slo'])}"
              for label in ("reference", "candidate") if row[f"{label}_slo_misses"]]  # fmt: skip
    return "[red]" + "; ".join(misses) + "[/]" if misses else "met"


def _pm(row: dict, key: str) -> str:
    half = row[f"{key}_ci"]
    return f"{row[key]:.1f} ± {half:.1f}" if math.isfinite(half) else f"{row[key]:.1f}"
