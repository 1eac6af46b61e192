"""`study run` where stderr is not a terminal: a tiny simulated study's plain lines name the phases in order (ranking
the space, then each trial's launch, readiness and loads, then the trial's outcome with the count and the ETA)."""

from __future__ import annotations

import pytest
import yaml

from autotune.space.files import find_space
from tests.study.conftest import autotune


@pytest.mark.slow
def test_a_tiny_simulated_study_prints_its_phases_in_order(tmp_path) -> None:
    space = yaml.safe_load(find_space("quickstart").read_text())
    vllm = space["engines"]["vllm"]
    vllm["params"] = {"max_model_len": {"choices": [None, 32768]}}
    vllm["fixed"]["tp"] = 8
    space["engines"] = {"vllm": vllm}
    space["params"] = {}
    space |= {"name": "tiny-progress", "trials": 2, "search": {"prior": "analytic", "prior_trials": 1}}
    space["workload"]["num_prompts"] = 40
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(space))
    done = autotune("study", "run", str(path), "--seed", "1", studies=tmp_path / "studies", timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()  # a pipe, not a terminal: plain lines

    def first(fragment: str, after: int = -1) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line and i > after)

    ranking = first("ranking the space")
    launching = first("trial 0 (launch 1 of 2): launching", ranking)
    ready = first("trial 0 (launch 1 of 2): waiting for readiness", launching)
    load = first("trial 0 (launch 1 of 2): load 1 of", ready)
    finished = first("trial 0: ", load)
    second = first("trial 1 (launch 2 of 2): ", finished)
    assert "1/2 launches done" in lines[finished] and "ETA" in lines[finished]
    assert first("2/2 launches done", second) > second
