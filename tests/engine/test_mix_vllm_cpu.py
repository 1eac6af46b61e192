"""A real vLLM-CPU study of two workloads (short chat, long prompt): each launch measured on both, each workload's
loads swept on the same warm server, the mix recorded as the trial's value, and `study show` showing it."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.conftest import SPACES
from tests.engine.conftest import autotune

pytestmark = pytest.mark.engine
TRIALS = 3
CHAT = {"name": "chat", "dataset": "random", "input_len": 64, "output_len": 32, "num_prompts": 16, "seed": 1,
        "ignore_eos": True, "loads": {"max_concurrency": [4, 16]}}  # fmt: skip
LONG = {"name": "long-prompt", "dataset": "random", "input_len": 1024, "output_len": 32, "num_prompts": 8, "seed": 1,
        "ignore_eos": True, "loads": {"max_concurrency": [2, 8]}}  # fmt: skip


def test_real_two_workload_study(vllm_cpu_python, tmp_path) -> None:
    studies = tmp_path / "studies"
    space = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    space["name"] = "vllm-cpu-mix"
    del space["workload"]
    space["workloads"] = [CHAT, LONG]
    # three launches: the slow default (4 sequences, float32) and two others; the loads are each workload's own
    space["params"] = {"max_num_seqs": {"choices": [4, 16, 64], "default": 4},
                       "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}}  # fmt: skip
    space["engines"]["vllm"]["fixed"]["cuda_graph"] = False  # eager: starts without compiling (the slow default's)
    path = tmp_path / "vllm-cpu-mix.yaml"
    path.write_text(yaml.safe_dump(space))
    done = autotune("study", "run", str(path), "--n-trials", str(TRIALS), "--seed", "0", studies=studies)
    print(done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-2000:]
    shown_json = autotune("study", "show", "--study", "vllm-cpu-mix", "--json", studies=studies)
    trials = json.loads(shown_json.stdout)["trials"]
    launched = [t for t in trials if t["launched"] and t["duplicate_of"] is None]
    assert len(launched) == TRIALS
    baseline = launched[0]
    assert baseline["baseline"] and baseline["values"] == [1.0] and baseline["mix"] == "geomean"
    for trial in launched:
        results = {w["name"]: w for w in trial["workloads"]}
        assert set(results) == {"chat", "long-prompt"}
        measured = {name: sorted(b["load"]["max_concurrency"] for b in trial["benchmarks"] if b["workload"] == name)
                    for name in results}  # fmt: skip
        if not trial["mix_stopped_early"]:  # one launch measured on both, each at its own loads (no SLO: all of them)
            assert measured == {"chat": [4, 16], "long-prompt": [2, 8]}
            relatives = [results[n]["relative"] for n in ("chat", "long-prompt")]
            assert math.isclose(trial["values"][0], math.sqrt(relatives[0] * relatives[1]), rel_tol=1e-4)
        assert all(r["value"] > 0 for r in results.values() if not r["skipped"])
    shown = autotune("study", "show", "--study", "vllm-cpu-mix", studies=studies)
    assert shown.returncode == 0 and "per workload" in shown.stdout and "long-prompt" in shown.stdout
    print(shown.stdout)
    best = autotune("study", "best", "--study", "vllm-cpu-mix", studies=studies)
    assert best.returncode == 0 and "baseline vs the mix's best" in best.stdout
    print(best.stdout)
