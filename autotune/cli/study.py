"""``autotune study run|list|show|best``."""

from __future__ import annotations

import json
import math
import shlex
from collections import Counter
from pathlib import Path
from typing import Annotated

import optuna
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.config import ServerConfig
from autotune.errors import AutotuneError, UsageError
from autotune.export import docker_run, shell_script
from autotune.ranking import best_trial, feasible
from autotune.settings import Settings
from autotune.spacefile import load_space
from autotune.study import RunOptions, default_storage, open_storage, prepare_study, run_trials

app = typer.Typer(no_args_is_help=True, help="Run and inspect tuning studies.")
DEFAULT_SPACE = Path("search_spaces/quickstart.yaml")
DEFAULT_TRIALS = 8
StorageOpt = Annotated[str | None, typer.Option(help="Optuna storage URL (default: sqlite:///studies/NAME.db)")]
FormatOpt = Annotated[str, typer.Option("--format", help="shell, json or docker")]


def _storage(name: str, storage: str | None) -> str:
    return storage or default_storage(name, Settings().studies_dir)


@app.command()
def run(
    space_file: Annotated[Path, typer.Argument(help="search-space YAML")] = DEFAULT_SPACE,
    study: Annotated[str | None, typer.Option(help="study name (default: the space's name)")] = None,
    storage: StorageOpt = None,
    n_trials: Annotated[
        int | None,
        typer.Option(help=f"trials in the study, baselines included (default: the space's, else {DEFAULT_TRIALS})"),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="stop starting trials after this many seconds")] = None,
    seed: Annotated[int | None, typer.Option(help="sampler seed")] = None,
    executable: Annotated[str | None, typer.Option(help="how to invoke the engine (for a one-engine space)")] = None,
    budget_node_hours: Annotated[
        float | None, typer.Option(help="stop starting trials once the study's trials cost this many node-hours")
    ] = None,
) -> None:
    """Run a study: launch each trial's engine for real, benchmark it, learn from crashes, prune slow ones."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(space_file)
    n_trials = n_trials or space.trials or DEFAULT_TRIALS
    name = study or space.name or space_file.stem
    executables = {}
    if executable:
        if len(space.engines) > 1:
            raise UsageError("--executable needs a one-engine space; fix: set engines.<name>.executable in the space")
        executables[next(iter(space.engines))] = shlex.split(executable)
    settings = Settings()
    options = RunOptions(name=name, storage=_storage(name, storage), studies_dir=settings.studies_dir,
                         n_trials=n_trials, timeout_s=timeout, seed=seed, executables=executables,
                         heartbeat_s=settings.heartbeat_s,
                         budget_node_minutes=None if budget_node_hours is None else budget_node_hours * 60)  # fmt: skip
    prepared = prepare_study(space, space_file, options)
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[best]}"), console=console, transient=True) as bar:  # fmt: skip
        task = bar.add_task(f"study {name}", total=n_trials, best="")

        def on_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            done = sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.state.name != "FAIL")
            incumbent = best_trial(study)
            best = f"best #{incumbent.number}: {incumbent.values[0]:.1f}" if incumbent else "no feasible trial yet"
            bar.update(task, completed=done, best=best)
            console.print(f"trial {trial.number}: {_outcome(trial)}")

        result = run_trials(prepared, on_trial)
    _print_best(result)


def _outcome(trial: optuna.trial.FrozenTrial) -> str:
    attrs = trial.user_attrs
    if trial.state.name == "PRUNED":
        return f"pruned ({attrs.get('pruned_at', 'duplicate')})"
    if "failure_kind" in attrs:
        return f"{attrs['failure_kind']}: {attrs.get('failure_reason', '')[:120]}"
    dup = f" (same config as #{attrs['duplicate_of']})" if "duplicate_of" in attrs else ""
    if not trial.values:
        return trial.state.name
    load = _load_text(attrs.get("load"))
    levels = len(attrs.get("benchmarks") or [])
    swept = f" at {load} ({levels} loads measured on one launch)" if levels > 1 else (f" at {load}" if load else "")
    slo = "" if feasible(trial) else " (misses the SLO)"
    return f"{trial.values[0]:.1f}{swept}{slo}{dup}"


def _load_text(load: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (load or {}).items())


def _print_best(study: optuna.Study) -> None:
    best = best_trial(study)
    if best is None:
        raise AutotuneError(f"study {study.study_name!r}: no feasible trial (every configuration failed or was rejected); "
                            f"see `autotune study show {study.study_name}`")  # fmt: skip
    simulated = "SIMULATED " if "simulated" in best.user_attrs else ""
    metric = study.metric_names[0] if study.metric_names else "value"
    print(f"{simulated}best: trial {best.number}, {metric} = {best.values[0]:.2f}")
    print(shell_script(best.user_attrs["launch"]))
    Console().print(_baseline_table(study, best, simulated))


def _baseline_table(study: optuna.Study, best: optuna.trial.FrozenTrial, simulated: str) -> Table:
    """The seed study's evidence table (autotune.report.baseline_table), for the terminal."""
    from autotune.report import baseline_table, trials_frame

    table = Table(title=f"{simulated}baseline vs best ({study.study_name})")
    for column in ("configuration", "trial", "total tok/s", "mean TPOT ms", "best vs this"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for row in baseline_table(trials_frame(study), best.number).itertuples(index=False):
        label = f"best ({row.engine})" if row.row == "best" else f"{row.engine} baseline"
        total, tpot = row.total_token_throughput, row.mean_tpot_ms
        measured = total == total and total is not None  # NaN for a baseline that did not run
        shown = f"{total:.1f}" if measured else row.outcome
        table.add_row(label, str(row.number), shown, f"{tpot:.1f}" if measured and tpot == tpot else "",
                      row[-1])  # fmt: skip
    return table


@app.command(name="list")
def list_studies(storage: StorageOpt = None, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Studies in a storage (default: every SQLite study under studies/)."""
    urls = (
        [storage]
        if storage
        else [default_storage(p.stem, Settings().studies_dir) for p in sorted(Settings().studies_dir.glob("*.db"))]
    )
    rows = []
    for url in urls:
        for summary in optuna.get_all_study_summaries(open_storage(url)):
            best = summary.best_trial.values[0] if summary.best_trial and summary.best_trial.values else None
            rows.append({"study": summary.study_name, "trials": summary.n_trials, "best": best,
                         "created": str(summary.datetime_start)})  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table("study", "trials", "best value", "started")
    for row in rows:
        table.add_row(
            row["study"], str(row["trials"]), "-" if row["best"] is None else f"{row['best']:.2f}", row["created"]
        )
    Console().print(table)


def _load(name: str, storage: str | None) -> optuna.Study:
    url = _storage(name, storage)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise UsageError(
            f"no study {name!r} under {Settings().studies_dir}/; fix: `autotune study list` shows the studies"
        )
    try:
        return optuna.load_study(study_name=name, storage=open_storage(url))
    except KeyError:
        raise UsageError(f"no study {name!r} in that storage; fix: `autotune study list --storage URL`") from None


@app.command()
def show(name: str, storage: StorageOpt = None, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every trial (state, engine, parameters, load, value, outcome, node-minutes), failures by kind, learned rules."""
    from autotune.learning import learned_rules

    study = _load(name, storage)
    rows = [_trial_row(t) for t in study.get_trials(deepcopy=False)]
    failures = Counter(r["failure_kind"] for r in rows if r["failure_kind"])
    total = round(sum(r["node_minutes"] or 0 for r in rows), 2)
    on_failures = round(sum(r["node_minutes"] or 0 for r in rows if r["failure_kind"]), 2)
    rules = learned_rules(study)
    if as_json:
        print(json.dumps({"study": name, "trials": rows, "failures_by_kind": failures, "node_minutes": total,
                          "node_minutes_on_failures": on_failures, "learned_rules": rules}, indent=1, default=str))  # fmt: skip
        return
    table = Table("#", "state", "engine", "params", "load", "value", "outcome", "node-min", title=f"study {name}")
    for r in rows:
        value = "-" if not r["values"] or r["failure_kind"] else f"{r['values'][0]:.1f}"
        table.add_row(str(r["number"]), r["state"], str(r["engine"] or ""),
                      ", ".join(f"{k}={v}" for k, v in r["params"].items()), _load_text(r["load"]) +
                      (f" ({len(r['benchmarks'])} measured)" if len(r["benchmarks"]) > 1 else ""), value,
                      _row_outcome(r), f"{r['node_minutes'] or 0:.1f}")  # fmt: skip
    console = Console()
    console.print(table)
    console.print("failures by kind: " + (", ".join(f"{k} {v}" for k, v in failures.items()) or "none"))
    console.print(f"node-minutes: {total:.1f} in all, {on_failures:.1f} on failures")
    for rule_id, rule in rules.items():
        console.print(
            f"learned rule 'learned:{rule_id}' (trial {rule['trial']}, {rule['kind']}): {rule['reason'][:100]}"
        )


def _trial_row(t: optuna.trial.FrozenTrial) -> dict:
    attrs = t.user_attrs
    return {"number": t.number, "state": t.state.name, "feasible": feasible(t), "baseline": bool(attrs.get("baseline")),
            "prior": attrs.get("prior"), "engine": attrs.get("engine"), "params": t.params, "values": t.values,
            "load": attrs.get("load"), "launched": bool(attrs.get("launched")), "benchmarks": attrs.get("benchmarks", []),
            "node_minutes": attrs.get("node_minutes"), "failure_kind": attrs.get("failure_kind"),
            "rejected_by": attrs.get("rejected_by"), "taught_rule": attrs.get("taught_rule"),
            "duplicate_of": attrs.get("duplicate_of"), "launch_s": attrs.get("launch_s"),
            "benchmark_s": attrs.get("benchmark_s")}  # fmt: skip


def _row_outcome(r: dict) -> str:
    parts = [r["failure_kind"] or ""]
    parts += ["baseline"] * r["baseline"] + ([f"prior #{r['prior']}"] if r["prior"] else [])
    parts += [f"by {r['rejected_by']}"] if r["rejected_by"] else []
    parts += [f"taught {r['taught_rule']}"] if r["taught_rule"] else []
    parts += [f"dup of #{r['duplicate_of']}"] if r["duplicate_of"] is not None else []
    return " ".join(p for p in parts if p)


def _register_validate() -> None:
    from autotune.cli.validate import validate_command

    app.command(name="validate")(validate_command)


_register_validate()


@app.command()
def report(
    name: str,
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option(help="HTML file (default: studies/NAME/report.html)")] = None,
    csv: Annotated[Path | None, typer.Option(help="also write every trial as CSV")] = None,
    parquet: Annotated[Path | None, typer.Option(help="also write every trial as Parquet (needs pyarrow)")] = None,
) -> None:
    """One self-contained HTML report of a study (plotly figures, best command, baseline-vs-best table)."""
    from autotune.report import render_html, trials_frame

    study = _load(name, storage)
    out = out or Settings().studies_dir / name / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(study, best_trial(study)))
    print(out)
    if csv:
        trials_frame(study).to_csv(csv, index=False)
        print(csv)
    if parquet:
        try:
            trials_frame(study).to_parquet(parquet, index=False)
        except ImportError:
            raise UsageError("--parquet needs pyarrow; fix: pip install pyarrow") from None
        print(parquet)


@app.command()
def best(name: str, storage: StorageOpt = None, output: FormatOpt = "shell") -> None:
    """The best feasible configuration's launch command, and the `autotune bench` command that measured it."""
    study = _load(name, storage)
    trial = best_trial(study)
    if trial is None:
        raise AutotuneError(f"study {name!r} has no feasible trial yet")
    launch, bench = trial.user_attrs["launch"], _bench_command(study, trial)
    docker = _docker(trial)
    if output == "json":
        print(json.dumps({"trial": trial.number, "values": trial.values, "metric_names": study.metric_names,
                          "load": trial.user_attrs.get("load", {}),
                          "simulated": "simulated" in trial.user_attrs, "launch": launch, "docker": docker,
                          "bench": bench}, indent=1))  # fmt: skip
        return
    if output == "docker":
        print(docker)
        return
    if output != "shell":
        raise UsageError(f"--format {output!r}: use shell, json or docker")
    if "simulated" in trial.user_attrs:
        print("# SIMULATED study: this configuration was chosen by autotune's simulator, not measured on the engine")
    metric = study.metric_names[0] if study.metric_names else "value"
    print(f"# best: trial {trial.number}, {metric} = {trial.values[0]:.2f}")
    print(shell_script(launch))
    print("# reproduce the measurement (once the server above is ready):")
    print(shlex.join(bench))


def _docker(trial: optuna.trial.FrozenTrial) -> str | None:
    config = trial.user_attrs.get("config")
    if config is None:  # a trial recorded before configurations were stored
        return None
    return docker_run(ServerConfig.model_validate(config), trial.user_attrs["launch"].get("secret_env", []))


def _bench_command(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> list[str]:
    # the trial's best load (its sweep's choice) over the space's workload
    workload = study.user_attrs.get("workload", {}) | (trial.user_attrs.get("load") or {})
    argv = trial.user_attrs["launch"]["argv"]
    port = argv[argv.index("--port") + 1] if "--port" in argv else "8000"
    model = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else None
    command = ["autotune", "bench", "--base-url", f"http://127.0.0.1:{port}", "--model", model or "MODEL"]
    flags = {"dataset": "--dataset", "path": "--dataset-path", "endpoint": "--endpoint", "input_len": "--input-len",
             "output_len": "--output-len", "num_prompts": "--num-prompts", "max_concurrency": "--max-concurrency",
             "request_rate": "--request-rate", "seed": "--seed"}  # fmt: skip
    for key, flag in flags.items():
        value = workload.get(key)
        skip = (key == "request_rate" and value in ("inf", math.inf)) or (
            key == "input_len" and workload.get("dataset") != "random"
        )
        if value is not None and not skip:
            command += [flag, str(value)]
    return command
