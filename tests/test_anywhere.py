"""autotune outside its checkout: installed (not editable) into a fresh venv, run from an empty directory; spaces by
name; studies under ./studies or $AUTOTUNE_STORAGE; the study named the same way in every command; bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune import __version__
from autotune.cli import app
from tests.conftest import REPO, SPACES
from tests.study.conftest import POSTGRES, autotune, postgres_or_skip

runner = CliRunner()


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "VIRTUAL_ENV", "PYTHON"))}
    return env | extra


@pytest.mark.slow
def test_fresh_venv_outside_the_checkout(tmp_path) -> None:
    venv, work, source = tmp_path / "venv", tmp_path / "work", tmp_path / "source"
    work.mkdir()
    source.mkdir()
    # what a source distribution holds, copied (pip builds in the source tree: never in the checkout under test)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, source / part)
    for folder in ("autotune", "search_spaces"):  # the shipped spaces install as package data from search_spaces/
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(source)], capture_output=True,
                             text=True, timeout=900)  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    env = _clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def user(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["autotune", *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    assert user("--version").stdout.strip() == f"autotune {__version__}"
    done = user("study", "run", "--n-trials", "3", "--seed", "1")  # the quickstart, from a directory without spaces
    assert done.returncode == 0, done.stderr
    assert "SIMULATED best" in done.stdout and (work / "studies" / "quickstart.db").is_file()
    init = user("init", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpus", "8", "--gpu-memory-gb", "141",
                "--engine", "vllm", "--engine", "sglang", "--simulate", "-o", "my.yaml")  # fmt: skip
    assert init.returncode == 0, init.stderr
    mine = user("study", "run", "my.yaml", "--n-trials", "4", "--seed", "1")
    assert mine.returncode == 0, mine.stderr
    name = yaml.safe_load((work / "my.yaml").read_text())["name"]
    shown = json.loads(user("study", "show", "--study", name, "--json").stdout)
    assert len(shown["trials"]) == 4 and any(t["values"] for t in shown["trials"])
    assert not (tmp_path / "studies").exists() and not (REPO / "studies" / f"{name}.db").exists()


def test_version_and_the_shipped_spaces_by_name() -> None:
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"autotune {__version__}"
    listed = json.loads(runner.invoke(app, ["space", "list", "--json"]).stdout)
    assert {"quickstart", "deepseek-v32-h200x8", "vllm-cpu-tiny"} <= {row["name"] for row in listed}
    shown = runner.invoke(app, ["space", "show", "deepseek-v32-h200x8", "--json"])
    assert shown.exit_code == 0 and set(json.loads(shown.stdout)["engines"]) == {"vllm", "sglang", "trtllm"}
    wrong = runner.invoke(app, ["space", "show", "deepseek"])
    assert wrong.exit_code == 2 and "no shipped space has that name" in wrong.stderr and "quickstart" in wrong.stderr


@pytest.mark.slow  # minutes on a loaded 2-core machine
def test_autotune_storage_serves_every_command_and_the_study_is_found_without_its_name(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'all.db'}"
    env = _clean_env(AUTOTUNE_STORAGE=storage, AUTOTUNE_HEARTBEAT_S="0")

    def user(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    assert user("study", "run", "quickstart", "--n-trials", "3", "--study", "first").returncode == 0
    assert (tmp_path / "all.db").is_file() and not (tmp_path / "studies" / "first.db").exists()
    shown = user("study", "show", "--json")  # the only study there: no --study needed
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["study"] == "first"
    more = user("study", "run", "quickstart", "--study", "first", "--more", "2")
    assert more.returncode == 0, more.stderr
    assert (
        json.loads(user("study", "show", "--json").stdout)["budget"]["launches"] == 5
    )  # --more adds 2 launches to the 3
    assert user("study", "run", "quickstart", "--n-trials", "2", "--study", "second").returncode == 0
    ambiguous = user("study", "best")
    assert ambiguous.returncode == 2 and "first, second" in ambiguous.stderr and "--study" in ambiguous.stderr
    best = json.loads(user("study", "best", "--study", "second", "--json").stdout)
    assert best["simulated"] and best["launch"]["argv"]


@pytest.mark.parametrize("n_trials", ["-5", "0"])
def test_n_trials_must_be_positive(n_trials) -> None:
    done = runner.invoke(app, ["study", "run", "quickstart", "--n-trials", n_trials])
    assert done.exit_code == 2 and "--n-trials" in done.output


def test_n_trials_and_more_together_are_refused() -> None:
    done = runner.invoke(app, ["study", "run", "quickstart", "--n-trials", "4", "--more", "2"])
    assert done.exit_code == 2 and "--more" in done.stderr and "fix:" in done.stderr


def test_a_binary_file_given_as_a_space_is_one_line(tmp_path) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    done = runner.invoke(app, ["space", "validate", str(binary)])
    assert done.exit_code == 2 and "not a text file" in done.stderr and "Traceback" not in done.output


def _table_space(tmp_path: Path, table: str | None) -> Path:
    space = yaml.safe_load((SPACES / "quickstart.yaml").read_text())
    space["simulate"] = {"performance_model": "table", "mode": "direct"} | ({"table": table} if table else {})
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(None, "cannot read the performance table"), ("", "columns must be"), ("tp,status,output_throughput\n", "no rows"),
     ("tp,colour,status\n8,red,ok\n", "unknown: ['colour']")],
)  # fmt: skip
def test_space_validate_checks_the_performance_table(tmp_path, content, fragment) -> None:
    table = tmp_path / "landscape.csv"
    if content is not None:
        table.write_text(content)
    done = runner.invoke(app, ["space", "validate", str(_table_space(tmp_path, str(table)))])
    assert done.exit_code == 2, done.output
    assert "simulate.table" in done.stderr and fragment in done.stderr and "fix:" in done.stderr


def test_a_table_model_without_a_table_is_refused(tmp_path) -> None:
    done = runner.invoke(app, ["space", "validate", str(_table_space(tmp_path, None))])
    assert done.exit_code == 2 and "needs `table: file.csv`" in done.stderr.lower()


def test_bench_errors_name_the_bad_value(tmp_path) -> None:
    for flag, value in (("--dataset", "sharegtp"), ("--endpoint", "/v1/chat")):
        done = runner.invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", flag, value])
        assert done.exit_code == 2 and f"{flag} {value}:" in done.stderr and "fix:" in done.stderr


def test_every_option_of_every_command_has_help() -> None:
    import typer.main

    missing = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        missing.extend(f"{' '.join(path)} {p.name}" for p in getattr(command, "params", []) if not p.help)

    walk(typer.main.get_command(app), ["autotune"])
    assert missing == []


def test_doctor_reports_a_missing_engine_and_exits_1(tmp_path) -> None:
    space = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    space["engines"]["vllm"]["executable"] = [str(tmp_path / "no-such-vllm")]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    done = autotune("doctor", str(path), "--json", studies=tmp_path / "studies")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    engine = next(c for c in report["checks"] if c["check"] == "engine vllm")
    assert not report["ok"] and not engine["ok"] and "no-such-vllm not found" in engine["detail"]


def test_doctor_on_the_quickstart_lists_gpus_extras_and_storage(tmp_path) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H200, 143771, 143000'\necho '1, NVIDIA H200, 143771, 1000'\n")
    smi.chmod(0o755)
    env = _clean_env(PATH=f"{smi.parent}{os.pathsep}{os.environ['PATH']}", AUTOTUNE_STUDIES_DIR=str(tmp_path / "s"))
    done = subprocess.run([sys.executable, "-m", "autotune", "doctor", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["engine vllm"]["ok"] and "simulated" in checks["engine vllm"]["detail"]
    assert checks["GPUs"]["detail"].startswith("2 GPU(s): 0: NVIDIA H200, 140 of 140 GiB free; 1: NVIDIA H200, 1 of")
    assert {"extra dashboard", "extra postgres", "extra aiconfigurator", "storage", "studies directory"} <= set(checks)
    assert checks["studies directory"]["ok"]


@pytest.mark.parametrize(
    ("storage", "ok"), [(POSTGRES, True), ("postgresql+psycopg://postgres@127.0.0.1:1/none", False)]
)
def test_doctor_says_whether_autotune_storage_is_reachable(tmp_path, storage, ok) -> None:
    if ok:
        postgres_or_skip()
    env = _clean_env(AUTOTUNE_STORAGE=storage, AUTOTUNE_STUDIES_DIR=str(tmp_path / "studies"))
    done = subprocess.run([sys.executable, "-m", "autotune", "doctor", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr  # only an engine that cannot start fails the run
    check = next(c for c in json.loads(done.stdout)["checks"] if c["check"] == "storage")
    assert check["ok"] is ok and ("reachable" in check["detail"] if ok else "127.0.0.1:1" in check["detail"])
