"""``autotune study best``: the best feasible configuration's launch command and the commands that reproduce its
measurement (``autotune bench``, ``vllm bench serve``, ``docker run``), or all of it as JSON."""

from __future__ import annotations

import json
import shlex
from typing import Annotated

import typer

from autotune.cli.options import JsonOpt, StorageOpt, StudyOpt, load_study
from autotune.cli.trials_table import load_text, value_text
from autotune.cli.workloads_view import mix_metric_text, print_mix_best
from autotune.config import ServerConfig
from autotune.errors import AutotuneError
from autotune.evidence.export import docker_run, file_notes, no_image_line, ran_on_cpu, shell_script
from autotune.evidence.mix_table import is_mix_study, workload_rows
from autotune.evidence.reproduce import (
    DEFAULT_PORT,
    OPENAI_KEY_ENV,
    api_key_env,
    bench_argv,
    launch_on_port,
    vllm_bench_argv,
)
from autotune.records import TrialRecord
from autotune.search.ranking import best_trial
from autotune.space.metrics import metric_unit
from autotune.text import terminal_safe


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
    record = TrialRecord.of(trial)
    if record.config is None:
        raise AutotuneError(f"study {name!r}: trial {trial.number} was recorded by an older autotune, without its "
                            "configuration; fix: run the study again with this version")  # fmt: skip
    launch = launch_on_port(record.launch, port)
    config = ServerConfig.model_validate(record.config)
    bench, vllm_bench = bench_argv(study, trial, port), vllm_bench_argv(study, trial, port)
    secret_env, key_env = record.launch.get("secret_env", []), api_key_env(trial)
    docker = docker_run(config, secret_env, port, on_cpu=ran_on_cpu(study))  # None on CPU: the images are GPU builds
    if as_json:
        print(json.dumps({"trial": trial.number, "values": trial.values, "metric_names": study.metric_names,
                          "load": record.load if record.load is not None else {},
                          "simulated": record.simulated is not None,
                          "launch": launch, "docker": docker, "bench": bench,
                          "vllm_bench": vllm_bench, "api_key_env": key_env, "files_needed": config.files_needed()}
                         | ({"mix": record.mix, "workloads": [row.model_dump() for row in workload_rows(study, trial)]}
                            if is_mix_study(study) else {}), indent=1))  # fmt: skip
        return
    if docker_only:
        print(docker or no_image_line(config))
        return
    if record.simulated is not None:
        print("# SIMULATED study: this configuration was chosen by autotune's simulator, not measured on the engine")
    metric = study.metric_names[0] if study.metric_names else "value"
    load = load_text(record.load)
    if is_mix_study(study):
        load = ""  # a load per workload: the table below
        metric = mix_metric_text(record, metric)
    unit = f" {metric_unit(metric)}" if metric_unit(metric) else ""  # '' for a mix's ratio
    print(
        f"# best: trial {trial.number}, {metric} = {value_text(trial.values[0])}{unit}"
        + (f" at {load}" if load else "")
    )
    print(terminal_safe("".join(f"{note}\n" for note in file_notes(config)) + shell_script(launch)))
    if is_mix_study(study):  # one command for every workload: the table says what it gains and costs on each
        print_mix_best(study, trial, "SIMULATED " if record.simulated is not None else "", port)
        return
    print("# reproduce the measurement (once the server above is ready):")
    if key_env == OPENAI_KEY_ENV:
        print(f"# the server takes --api-key: set {OPENAI_KEY_ENV} to that key first")
    print(terminal_safe(shlex.join(bench)))
    print("# the same with vLLM's client (its own prompts of the same lengths):")
    key_prefix = f'OPENAI_API_KEY="${key_env}" ' if key_env and key_env != OPENAI_KEY_ENV else ""
    print(terminal_safe(key_prefix + shlex.join(vllm_bench)))
    container = f"# or in {config.engine}'s official container image:\n{docker}" if docker else no_image_line(config)
    print(terminal_safe(container))
