"""``autotune study run|list|show|best``."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path
from typing import Annotated

import optuna
import typer
from rich.console import Console
from rich.table import Table

from autotune.cli import run_summary
from autotune.cli.best_view import print_best
from autotune.cli.options import GPUS_HELP, JsonOpt, StorageOpt, StudyOpt, load_study, storage_url, storage_urls
from autotune.cli.progress import StudyProgress, study_counts
from autotune.cli.trial_line import print_trial_line, trial_line
from autotune.cli.warm import WARM_HELP, WARM_STORAGE_HELP, print_warm, warm_sources
from autotune.cli.workloads_view import (
    mix_fields,
    print_workloads,
    workload_misses,
    workload_slos,
)
from autotune.errors import UsageError
from autotune.records import StudyRecord, TrialRecord
from autotune.search import budget, calibration
from autotune.search.improvement import chance_to_improve
from autotune.search.names import study_name
from autotune.search.ranking import best_trial, feasible
from autotune.search.study import DEFAULT_TRIALS, RunOptions, open_storage, prepare_study
from autotune.search.workers import concurrent_trials, run_node, run_trials
from autotune.serving.gpus import parse_gpus
from autotune.settings import Settings
from autotune.space.files import find_space, load_space
from autotune.text import shorten

app = typer.Typer(no_args_is_help=True, help="Run and inspect tuning studies.")
DEFAULT_SPACE = "quickstart"


@app.command()
def run(
    space_ref: Annotated[
        str,
        typer.Argument(
            metavar="SPACE",
            help="search space: a YAML file or a shipped space's name (`autotune space "
            "list`); default: quickstart, a simulated study that needs no GPU",
        ),
    ] = DEFAULT_SPACE,
    study: Annotated[str | None, typer.Option("--study", "-s", help="study name (default: the space's name)")] = None,
    storage: StorageOpt = None,
    n_trials: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="the study's budget of launches in all, baselines included (duplicates and rejected configurations "
            "launch nothing and do not count; a study whose space is exhausted stops sooner); it sets an existing "
            "study's budget, lower too; a study that already has that many runs none (default: a new study the "
            f"space's `trials`, else {DEFAULT_TRIALS}; an existing one keeps its budget); see --more",
        ),
    ] = None,
    more: Annotated[
        int | None, typer.Option(min=1, help="instead of --n-trials: add this many launches to the study's budget")
    ] = None,
    timeout: Annotated[float | None, typer.Option(min=0, help="seconds after which no new trial starts")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the sampler (same seed, same suggestions)")] = None,
    executable: Annotated[
        str | None, typer.Option(help="command that starts the engine, e.g. '/opt/venv/bin/vllm' (one-engine spaces)")
    ] = None,
    budget_node_hours: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="stop starting trials once they cost this many node-hours (launches, benchmarks, "
            "failures; wall time on real engines)",
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help=f"the node's GPUs for this study: {GPUS_HELP}; trials run at once on disjoint GPUs, each engine "
            "seeing its own (CUDA_VISIBLE_DEVICES); default: the space's hardware.gpus given to one trial at a time",
        ),
    ] = None,
    warm_start: Annotated[str | None, typer.Option(metavar="STUDY[,STUDY...]|auto", help=WARM_HELP)] = None,
    warm_start_storage: Annotated[str | None, typer.Option(metavar="URL", help=WARM_STORAGE_HELP)] = None,
    stop_when_unlikely: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=1,
            metavar="P",
            help="stop once the chance that an untried configuration beats the best by more than the noise (the "
            "live display's 'chance to improve') falls below P, e.g. 0.05",
        ),
    ] = None,
) -> None:
    """Run a study: launch each trial's engine for real, benchmark it, learn from crashes, prune slow ones."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if n_trials is not None and more is not None:
        raise UsageError("--n-trials and --more both given; fix: --n-trials for the budget in all, --more to add")
    space_file = find_space(space_ref)
    space = load_space(space_file)
    given = n_trials  # --n-trials given sets an existing study's budget, lower too; else the stored budget stays
    n_trials = more or n_trials or space.trials or DEFAULT_TRIALS
    origin = "--study" if study is not None else f"the space's name in {space_file.name}"  # '' is refused, not skipped
    name = study_name(study if study is not None else space.name or space_file.stem, origin)
    executables = {}
    if executable:
        if len(space.engines) > 1:
            raise UsageError("--executable needs a one-engine space; fix: set engines.<name>.executable in the space")
        executables[next(iter(space.engines))] = shlex.split(executable)
    settings = Settings()
    console = Console(stderr=True)
    sources = warm_sources(
        warm_start, warm_start_storage, space, name, console, run_storage=storage, space_path=space_file
    )
    options = RunOptions(name=name, storage=storage_url(name, storage), studies_dir=settings.studies_dir,
                         n_trials=n_trials, more_trials=more or 0, timeout_s=timeout, seed=seed, executables=executables,
                         heartbeat_s=settings.heartbeat_s, gpus=parse_gpus(gpus) if gpus else None,
                         budget_node_minutes=None if budget_node_hours is None else budget_node_hours * 60,
                         warm_start=sources, n_trials_given=given is not None,
                         stop_when_unlikely=stop_when_unlikely)  # fmt: skip
    workers = concurrent_trials(space, options.gpus, executables) if options.gpus else 1
    try:
        result = _run(space, space_file, options, workers, console)
    except KeyboardInterrupt:
        console.print(f"interrupted; rerun the same command to resume ({run_summary.resume_hint(name, storage)})",
                      markup=False, soft_wrap=True)  # fmt: skip
        raise typer.Exit(130) from None
    chance = chance_to_improve(result, space)  # once: the stop line and the summary both say it
    if stopped := (_over_n_trials_line(result, given) or budget.stop_line(result, budget.LaunchCatalogue(space))
                   or _timeout_line(result, options) or run_summary.unlikely_line(result, chance, options)):  # fmt: skip
        console.print(stopped, soft_wrap=True, markup=False)  # one line, unwrapped
    print_best(result)
    for line in run_summary.after_lines(result, space, storage, chance):
        print(line)


def _run(space, space_file: Path, options: RunOptions, workers: int, console: Console) -> optuna.Study:
    """The study's trials, with their progress on ``console``; the study once they are done."""
    with StudyProgress(console, options.budget_node_minutes,
                       header=run_summary.header(space, space_file, options)) as progress:  # fmt: skip
        if workers > 1:
            console.print(f"{workers} workers on GPUs {','.join(options.gpus)}, their trials at once on disjoint GPUs")
            result = run_node(space, space_file, options, workers, print_trial_line,
                              lambda study: progress.node_progress(study_counts(study)), progress.status)  # fmt: skip
        else:
            prepared = prepare_study(space, space_file, options, progress.status)
            print_warm(console, prepared.study)
            progress.update(study_counts(prepared.study))
            result = run_trials(prepared, lambda study, trial: progress.trial_finished(
                study_counts(study, space), trial_line(trial)))  # fmt: skip
    return result


def _over_n_trials_line(study: optuna.Study, given: int | None) -> str | None:
    """The line of a run whose --n-trials is below the launches the study has already (it runs none), or None."""
    if given is None:
        return None
    launches = budget.count(study.get_trials(deepcopy=False)).launches
    if launches <= given:
        return None
    return (f"study {study.study_name} has {launches} launches already, more than --n-trials {given}: nothing to "
            "run; fix: --more N to add launches")  # fmt: skip


def _timeout_line(study: optuna.Study, options: RunOptions) -> str | None:
    """The line a run that --timeout stopped before its budget was used up ends with, or None."""
    if options.timeout_s is None or options.budget_node_minutes is not None:  # the node-minutes may have stopped it
        return None
    launches, bought = budget.count(study.get_trials(deepcopy=False)).launches, budget.study_budget(study)
    if launches >= bought:
        return None
    return (f"timeout: no trial started after {options.timeout_s:g} s; {launches} launches of a budget of {bought}; "
            "the same `study run` again goes on")  # fmt: skip


@app.command(name="list")
def list_studies(storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Studies in a storage (default: $AUTOTUNE_STORAGE, else every SQLite study under studies/)."""
    rows = []
    for url in storage_urls(storage):
        opened = open_storage(url)
        for summary in optuna.get_all_study_summaries(opened):
            # Optuna's best trial ignores constraints: a rejected trial's pessimistic 0 would read as the best value
            incumbent = best_trial(optuna.load_study(study_name=summary.study_name, storage=opened))
            rows.append({"study": summary.study_name, "trials": summary.n_trials,
                         "best": incumbent.values[0] if incumbent else None,
                         "created": str(summary.datetime_start)})  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table("study", "trials", "best value", "started")
    for row in rows:
        best = "no feasible trial" if row["best"] is None else f"{row['best']:.2f}"
        table.add_row(row["study"], str(row["trials"]), best, row["created"])
    Console().print(table)


@app.command()
def show(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
    trial_number: Annotated[
        int | None, typer.Option("--trial", min=0, help="one trial in full: every parameter, each load measured, why")
    ] = None,
) -> None:
    """Every trial (value, outcome with the SLO it misses, node-minutes, load, the knobs it changed from its engine's
    baseline), failures by kind, learned rules; --trial N for one trial in full."""
    from autotune.cli.trials_table import plain, print_trial, print_trials, slo_miss_text
    from autotune.search.learning import learned_rules

    study = load_study(study_name, storage)
    name = study.study_name
    slos = StudyRecord.of(study).slo
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    per_workload = workload_slos(study)
    rows = [_trial_row(t) | {"slo_miss": workload_misses(t, per_workload) if per_workload else slo_miss_text(t, slos)}
            for t in trials.values()]  # fmt: skip
    console = Console()
    if trial_number is not None:
        if trial_number not in trials:
            raise UsageError(f"study {name!r} has no trial {trial_number}; fix: --trial 0 to {len(trials) - 1}")
        row = rows[list(trials).index(trial_number)]
        if as_json:
            print(json.dumps(row, indent=1, default=str))
            return
        print_trial(console, row, TrialRecord.of(trials[trial_number]).failure_reason or "")
        return
    failures = Counter(r["failure_kind"] for r in rows if r["failure_kind"])
    total = round(sum(r["node_minutes"] or 0 for r in rows), 2)
    on_failures = round(sum(r["node_minutes"] or 0 for r in rows if r["failure_kind"]), 2)
    rules = learned_rules(study)
    if as_json:
        record = StudyRecord.of(study)
        warm = record.model_dump(include={"warm_sources", "warm_weights", "upgrade_of", "identity"})
        errors = [e.model_dump() for e in record.calibration]
        print(json.dumps({"study": name, "trials": rows, "failures_by_kind": failures, "node_minutes": total,
                          "node_minutes_on_failures": on_failures, "learned_rules": rules, "warm": warm,
                          "calibration": errors,
                          "budget": budget.summary(study).model_dump()}, indent=1, default=str))  # fmt: skip
        return
    print_trials(console, name, rows)
    if per_workload:
        print_workloads(console, list(trials.values()))
    console.print(budget.summary_line(study))
    console.print("failures by kind: " + (", ".join(f"{k} {v}" for k, v in failures.items()) or "none"))
    console.print(f"node-minutes: {total:.1f} in all, {on_failures:.1f} on failures")
    for rule_id, rule in rules.items():
        reason = shorten(rule["reason"], 100)
        origin = f"trial {rule['trial']}" if rule["inherited_from"] is None else f"from {rule['inherited_from']}"
        console.print(plain(f"learned rule '{rule_id}' ({origin}, {rule['kind']}): {reason}"))
    print_warm(console, study)
    for line in calibration.summary(study):
        console.print(line, markup=False, soft_wrap=True)
    if (chance := chance_to_improve(study, run_summary.space_of(study))) is not None:
        console.print(chance.text(), markup=False)


def _trial_row(t: optuna.trial.FrozenTrial) -> dict:
    """The trial as `study show` shows it (and prints with --json): its record's fields, flat."""
    r = TrialRecord.of(t)
    failure_kind = None if r.failure_kind is None else str(r.failure_kind)
    row = {"number": t.number, "state": t.state.name, "feasible": feasible(t), "baseline": r.baseline,
            "prior": r.prior, "engine": r.engine, "params": t.params, "values": t.values, "load": r.load,
            "launched": r.launched, "benchmarks": [level.stored() for level in r.benchmarks],
            "node_minutes": r.node_minutes, "failure_kind": failure_kind, "rejected_by": r.rejected_by,
            "taught_rule": r.taught_rule, "duplicate_of": r.duplicate_of, "launch_s": r.launch_s,
            "benchmark_s": r.benchmark_s, "gpus": r.gpus, "engine_process": r.engine_process,
            "gpu_memory_mib": r.gpu_memory_mib, "warm_of": r.warm_of, "warm_predicted": r.warm_predicted,
            "calibrated_predicted": r.calibrated_predicted, "rechecks": r.rechecks}  # fmt: skip
    return row | mix_fields(r)


def _register_validate() -> None:
    from autotune.cli.validate import validate_command

    app.command(name="validate")(validate_command)


_register_validate()


@app.command()
def report(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default: studies/NAME/report.html)")] = None,
    csv: Annotated[Path | None, typer.Option(help="also write every trial as CSV")] = None,
    parquet: Annotated[Path | None, typer.Option(help="also write every trial as Parquet (needs pyarrow)")] = None,
) -> None:
    """One self-contained HTML report of a study (plotly figures, best command, baseline-vs-best table)."""
    from autotune.evidence.report import render_html, trials_frame
    from autotune.evidence.trials_csv import write_trials_csv

    study = load_study(study_name, storage)
    name = study.study_name
    out = out or Settings().studies_dir / name / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(study, best_trial(study)))
    print(out)
    if csv:
        write_trials_csv(study, csv)
        print(csv)
    if parquet:
        try:
            trials_frame(study).to_parquet(parquet, index=False)
        except ImportError:
            raise UsageError("--parquet needs pyarrow; fix: pip install pyarrow") from None
        print(parquet)


def _register_best_and_upgrade() -> None:
    """`study best` and `study upgrade` live in modules of their own (this one stays under 400 lines); registered
    here, after `report`, in the order the help lists them."""
    from autotune.cli.best_command import best
    from autotune.cli.upgrade import upgrade_command

    app.command(name="best")(best)
    app.command(name="upgrade")(upgrade_command)


_register_best_and_upgrade()
