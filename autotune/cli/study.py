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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.cli.options import JsonOpt, StorageOpt, StudyOpt, load_study, storage_url, storage_urls
from autotune.config import ServerConfig
from autotune.errors import AutotuneError, UsageError
from autotune.export import docker_run, shell_script
from autotune.gpus import parse_gpus
from autotune.names import study_name
from autotune.ranking import best_trial, feasible
from autotune.reproduce import DEFAULT_PORT, OPENAI_KEY_ENV, api_key_env, bench_argv, launch_on_port, vllm_bench_argv
from autotune.settings import Settings
from autotune.spacefile import find_space, load_space
from autotune.study import (
    RunOptions,
    concurrent_trials,
    open_storage,
    prepare_study,
    run_node,
    run_trials,
    study_budget,
)

app = typer.Typer(no_args_is_help=True, help="Run and inspect tuning studies.")
DEFAULT_SPACE = "quickstart"
DEFAULT_TRIALS = 8


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
            help="the study's budget of trials in all, baselines included; a study that already has "
            f"that many runs none (default: the space's `trials`, else {DEFAULT_TRIALS}); see --more",
        ),
    ] = None,
    more: Annotated[
        int | None, typer.Option(min=1, help="instead of --n-trials: run this many trials more than the study has")
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
            help="the node's GPUs for this study: auto (all nvidia-smi lists), 0,1,2,3, or a count; trials "
            "run at once on disjoint GPUs, each engine seeing its own (CUDA_VISIBLE_DEVICES); default: the "
            "space's hardware.gpus given to one trial at a time",
        ),
    ] = None,
) -> None:
    """Run a study: launch each trial's engine for real, benchmark it, learn from crashes, prune slow ones."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if n_trials is not None and more is not None:
        raise UsageError("--n-trials and --more both given; fix: --n-trials for the budget in all, --more to add")
    space_file = find_space(space_ref)
    space = load_space(space_file)
    n_trials = more or n_trials or space.trials or DEFAULT_TRIALS
    origin = "--study" if study is not None else f"the space's name in {space_file.name}"  # '' is refused, not skipped
    name = study_name(study if study is not None else space.name or space_file.stem, origin)
    executables = {}
    if executable:
        if len(space.engines) > 1:
            raise UsageError("--executable needs a one-engine space; fix: set engines.<name>.executable in the space")
        executables[next(iter(space.engines))] = shlex.split(executable)
    settings = Settings()
    options = RunOptions(name=name, storage=storage_url(name, storage), studies_dir=settings.studies_dir,
                         n_trials=n_trials, more_trials=more or 0, timeout_s=timeout, seed=seed, executables=executables,
                         heartbeat_s=settings.heartbeat_s, gpus=parse_gpus(gpus) if gpus else None,
                         budget_node_minutes=None if budget_node_hours is None else budget_node_hours * 60)  # fmt: skip
    workers = concurrent_trials(space, options.gpus, executables) if options.gpus else 1
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[best]}"), console=console, transient=True) as bar:  # fmt: skip
        task = bar.add_task(f"study {name}", total=None, best="")

        def on_progress(study: optuna.Study) -> None:
            done = sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.state.name != "FAIL")
            incumbent = best_trial(study)
            best = f"best #{incumbent.number}: {incumbent.values[0]:.1f}" if incumbent else "no feasible trial yet"
            bar.update(task, total=study_budget(study), completed=done, best=best)

        if workers > 1:
            console.print(f"{workers} workers on GPUs {','.join(options.gpus)}, their trials at once on disjoint GPUs")
            result = run_node(space, space_file, options, workers, _print_trial, on_progress)
        else:
            result = run_trials(prepare_study(space, space_file, options),
                                lambda study, trial: (on_progress(study), _print_trial(study, trial)))  # fmt: skip
    _print_best(result)


def _print_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    Console(stderr=True).print(f"trial {trial.number}: {_outcome(trial)}")


def _outcome(trial: optuna.trial.FrozenTrial) -> str:
    attrs = trial.user_attrs
    if trial.state.name == "PRUNED":
        return f"pruned ({attrs.get('pruned_at', 'duplicate')})"
    if "failure_kind" in attrs:
        return f"{attrs['failure_kind']}: {attrs.get('failure_reason', '')[:120]}"
    dup = f" (same config as #{attrs['duplicate_of']})" if "duplicate_of" in attrs else ""
    dup += f" on GPUs {','.join(attrs['gpus'])}" if attrs.get("gpus") else ""
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
    """The seed study's evidence table (autotune.report.baseline_rows), for the terminal."""
    from autotune.report import baseline_rows

    rows = baseline_rows(study, best)
    # the gain columns' headers explain themselves at length: under the table, so that the columns stay narrow
    gains = [column for column in rows.columns if column.startswith("best vs this")]
    table = Table(title=f"{simulated}baseline vs best ({study.study_name})", caption="; ".join(gains))
    short = {
        gain: "best vs this" + (f" ({name})" if len(gains) > 1 else "")
        for gain, name in zip(gains, study.metric_names or ["value"], strict=False)
    }
    for column in rows.columns:
        table.add_column(
            short.get(column, column), justify="left" if column in ("configuration", "outcome") else "right"
        )
    for row in rows.itertuples(index=False):
        table.add_row(*row)
    return table


@app.command(name="list")
def list_studies(storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Studies in a storage (default: $AUTOTUNE_STORAGE, else every SQLite study under studies/)."""
    rows = []
    for url in storage_urls(storage):
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


@app.command()
def show(study_name: StudyOpt = None, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Every trial (state, engine, parameters, load, value, outcome, node-minutes), failures by kind, learned rules."""
    from autotune.learning import learned_rules

    study = load_study(study_name, storage)
    name = study.study_name
    rows = [_trial_row(t) for t in study.get_trials(deepcopy=False)]
    failures = Counter(r["failure_kind"] for r in rows if r["failure_kind"])
    total = round(sum(r["node_minutes"] or 0 for r in rows), 2)
    on_failures = round(sum(r["node_minutes"] or 0 for r in rows if r["failure_kind"]), 2)
    rules = learned_rules(study)
    if as_json:
        print(json.dumps({"study": name, "trials": rows, "failures_by_kind": failures, "node_minutes": total,
                          "node_minutes_on_failures": on_failures, "learned_rules": rules}, indent=1, default=str))  # fmt: skip
        return
    columns = ["#", "state", "engine", "params", "load", "value", "outcome", "node-min"]
    gpus, leased = any(r["gpu_memory_mib"] for r in rows), any(r["gpus"] for r in rows)
    extra = ["GPUs"] * leased + ["GPU MiB before→ready→after"] * gpus
    table = Table(*columns, *extra, title=f"study {name}")
    for r in rows:
        value = "-" if not r["values"] or r["failure_kind"] else f"{r['values'][0]:.1f}"
        table.add_row(str(r["number"]), r["state"], str(r["engine"] or ""),
                      ", ".join(f"{k}={v}" for k, v in r["params"].items()), _load_text(r["load"]) +
                      (f" ({len(r['benchmarks'])} measured)" if len(r["benchmarks"]) > 1 else ""), value,
                      _row_outcome(r), f"{r['node_minutes'] or 0:.1f}",
                      *([",".join(r["gpus"] or [])] if leased else []),
                      *([_gpu_text(r["gpu_memory_mib"])] if gpus else []))  # fmt: skip
    console = Console()
    console.print(table)
    console.print("failures by kind: " + (", ".join(f"{k} {v}" for k, v in failures.items()) or "none"))
    console.print(f"node-minutes: {total:.1f} in all, {on_failures:.1f} on failures")
    for rule_id, rule in rules.items():
        console.print(f"learned rule '{rule_id}' (trial {rule['trial']}, {rule['kind']}): {rule['reason'][:100]}")


def _trial_row(t: optuna.trial.FrozenTrial) -> dict:
    attrs = t.user_attrs
    return {"number": t.number, "state": t.state.name, "feasible": feasible(t), "baseline": bool(attrs.get("baseline")),
            "prior": attrs.get("prior"), "engine": attrs.get("engine"), "params": t.params, "values": t.values,
            "load": attrs.get("load"), "launched": bool(attrs.get("launched")), "benchmarks": attrs.get("benchmarks", []),
            "node_minutes": attrs.get("node_minutes"), "failure_kind": attrs.get("failure_kind"),
            "rejected_by": attrs.get("rejected_by"), "taught_rule": attrs.get("taught_rule"),
            "duplicate_of": attrs.get("duplicate_of"), "launch_s": attrs.get("launch_s"),
            "benchmark_s": attrs.get("benchmark_s"), "gpus": attrs.get("gpus"),
            "engine_process": attrs.get("engine_process"),
            "gpu_memory_mib": attrs.get("gpu_memory_mib")}  # fmt: skip


def _gpu_text(facts: dict | None) -> str:
    """Memory in use over the GPUs, before the launch → once ready → after the stop ("not released" if it stayed)."""
    if not facts:
        return ""
    used = [str(sum(facts[k].values())) if facts.get(k) else "-" for k in ("before", "ready", "after")]
    return "→".join(used) + ("" if facts.get("released") is not False else " not released")


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
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default: studies/NAME/report.html)")] = None,
    csv: Annotated[Path | None, typer.Option(help="also write every trial as CSV")] = None,
    parquet: Annotated[Path | None, typer.Option(help="also write every trial as Parquet (needs pyarrow)")] = None,
) -> None:
    """One self-contained HTML report of a study (plotly figures, best command, baseline-vs-best table)."""
    from autotune.report import render_html, trials_frame

    study = load_study(study_name, storage)
    name = study.study_name
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
def best(
    study_name: StudyOpt = None,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
    docker_only: Annotated[bool, typer.Option("--docker", help="print only the `docker run` equivalent")] = False,
    port: Annotated[int, typer.Option(min=1, max=65535, help="port the printed commands serve and measure on")] = (
        DEFAULT_PORT
    ),
) -> None:
    """The best feasible configuration's launch command, and the commands that reproduce its measurement: the
    `autotune bench` line the trial's value came from, and the equivalent `vllm bench serve` line."""
    study = load_study(study_name, storage)
    name = study.study_name
    trial = best_trial(study)
    if trial is None:
        raise AutotuneError(f"study {name!r} has no feasible trial yet")
    if "config" not in trial.user_attrs:
        raise AutotuneError(f"study {name!r}: trial {trial.number} was recorded by an older autotune, without its "
                            "configuration; fix: run the study again with this version")  # fmt: skip
    launch = launch_on_port(trial.user_attrs["launch"], port)
    bench, vllm_bench = bench_argv(study, trial, port), vllm_bench_argv(study, trial, port)
    docker, key_env = _docker(trial, port), api_key_env(trial)
    if as_json:
        print(json.dumps({"trial": trial.number, "values": trial.values, "metric_names": study.metric_names,
                          "load": trial.user_attrs.get("load", {}), "simulated": "simulated" in trial.user_attrs,
                          "launch": launch, "docker": docker, "bench": bench, "vllm_bench": vllm_bench,
                          "api_key_env": key_env}, indent=1))  # fmt: skip
        return
    if docker_only:
        print(docker)
        return
    if "simulated" in trial.user_attrs:
        print("# SIMULATED study: this configuration was chosen by autotune's simulator, not measured on the engine")
    metric = study.metric_names[0] if study.metric_names else "value"
    load = _load_text(trial.user_attrs.get("load"))
    print(f"# best: trial {trial.number}, {metric} = {trial.values[0]:.2f}" + (f" at {load}" if load else ""))
    print(shell_script(launch))
    print("# reproduce the measurement (once the server above is ready):")
    if key_env == OPENAI_KEY_ENV:
        print(f"# the server takes --api-key: set {OPENAI_KEY_ENV} to that key first")
    print(shlex.join(bench))
    print("# the same with vLLM's client (its own prompts of the same lengths):")
    key_prefix = f'OPENAI_API_KEY="${key_env}" ' if key_env and key_env != OPENAI_KEY_ENV else ""
    print(key_prefix + shlex.join(vllm_bench))


def _docker(trial: optuna.trial.FrozenTrial, port: int) -> str:
    secret_env = trial.user_attrs["launch"].get("secret_env", [])
    return docker_run(ServerConfig.model_validate(trial.user_attrs["config"]), secret_env, port)
