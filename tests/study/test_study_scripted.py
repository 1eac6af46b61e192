"""`autotune study run` end to end with the scripted stand-in engine: fast, deterministic, real subprocesses."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import httpx
import pytest

from autotune.search.study import open_storage
from autotune.serving.process import free_port, group_alive, group_record, recorded_group_alive
from tests.study.conftest import ENGINE, autotune, show, write_space


@pytest.mark.slow  # minutes on a loaded 2-core machine
def test_study_runs_learns_crashes_and_exports_the_best(tmp_path, studies) -> None:
    space = write_space(tmp_path)
    done = autotune(
        "study", "run", str(space), "--n-trials", "8", "--seed", "1", "--executable", ENGINE, studies=studies
    )
    assert done.returncode == 0, done.stderr
    trials = show("scripted", studies)["trials"]
    # 8 launches asked for, 7 possible: 6 configurations without speculative decoding, and the one speculative
    # launch that teaches the rule which rules the others out; the eighth is never made
    assert "space exhausted: every configuration was tried (7 launches" in done.stderr
    assert {t["state"] for t in trials} <= {"COMPLETE", "PRUNED", "WAITING"}
    assert trials[0]["baseline"] and trials[0]["params"] == {"max_num_seqs": 2, "dtype": "float32", "speculative": None}
    failed = [t for t in trials if t["failure_kind"] and t["duplicate_of"] is None]
    assert failed and all(t["params"]["speculative"] == "mtp:1" for t in failed)
    # the first speculative trial fails at start-up and teaches a rule; later ones are refused by it, unlaunched
    first, *later = failed
    assert first["failure_kind"] == "unsupported" and first["taught_rule"] == "learned:speculative=mtp:1"
    assert all(t["rejected_by"] == "learned:speculative=mtp:1" and not t["launched"] for t in later)
    # an exact duplicate of any earlier configuration is never launched: it has no trial directory of its own
    launched = {int(p.name) for p in (studies / "scripted" / "trials").iterdir()}
    assert launched == {t["number"] for t in trials if t["launched"]}
    assert not launched & {t["number"] for t in trials if t["duplicate_of"] is not None}
    configs = [json.dumps(t["params"], sort_keys=True) for t in trials if t["number"] in launched]
    assert len(configs) == len(set(configs))
    best = json.loads(autotune("study", "best", "--study", "scripted", "--json", studies=studies).stdout)
    baseline_value = trials[0]["values"][0]
    assert best["values"][0] >= baseline_value
    # the exported command, run by hand, starts a server that answers
    port = free_port()
    argv = best["launch"]["argv"]
    argv[argv.index("--port") + 1] = str(port)
    server = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", **best["launch"]["env"]}, start_new_session=True,
                              cwd=tmp_path)  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # waits for the server to answer; a guard against a hang, not a timing
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "tiny"
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, "the exported command did not serve"
                time.sleep(0.2)
    finally:
        server.kill()
        server.wait()
    shell = autotune("study", "best", "--study", "scripted", studies=studies).stdout
    assert "autotune bench --base-url" in shell and sys.executable in shlex.split(shell.splitlines()[1])


@pytest.mark.slow  # minutes on a loaded 2-core machine
def test_killed_tuner_resumes_without_losing_work_or_leaving_engines(tmp_path, studies) -> None:
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "60"})  # trials of a few seconds
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--n-trials", "5", "--seed", "2",
            "--executable", ENGINE]  # fmt: skip
    env = {"AUTOTUNE_STUDIES_DIR": str(studies), "AUTOTUNE_HEARTBEAT_S": "1", "PATH": "/usr/bin:/bin"}
    tuner = subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    orphan = completed_before = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and orphan is None:
        time.sleep(0.2)
        trials = _trials(studies)
        serving = [
            t for t in trials if t.state.name == "RUNNING" and recorded_group_alive(t.user_attrs.get("engine_process"))
        ]
        if serving and any(t.state.name == "COMPLETE" for t in trials):
            tuner.kill()  # SIGKILL: no cleanup at all; the engine (own session) survives as an orphan
            tuner.wait()
            # read again after the kill: the trial seen serving may have finished (and stopped its engine) meanwhile
            trials = _trials(studies)
            left = [t for t in trials if t.state.name == "RUNNING"
                    and recorded_group_alive(t.user_attrs.get("engine_process"))]  # fmt: skip
            orphan = left[0].user_attrs["engine_process"]["pgid"] if left else None
            completed_before = [(t.number, t.values) for t in trials if t.state.name == "COMPLETE"]
            if orphan is None:  # killed between two trials: nothing was orphaned this time; start again
                tuner = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)  # fmt: skip
    tuner.wait()
    assert orphan, "never saw a running engine after a completed trial"
    assert group_alive(orphan)
    _wait_until_stale(studies)  # the event the next run acts on: the killed tuner's trial has no live heartbeat
    done = autotune("study", "run", str(space), "--n-trials", "5", "--executable", ENGINE, studies=studies)
    assert done.returncode == 0, done.stderr
    assert not group_alive(orphan)
    trials = show("scripted", studies)["trials"]
    by_number = {t["number"]: t for t in trials}
    assert all(by_number[number]["values"] == values for number, values in completed_before)  # nothing lost
    assert [t["state"] for t in trials].count("FAIL") == 1  # the interrupted trial, retried as a new one
    assert sum(t["state"] in ("COMPLETE", "PRUNED") and t["launched"] for t in trials) == 5  # 5 launches


def _wait_until_stale(studies) -> None:
    """Wait until the storage counts a running trial as stale (its last heartbeat older than the grace period that
    `study run` gives its storage), so that the next run must find it."""
    storage = open_storage(f"sqlite:///{studies}/scripted.db", heartbeat_s=1)  # as AUTOTUNE_HEARTBEAT_S=1 opens it
    study_id = storage.get_study_id_from_name("scripted")
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing
    while not storage._get_stale_trial_ids(study_id):
        assert time.monotonic() < deadline, "the killed tuner's trial never became stale"
        time.sleep(0.2)


def _trials(studies) -> list:
    import optuna
    import sqlalchemy

    if not (studies / "scripted.db").exists():
        return []
    try:
        return optuna.load_study(study_name="scripted", storage=f"sqlite:///{studies}/scripted.db").trials
    except KeyError:  # created, not yet committed
        return []
    except sqlalchemy.exc.SQLAlchemyError:  # the tuner is creating the schema at this very moment
        return []


def test_engine_dying_mid_benchmark_is_a_crash_and_the_study_goes_on(tmp_path, studies) -> None:
    space = write_space(
        tmp_path, env={"SCRIPTED_DIE_AFTER": "5"}, params={"max_num_seqs": {"choices": [2, 8], "default": 2}}
    )
    done = autotune("study", "run", str(space), "--n-trials", "2", "--executable", ENGINE, studies=studies)
    assert done.returncode == 1 and "no feasible trial" in done.stderr
    trials = show("scripted", studies)["trials"]
    # both configurations launched and crashed; a sampler's repeat of one is a duplicate (no launch), which takes
    # the earlier outcome, so it is not among the launches
    launches = [t for t in trials if t["duplicate_of"] is None]
    assert [t["failure_kind"] for t in launches] == ["crash", "crash"] and all(t["launched"] for t in launches)
    assert all(t["failure_kind"] == "crash" for t in trials)


def test_never_ready_is_a_timeout_and_is_killed(tmp_path, studies) -> None:
    space = write_space(tmp_path, env={"SCRIPTED_NEVER_READY": "1"}, startup_timeout_s=2,
                        params={"max_num_seqs": {"choices": [2, 8], "default": 2}})  # fmt: skip
    done = autotune("study", "run", str(space), "--n-trials", "2", "--executable", ENGINE, studies=studies)
    assert done.returncode == 1
    assert [t["failure_kind"] for t in show("scripted", studies)["trials"] if t["launched"]] == ["timeout", "timeout"]
    engines = [t.user_attrs["engine_process"] for t in _trials(studies) if t.user_attrs["launched"]]
    assert engines and not any(recorded_group_alive(e) for e in engines)  # each launch killed at its timeout


def test_ready_but_answering_nothing_is_a_hang_and_is_killed(tmp_path, studies) -> None:
    space = write_space(tmp_path, env={"SCRIPTED_HANG": "1"}, stall_timeout_s=1,
                        params={"max_num_seqs": {"choices": [2, 8], "default": 2}})  # fmt: skip
    done = autotune("study", "run", str(space), "--n-trials", "2", "--executable", ENGINE, studies=studies)
    assert done.returncode == 1 and "no feasible trial" in done.stderr
    trials = show("scripted", studies)["trials"]
    assert [t["failure_kind"] for t in trials if t["launched"]] == ["hang", "hang"]


def test_bad_input_is_one_line(tmp_path, studies) -> None:
    space = write_space(tmp_path)
    cases = [
        (["--executable", "/nonexistent/vllm"], "engine executable '/nonexistent/vllm' not found"),
        (
            ["--executable", ENGINE, "--storage", "postgresql+psycopg://nobody:pw@127.0.0.1:1/none"],
            "cannot open storage",
        ),
    ]
    for extra, fragment in cases:
        done = autotune("study", "run", str(space), *extra, studies=studies)
        assert done.returncode != 0 and fragment in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
    infeasible = write_space(tmp_path, hardware={"gpus": 1}, params={"max_num_seqs": {"choices": [2], "default": 2}},
                             engines=_with_fixed(space, tp=2))  # fmt: skip
    done = autotune("study", "run", str(infeasible), "--executable", ENGINE, studies=studies)
    assert done.returncode != 0 and "every configuration of the space breaks a static rule" in done.stderr
    assert done.stderr.strip().count("\n") == 0


def _with_fixed(space_path, **knobs) -> dict:
    import yaml

    engines = yaml.safe_load(space_path.read_text())["engines"]
    engines["vllm"]["fixed"].update(knobs)
    return engines


@pytest.mark.slow  # minutes on a loaded 2-core machine
def test_slo_constraints_and_several_objectives(tmp_path, studies) -> None:
    # float32 doubles the scripted ITL (5 → 10 ms): a 7.5 ms TPOT SLO makes every float32 configuration infeasible
    space = write_space(tmp_path, objective={"metrics": [{"name": "total_token_throughput"},
                                                         {"name": "median_ttft_ms", "direction": "minimize"}],
                                             "slo": {"median_tpot_ms": 7.5}},
                        params={"max_num_seqs": {"choices": [8, 32], "default": 8},
                                "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}})  # fmt: skip
    done = autotune(
        "study", "run", str(space), "--n-trials", "6", "--seed", "3", "--executable", ENGINE, studies=studies
    )
    assert done.returncode == 0, done.stderr
    trials = show("scripted", studies)["trials"]
    assert all(len(t["values"]) == 2 for t in trials if t["state"] != "WAITING")  # WAITING: queued, no room left
    assert {t["params"]["dtype"] for t in trials if t["feasible"]} == {"bfloat16"}
    assert not trials[0]["feasible"] and trials[0]["failure_kind"] is None  # the baseline ran, but breaks the SLO
    best = json.loads(autotune("study", "best", "--study", "scripted", "--json", studies=studies).stdout)
    assert (
        "--dtype" in best["launch"]["argv"]
        and best["launch"]["argv"][best["launch"]["argv"].index("--dtype") + 1] == "bfloat16"
    )
    assert best["metric_names"] == ["total_token_throughput", "median_ttft_ms"]


def test_no_group_id_that_is_not_an_engines_is_ever_signalled() -> None:
    import os

    for bogus in (None, -1, 0, 1, True, os.getpgrp(), "123"):
        assert not group_alive(bogus)


def test_a_recorded_group_is_recognised_only_as_itself() -> None:
    import os

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = json.loads(json.dumps(group_record(process.pid)))  # as stored in the study
        assert recorded_group_alive(record)
        assert not recorded_group_alive(record | {"started": record["started"] + 1})  # its number, recycled
        assert not recorded_group_alive(record | {"boot_id": "another-host-or-boot"})
        assert not recorded_group_alive(record | {"pgid": os.getpgrp()})
        assert not recorded_group_alive({"pgid": process.pid})  # no identity, no signal
    finally:
        process.kill()
        process.wait()
    assert not recorded_group_alive(record) and not group_alive(process.pid)


def test_gpu_memory_before_ready_and_after_is_recorded_per_trial(tmp_path, studies) -> None:
    # a fake nvidia-smi: one GPU whose memory rises while a server runs (it writes a marker file while alive)
    marker, smi = tmp_path / "serving", tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\nif ls {marker}.* >/dev/null 2>&1; then echo '0, 90000'; else echo '0, 512'; fi\n")
    smi.chmod(0o755)
    holder = tmp_path / "hold.sh"  # the engine: marks the GPU used while it runs, then execs the scripted server
    holder.write_text(f"#!/bin/sh\ntouch {marker}.$$\ntrap 'rm -f {marker}.$$' EXIT TERM\n{ENGINE} \"$@\" &\nwait $!\n")
    holder.chmod(0o755)
    space = write_space(tmp_path)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}"}
    done = autotune("study", "run", str(space), "--n-trials", "2", "--seed", "1", "--executable", str(holder),
                    studies=studies, env_extra=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    launched = [t for t in show("scripted", studies)["trials"] if t["launched"]]
    assert launched
    for trial in launched:
        facts = trial["gpu_memory_mib"]
        assert facts["before"] == facts["after"] == {"0": 512} and facts["released"] is True, facts
        # a server that became ready held the memory then; one that failed at start-up never got there
        assert facts.get("ready") == (None if trial["failure_kind"] else {"0": 90000})
    table = autotune("study", "show", "--study", "scripted", studies=studies, env_extra=env | {"COLUMNS": "300"}).stdout
    assert "512→90000→512" in table
