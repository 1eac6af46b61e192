"""Real vLLM on CPU serving a model named by its hub id, as a GPU node has it: the tiny model saved in the Hugging Face
cache's layout under a temporary HF_HOME, HF_HUB_OFFLINE=1. The engine loads it from the cache, autotune counts prompts
with the same tokenizer, a study of 3 launches finishes, and `study best`'s `autotune bench` line runs from another
directory against the exported launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from autotune.serving.process import free_port, kill_group
from autotune.testing.hub_cache import save_to_hub_cache
from tests.conftest import REPO, SPACES
from tests.engine.conftest import VLLM_CPU

pytestmark = pytest.mark.engine
HUB_ID = "autotune-test/tiny-llama"


def _run(argv: list[str], env: dict[str, str], cwd=REPO, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=os.environ | env, capture_output=True, text=True, timeout=timeout)


def test_a_hub_id_served_from_the_cache_offline(vllm_cpu_python, tmp_path) -> None:
    snapshot = save_to_hub_cache(VLLM_CPU / "tiny", tmp_path / "hf", HUB_ID)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies")}
    space = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    space["name"] = "vllm-cpu-hub"
    space["engines"]["vllm"]["fixed"]["model"] = HUB_ID
    space["workload"]["num_prompts"] = 16
    space["params"]["max_concurrency"] = {"choices": [16], "default": 16}
    del space["params"]["speculative"]  # three launches that each measure: the failure path is tested elsewhere
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(space))
    autotune = [sys.executable, "-m", "autotune"]

    ran = _run([*autotune, "study", "run", str(tmp_path / "hub.yaml"), "--n-trials", "3", "--seed", "1"], env)
    print(ran.stderr[-3000:])
    assert ran.returncode == 0, ran.stderr[-2000:]
    shown = json.loads(_run([*autotune, "study", "show", "--study", "vllm-cpu-hub", "--json"], env).stdout)
    trials = shown["trials"]
    assert sum(t["launched"] for t in trials) == 3 and all(t["values"][0] > 0 for t in trials if t["launched"])

    best = json.loads(_run([*autotune, "study", "best", "--study", "vllm-cpu-hub", "--json"], env).stdout)
    launch, bench = best["launch"], best["bench"]
    assert launch["argv"][launch["argv"].index("serve") + 1] == HUB_ID  # the engine is given the hub id
    assert bench[bench.index("--tokenizer") + 1] == str(snapshot)  # the same tokenizer, by an absolute path
    port = free_port()
    argv = list(launch["argv"])
    argv[argv.index("--port") + 1] = str(port)
    with (tmp_path / "best.log").open("wb") as log:
        server = subprocess.Popen(argv, cwd=REPO, env=os.environ | env | launch["env"], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        _wait_ready(port, server)
        line = [*autotune, *bench[1:]]
        line[line.index("--base-url") + 1] = f"http://127.0.0.1:{port}"
        line[line.index("--num-prompts") + 1] = "8"
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        measured = _run([*line, "--json"], env, cwd=elsewhere, timeout=300)
    finally:
        kill_group(server.pid)
        server.wait()
    assert measured.returncode == 0, measured.stderr[-2000:]
    result = json.loads(measured.stdout)
    assert result["completed"] == 8 and result["total_input_tokens"] == 8 * space["workload"]["input_len"]


def _wait_ready(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"the exported best launch did not become ready (exit {server.poll()})")
