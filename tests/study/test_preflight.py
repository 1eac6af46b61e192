"""What a first launch needs is checked before it, by `doctor`, `space validate` and `study run` alike, each with the fix:
the model's tokenizer (a hub id: the Hugging Face cache, offline), the workload's ShareGPT file, an engine's file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from autotune.testing.hub_cache import save_to_hub_cache
from tests.conftest import SPACES, tiny_tokenizer_file
from tests.study.conftest import autotune, show, write_space

pytestmark = pytest.mark.slow
MODEL = "acme/tiny-chat"


def _hub_space(tmp_path: Path, hf_home: Path) -> Path:
    """The scripted engine's space with its model named by a hub id and a random workload (which needs the model's
    tokenizer), the hub cache and offline mode in the engine's environment, as a space sets them for a node."""
    path = write_space(tmp_path, env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
                       workload={"dataset": "random", "input_len": 8, "output_len": 8, "num_prompts": 8})  # fmt: skip
    space = yaml.safe_load(path.read_text())
    space["engines"]["vllm"]["fixed"]["model"] = MODEL
    space["engines"]["vllm"]["fixed"]["served_model_name"] = "tiny"
    space["engines"]["vllm"]["executable"][0] = sys.executable  # this venv's, where autotune.testing is
    del space["params"]["speculative"]  # its mtp:1 fails at start-up by design: every launch here must measure
    path.write_text(yaml.safe_dump(space))
    return path


def _model_dir(tmp_path: Path) -> Path:
    return tiny_tokenizer_file(tmp_path / "model" / "tokenizer.json").parent


def test_a_hub_id_not_in_the_cache_stops_every_command_before_a_launch(tmp_path) -> None:
    space, studies = _hub_space(tmp_path, tmp_path / "hf"), tmp_path / "studies"
    fix = f"fix: where the hub is reachable, run `hf download {MODEL} tokenizer.json --cache-dir {tmp_path / 'hf'}/hub`"

    validated = autotune("space", "validate", str(space), studies=studies)
    assert validated.returncode == 2 and "HF_HUB_OFFLINE is set" in validated.stderr and fix in validated.stderr

    ran = autotune("study", "run", str(space), "--n-trials", "2", studies=studies)
    assert ran.returncode == 2 and fix in ran.stderr, ran.stderr
    assert "launching" not in ran.stderr and not (studies / "scripted").exists()  # no study, no trial, no launch

    doctor = autotune("doctor", str(space), "--json", studies=studies)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 1 and not checks["tokenizer (vllm)"]["ok"] and checks["engine vllm"]["ok"]
    assert "tokenizer (vllm)" in doctor.stderr


def test_a_hub_id_in_the_cache_runs_and_doctor_says_where(tmp_path) -> None:
    hf_home, studies = tmp_path / "hf", tmp_path / "studies"
    snapshot = save_to_hub_cache(_model_dir(tmp_path), hf_home, MODEL)
    space = _hub_space(tmp_path, hf_home)

    doctor = autotune("doctor", str(space), "--json", studies=studies)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 0, doctor.stderr
    assert checks["tokenizer (vllm)"]["detail"] == f"{MODEL}: Hugging Face cache, {snapshot / 'tokenizer.json'}"

    ran = autotune("study", "run", str(space), "--n-trials", "2", studies=studies)
    assert ran.returncode == 0, ran.stderr
    trials = show("scripted", studies)["trials"]
    assert sum(t["launched"] for t in trials) == 2 and all(t["values"] and t["values"][0] > 0 for t in trials)
    best = json.loads(autotune("study", "best", "--json", studies=studies).stdout)
    line = best["bench"]
    assert line[line.index("--tokenizer") + 1] == str(snapshot)  # absolute: the line runs from any directory


def test_the_shipped_sharegpt_space_says_where_to_get_its_file(tmp_path) -> None:
    studies, cache = tmp_path / "studies", tmp_path / "cache"
    env = {"AUTOTUNE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    for command in (("space", "validate", "deepseek-v32-h200x8"), ("study", "run", "deepseek-v32-h200x8")):
        done = autotune(*command, studies=studies, env_extra=env)
        assert done.returncode == 2, done.stderr
        assert "workload.path: the ShareGPT dataset file is not here" in done.stderr
        assert "fix: `autotune dataset fetch sharegpt` downloads it" in done.stderr
        assert "https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered" in done.stderr
    fetched = autotune("dataset", "fetch", "sharegpt", studies=studies, env_extra=env)
    assert fetched.returncode == 2 and "HF_HUB_OFFLINE is set" in fetched.stderr

    # a ShareGPT file put where `dataset fetch` puts it is found from any directory; then the tokenizer is next
    (cache / "datasets").mkdir(parents=True)
    conversations = [{"conversations": [{"from": "human", "value": "hi " * 8}, {"from": "gpt", "value": "yo " * 8}]}]
    (cache / "datasets" / "ShareGPT_V3_unfiltered_cleaned_split.json").write_text(json.dumps(conversations))
    done = autotune("space", "validate", "deepseek-v32-h200x8", studies=studies, env_extra=env)
    assert done.returncode == 2 and "tokenizer (vllm, sglang, trtllm): tokenizer.json of deepseek-ai/DeepSeek-V3.2" in (
        done.stderr
    )


def test_shipped_spaces_name_their_sharegpt_file_as_the_cache_keeps_it() -> None:
    for path in SPACES.glob("*.yaml"):
        workload = yaml.safe_load(path.read_text()).get("workload") or {}
        if workload.get("dataset") == "sharegpt":
            assert workload["path"] == "ShareGPT_V3_unfiltered_cleaned_split.json", path
