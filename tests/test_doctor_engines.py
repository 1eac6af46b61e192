"""`autotune doctor` proves an engine can start, in the environment its launches get; found on disk is no proof.

Fake engines stand in for the real ones: ``python -m MODULE`` with a module that exists or not (the form of SGLang's
default command), a module only the space's own PYTHONPATH has, and a command whose ``--version`` fails or answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli.doctor import _engine_checks, doctor
from autotune.engines import get_engine
from autotune.errors import AutotuneError, EngineNotInstalled
from autotune.serving.process import check_executable, prove_engine_starts
from autotune.space.files import load_space
from tests.conftest import tiny_tokenizer_file
from tests.study.conftest import autotune

MISSING = [sys.executable, "-m", "no_such_module_xyz"]


def _space(tmp_path: Path, executable: list[str], env: dict[str, str] | None = None, engine: str = "sglang") -> Path:
    """A one-engine space (no GPU, not simulated) whose engine is started by ``executable``."""
    space = {
        "name": "doctor-engines",
        "hardware": {"gpus": 0},
        "engines": {engine: {"executable": executable, "fixed": {"model": "some-model", "env": env or {}}}},
        "params": {"max_num_seqs": {"choices": [2, 8], "default": 2}},
        "workload": {
            "dataset": "random",
            "num_prompts": 8,
            "input_len": 16,
            "output_len": 8,
            "tokenizer": str(tiny_tokenizer_file(tmp_path / "tokenizer.json")),
        },  # the model's is not here
        "objective": {"metrics": [{"name": "total_token_throughput"}]},
    }
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def _engine_check(path: Path) -> dict:
    (check,) = _engine_checks(load_space(path))
    return check


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "engine_cli.py"
    script.write_text(body)
    return script


def test_an_engine_module_the_interpreter_cannot_import_fails_with_the_fix(tmp_path) -> None:
    check = _engine_check(_space(tmp_path, MISSING))
    assert not check["ok"]
    assert f"{sys.executable} cannot import no_such_module_xyz: ModuleNotFoundError" in check["detail"]
    assert f"fix: {sys.executable} -m pip install sglang, or set engines.sglang.executable" in check["detail"]


def test_a_module_the_interpreter_finds_is_ok_with_its_version(tmp_path) -> None:
    check = _engine_check(_space(tmp_path, [sys.executable, "-m", "autotune.testing.scripted"]))
    assert check["ok"] and check["detail"].endswith("autotune.testing.scripted: version 0.1.0"), check["detail"]


def test_the_engine_is_proven_in_the_environment_its_launches_get(tmp_path) -> None:
    lib = tmp_path / "lib"
    (lib / "private_engine_xyz").mkdir(parents=True)
    (lib / "private_engine_xyz" / "__init__.py").write_text("__version__ = '9.8.7'\n")
    (lib / "private_engine_xyz" / "serve.py").write_text("raise SystemExit('a server would start here')\n")
    executable = [sys.executable, "-m", "private_engine_xyz.serve"]
    assert not _engine_check(_space(tmp_path, executable))["ok"]  # not in autotune's own environment
    check = _engine_check(_space(tmp_path, executable, env={"PYTHONPATH": str(lib)}))
    assert check["ok"] and check["detail"].endswith("version 9.8.7"), check["detail"]


@pytest.mark.parametrize(
    ("body", "ok", "detail"),
    [
        ("import sys\nprint('Traceback ...', file=sys.stderr)\nsys.exit(\"No module named 'vllm'\")\n", False,
         "--version` exited with code 1: No module named 'vllm'; fix: pip install vllm where"),
        ("print('INFO loading')\nprint('0.32.0+cpu')\n", True, ": version 0.32.0+cpu"),
    ],
    ids=["fails", "answers"],
)  # fmt: skip
def test_a_command_is_proven_by_its_version_answer(tmp_path, body: str, ok: bool, detail: str) -> None:
    check = _engine_check(_space(tmp_path, [sys.executable, str(_script(tmp_path, body))], engine="vllm"))
    assert check["ok"] is ok and detail in check["detail"], check["detail"]


def test_a_version_command_that_hangs_is_no_proof(tmp_path) -> None:
    engine = get_engine("vllm", [sys.executable, str(_script(tmp_path, "import time\ntime.sleep(60)\n"))])
    proof = prove_engine_starts(engine, timeout_s=0.5)
    assert not proof.ok and proof.timed_out and proof.detail.endswith("--version` did not answer within 0.5 s")


def test_an_engine_slower_than_the_limit_is_unproven_not_failed(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("autotune.serving.process.PROOF_TIMEOUT_S", 0.5)
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path / "studies"))  # doctor checks it is writable
    hangs = [sys.executable, str(_script(tmp_path, "import time\ntime.sleep(60)\n"))]
    doctor(str(_space(tmp_path, hangs, engine="vllm")), as_json=True)  # no AutotuneError: exit 0
    engine = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["check"] == "engine vllm")
    assert engine["unproven"] and not engine["ok"] and "did not answer within 0.5 s: not proven" in engine["detail"]


def test_doctor_exits_1_with_the_fix_on_one_line(tmp_path) -> None:
    done = autotune("doctor", str(_space(tmp_path, MISSING)), "--json", studies=tmp_path / "studies")
    assert done.returncode == 1, done.stderr
    engine = next(c for c in json.loads(done.stdout)["checks"] if c["check"] == "engine sglang")
    assert not engine["ok"]
    error = done.stderr.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("autotune: error: 1 check(s) of ") and "fix: " in error[0]


def test_study_run_checks_a_python_module_engine_before_any_launch(tmp_path) -> None:
    space = load_space(_space(tmp_path, MISSING))
    engine = get_engine("sglang", MISSING)
    with pytest.raises(EngineNotInstalled, match="cannot import no_such_module_xyz.*fix: "):
        check_executable(engine)
    done = autotune("study", "run", str(_space(tmp_path, MISSING)), "--n-trials", "2", studies=tmp_path / "studies")
    (error,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert (
        done.returncode == 1 and error.startswith("autotune: error: engine sglang cannot start: ") and "fix: " in error
    )
    assert not list((tmp_path / "studies").glob(f"{space.name}*"))  # no study made, nothing launched


def test_a_missing_tokenizer_answers_without_waiting_for_a_slow_engine(tmp_path, monkeypatch, capsys) -> None:
    """What stops every launch (here the model's tokenizer: a hub id not in an offline cache) is known in a second;
    doctor then waits for a slow engine's version only ``_QUICK_PROOF_S``, not the proof's full limit."""
    monkeypatch.setattr("autotune.cli.doctor._QUICK_PROOF_S", 0.5)
    monkeypatch.setattr("autotune.serving.process.PROOF_TIMEOUT_S", 600)  # would hang the test if it were waited for
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path / "studies"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hangs = [sys.executable, str(_script(tmp_path, "import time\ntime.sleep(60)\n"))]
    space = yaml.safe_load(_space(tmp_path, hangs, engine="vllm").read_text())
    del space["workload"]["tokenizer"]
    space["engines"]["vllm"]["fixed"]["model"] = "acme/not-cached"
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    with pytest.raises(AutotuneError, match=r"tokenizer \(vllm\): tokenizer.json of acme/not-cached"):
        doctor(str(tmp_path / "space.yaml"), as_json=True)
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["engine vllm"]["unproven"] and "within 0.5 s: not waited for" in checks["engine vllm"]["detail"]
    assert not checks["tokenizer (vllm)"]["ok"] and "HF_HUB_OFFLINE is set" in checks["tokenizer (vllm)"]["detail"]
