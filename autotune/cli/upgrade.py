"""``autotune study upgrade --study OLD --version NEW``: the re-tune after an engine upgrade."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import optuna
import typer
from rich.console import Console
from rich.table import Table

from autotune import records
from autotune.cli.best_view import print_best
from autotune.cli.options import JsonOpt, StorageOpt, load_study, storage_url
from autotune.cli.trial_line import print_trial_line
from autotune.cli.warm import print_warm
from autotune.errors import UsageError
from autotune.evidence.regression import SINGLE_RUN_NOISE, RegressionRow, regression_rows, rows_text
from autotune.records import StudyRecord
from autotune.search import upgrade
from autotune.search.names import study_name
from autotune.search.study import DEFAULT_TRIALS, RunOptions, prepare_study
from autotune.search.warm_start import WarmSource
from autotune.search.workers import run_trials
from autotune.settings import Settings
from autotune.space.files import load_space


def upgrade_command(
    old_name: Annotated[str, typer.Option("--study", "-s", help="the study of the older engine version")],
    version: Annotated[
        str, typer.Option(help="the new version: X.Y.Z (a one-engine space) or ENGINE=X.Y.Z[,ENGINE=X.Y.Z]")
    ],
    new_name: Annotated[
        str | None, typer.Option("--new-study", help="the new study's name (default: OLD-VERSION)")
    ] = None,
    storage: StorageOpt = None,
    n_trials: Annotated[
        int | None, typer.Option(min=1, help="the new study's budget of launches (default: the old study's)")
    ] = None,
    executable: Annotated[
        str | None, typer.Option(help="command that starts the new engine version (one-engine spaces)")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the sampler")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-tune after an engine upgrade: launch the old study's best and baselines on the new version first, print
    the regression table (old version vs new, per configuration and workload), then go on with the search
    warm-started from the old study (its learned rules are re-checked once on the new version)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    console = Console(stderr=True)
    old = load_study(study_name(old_name, "--study"), storage)
    record = StudyRecord.of(old)
    if record.space_path is None or not Path(record.space_path).exists():
        raise UsageError(f"study {old.study_name!r}: its space file {record.space_path} is not there; fix: restore "
                         "it (the space the study was run with)")  # fmt: skip
    versions = upgrade.parse_versions(version, list(load_space(record.space_path).engines))
    upgrade.check_upgradable(old, versions)
    name = study_name(new_name or f"{old.study_name}-{'-'.join(versions.values())}", "--new-study")
    if name == old.study_name:
        raise UsageError(f"--new-study {name}: that is the old study; fix: another name")
    settings = Settings()
    space_file = upgrade.upgraded_space(Path(record.space_path), versions, settings.studies_dir / name / "space.yaml")
    space = load_space(space_file)
    executables = {}
    if executable:
        if len(space.engines) > 1:
            raise UsageError("--executable needs a one-engine space; fix: set engines.<name>.executable in the space")
        executables[next(iter(space.engines))] = shlex.split(executable)
    source = WarmSource(storage=storage or storage_url(old.study_name, None), study=old.study_name)
    total = n_trials or record.budget or DEFAULT_TRIALS
    first = min(total, upgrade.first_launches(space))
    options = RunOptions(name=name, storage=storage_url(name, storage), studies_dir=settings.studies_dir,
                         n_trials=first, seed=seed, executables=executables, heartbeat_s=settings.heartbeat_s,
                         warm_start=(source,))  # fmt: skip
    console.print(f"upgrade: {old.study_name} → {name} ({', '.join(f'{n} {v}' for n, v in versions.items())}); "
                  f"first the old best and baselines on the new version", markup=False)  # fmt: skip
    prepared = prepare_study(space, space_file, options)
    records.write_study(prepared.study, upgrade_of=old.study_name)
    print_warm(console, prepared.study)
    run_trials(prepared, print_trial_line)
    rows = regression_rows(old, prepared.study, space)
    if not as_json:
        Console().print(regression_table(rows, old.study_name, name, versions))
    if total > first:
        study = run_trials(prepare_study(space, space_file, _with_budget(options, total)), print_trial_line)
    else:
        study = prepared.study
    if as_json:
        print(json.dumps({"study": name, "upgrade_of": old.study_name, "versions": versions,
                          "regression": [row.model_dump() for row in rows]}, indent=1))  # fmt: skip
        return
    print_warm(console, study)
    print_best(study)


def _with_budget(options: RunOptions, total: int) -> RunOptions:
    import dataclasses

    return dataclasses.replace(options, n_trials=total)


def regression_table(rows: list[RegressionRow], old: str, new: str, versions: dict[str, str]) -> Table:
    """The regression table for the terminal."""
    table = Table(title=f"regression: {old} (old) vs {new} ({', '.join(f'{n} {v}' for n, v in versions.items())})",
                  caption=f"change: new vs old in the objective's direction, + = better; ± Welch 95% where "
                  f"both versions have repeats, else beyond ±{SINGLE_RUN_NOISE:.0%} is called")  # fmt: skip
    # numbers whole (an 80-column log must not cut them to "42…"); names and verdicts fold to fit
    for column in ("configuration", "workload", "old", "new", "change", "verdict"):
        number = column in ("old", "new", "change")
        table.add_column(column, justify="right" if number else "left", no_wrap=number, overflow="fold",
                         ratio=None if number else 2 if column == "configuration" else 1,
                         min_width=len(column) if number else 8)  # fmt: skip
    for row in rows:
        configuration, _, workload, *cells = rows_text(row)
        named = configuration if row.role == "baseline" else f"{row.role}: {configuration}"
        table.add_row(named, workload, *cells)
    return table
