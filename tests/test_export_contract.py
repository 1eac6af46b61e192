"""The export contract: `study best` on a finished study of every registered engine prints the launch command (on
--port 8000), the commands that reproduce its measurement, and the engine's container line (or one line saying it
has no official image). The registry is iterated, so a new adapter is covered as soon as it is registered.

Each study is one trial of the scripted engine behind the adapter's own rendering: the scripted server takes vLLM's
``serve MODEL`` and ignores the flags it does not know, so the adapter's command is given after ``serve MODEL``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from autotune.engines import ENGINES, get_engine
from autotune.evidence.reproduce import DEFAULT_PORT
from tests.study.conftest import autotune

MODEL = "scripted-model"
SCRIPTED_AS_ANY_ENGINE = f"{sys.executable} -m autotune.testing.scripted serve {MODEL}"


def contract_space(tmp_path: Path, engine: str) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": "word " * 8, "output_len": 4}) + "\n" for _ in range(6)))
    timing = {"SCRIPTED_ITL_MS": "2", "SCRIPTED_TTFT_MS": "5", "SCRIPTED_STARTUP_S": "0.1"}
    space = {
        "name": f"contract-{engine}",
        "hardware": {"gpus": 0},
        "engines": {engine: {"fixed": {"model": MODEL, "env": timing}}},
        "params": {"max_concurrency": {"choices": [2], "default": 2}},  # the load: every engine has it
        "workload": {"dataset": "jsonl", "path": str(prompts), "num_prompts": 6, "output_len": 4},
        "objective": {"metrics": [{"name": "total_token_throughput"}]},
        "startup_timeout_s": 30,
    }
    path = tmp_path / f"{engine}.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_study_best_exports_every_registered_engine(engine: str, tmp_path: Path) -> None:
    studies = tmp_path / "studies"
    ran = autotune("study", "run", str(contract_space(tmp_path, engine)), "--n-trials", "1",
                   "--executable", SCRIPTED_AS_ANY_ENGINE, studies=studies)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    best = autotune("study", "best", "--study", f"contract-{engine}", studies=studies)
    assert best.returncode == 0, best.stderr
    lines = best.stdout.splitlines()
    launch = [line for line in lines if SCRIPTED_AS_ANY_ENGINE in line and " bench serve " not in line]
    assert len(launch) == 1 and f"--port {DEFAULT_PORT}" in launch[0], best.stdout  # the adapter's command, pasteable
    assert any(line.startswith("autotune bench ") and f"127.0.0.1:{DEFAULT_PORT}" in line for line in lines)
    # vLLM's client as the study started vLLM (here the scripted stand-in); another engine's study: plain `vllm`
    client = SCRIPTED_AS_ANY_ENGINE if engine == "vllm" else "vllm"
    assert any(line.startswith(f"{client} bench serve ") for line in lines), best.stdout
    image = get_engine(engine).image
    if image is None:
        assert f"# {engine} has no official container image: run the launch command above on the node" in lines
    else:  # the space runs on CPU (gpus: 0): no `docker run --gpus all` of the GPU image, a line saying why
        assert not any(line.startswith("docker run ") for line in lines)
        reference = image.reference(get_engine(engine).default_version)
        assert f"ran on CPU (gpus: 0) and {engine}'s official image ({reference}) is a GPU build" in lines[-1]
