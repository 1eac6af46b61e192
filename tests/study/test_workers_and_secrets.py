"""Several workers on one PostgreSQL study, and secrets that never leave the process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna

from autotune.serving.process import group_alive, recorded_group_alive
from tests.conftest import REPO
from tests.study.conftest import ENGINE, POSTGRES, autotune, write_space


def test_two_workers_share_one_postgres_study(tmp_path, pg_study) -> None:
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "2"},
                        params={"max_num_seqs": {"choices": [1, 2, 4, 8, 16, 32], "default": 2},
                                "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}})  # fmt: skip
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--study", pg_study, "--storage", POSTGRES,
            "--n-trials", "10", "--executable", ENGINE]  # fmt: skip
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies")}
    workers = [subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]  # fmt: skip
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    trials = optuna.load_study(study_name=pg_study, storage=POSTGRES).trials
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert sum(1 for t in finished if t.user_attrs["launched"]) == 10  # the launches asked for: no surplus, none lost
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED", "WAITING"}  # WAITING: unused, space exhausted
    launched = [t.user_attrs["config_key"] for t in trials if "duplicate_of" not in t.user_attrs]
    assert len(launched) == len(set(launched))  # no configuration measured twice
    # both workers did some of the work
    # a finished trial's line ("trial 7: ..."), not the progress lines of a running one ("trial 3 of 10 (#7): ...")
    ran = [sum(1 for line in err.splitlines() if re.match(r"trial \d+: ", line)) for _, err in outputs]
    assert all(n > 0 for n in ran) and sum(ran) == len(finished), ran


def test_a_dead_workers_trial_is_retried_by_the_other(tmp_path, pg_study) -> None:
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "40"},  # trials of several seconds
                        params={"max_num_seqs": {"choices": [1, 2, 4, 8, 16, 32], "default": 2},
                                "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}})  # fmt: skip
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--study", pg_study, "--storage", POSTGRES,
            "--n-trials", "5", "--executable", ENGINE]  # fmt: skip
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies"), "AUTOTUNE_HEARTBEAT_S": "1"}
    doomed = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    survivor = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = f"{socket.gethostname()}:{doomed.pid}"
    orphan = None
    deadline = time.monotonic() + 120
    while orphan is None and time.monotonic() < deadline:
        time.sleep(0.2)
        for trial in _trials_or_none(pg_study):
            record = trial.user_attrs.get("engine_process")
            if (
                trial.state.name == "RUNNING"
                and trial.user_attrs.get("worker") == worker
                and recorded_group_alive(record)
            ):
                os.killpg(doomed.pid, signal.SIGKILL)  # the worker only: its engine (own session) is left orphaned
                orphan, killed_trial = record["pgid"], trial.number
                break
    doomed.wait()
    assert orphan is not None, "never saw the doomed worker run an engine"
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    assert not group_alive(orphan)  # the survivor killed the engine the dead worker left
    trials = optuna.load_study(study_name=pg_study, storage=POSTGRES).trials
    states = [t.state.name for t in trials]
    assert states.count("FAIL") == 1 and trials[killed_trial].state.name == "FAIL"
    launches = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and t.user_attrs["launched"]]
    assert len(launches) == 5  # the budget, the lost trial made good
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed_trial]
    assert len(retried) == 1 and retried[0].state.name in ("COMPLETE", "PRUNED")
    assert retried[0].params == trials[killed_trial].params


def _trials_or_none(name: str) -> list:
    try:
        return optuna.load_study(study_name=name, storage=POSTGRES).trials
    except KeyError:  # not created yet
        return []


def test_secrets_never_appear(tmp_path, pg_study, capfd) -> None:
    password, token = "Pw-7b1f-secret", "hf_tok_9c2e_secret"
    storage = f"postgresql+psycopg://postgres:{password}@127.0.0.1:5432/test"  # trust auth ignores the password
    space = write_space(tmp_path, env={"HF_TOKEN": token})
    studies = tmp_path / "studies"
    outputs = [autotune("study", "run", str(space), "--study", pg_study, "--storage", storage, "--n-trials", "4",
                        "--executable", ENGINE, studies=studies)]  # fmt: skip
    assert outputs[0].returncode == 0, outputs[0].stderr
    named = ["--study", pg_study]
    outputs += [autotune("study", cmd, "--storage", storage, *extra, studies=studies)
                for cmd, extra in [("show", [*named, "--json"]), ("best", named), ("best", [*named, "--json"]),
                                   ("list", [])]]  # fmt: skip
    outputs.append(
        autotune(
            "study",
            "run",
            str(space),
            "--storage",
            "postgresql+psycopg://x:" + password + "@127.0.0.1:1/x",
            "--executable",
            ENGINE,
            studies=studies,
        )
    )  # an error message that names the storage
    assert "cannot open storage" in outputs[-1].stderr and "***" in outputs[-1].stderr
    printed = "".join(o.stdout + o.stderr for o in outputs)
    written = b"".join(p.read_bytes() for p in Path(studies).rglob("*") if p.is_file())
    stored = repr(
        [
            (t.params, t.user_attrs, t.system_attrs)
            for t in optuna.load_study(study_name=pg_study, storage=POSTGRES).trials
        ]
    )
    study_attrs = repr(optuna.load_study(study_name=pg_study, storage=POSTGRES).user_attrs)
    for secret in (password, token):
        assert secret not in printed and secret.encode() not in written
        assert secret not in stored and secret not in study_attrs
    assert "HF_TOKEN" in printed  # named, so the user knows to set it, never its value
