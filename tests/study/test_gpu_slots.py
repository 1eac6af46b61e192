"""`study run --gpus`: trials run at once on disjoint GPUs of the node (8 fake GPUs: an nvidia-smi on PATH), each
engine given its own as CUDA_VISIBLE_DEVICES; a trial that needs more waits for them; a killed tuner leaves no engine
behind once the next `study run` is done. The scripted engine records the GPUs it got and when it held them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from autotune.search.workers import concurrent_trials
from autotune.serving.process import group_alive
from autotune.space.files import load_space
from tests.conftest import REPO
from tests.study.conftest import ENGINE, autotune, show, write_space

GPUS = 8


def fake_nvidia_smi(tmp_path: Path) -> dict:
    """The environment of a node with 8 idle GPUs (nvidia-smi answers `index, MiB`)."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text("#!/bin/sh\n" + "".join(f"echo '{i}, 300'\n" for i in range(GPUS)))
    tool.chmod(0o755)
    return {"PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}"}


def slots_space(tmp_path: Path, startup_s: float = 1.0, tp: tuple[int, ...] = (1, 2, 4, 8)) -> tuple[Path, Path]:
    """Configurations that need ``tp`` GPUs (1, 2, 4 or 8 by default), sampled at random; each launch records
    itself."""
    record = tmp_path / "launches.txt"
    env = {"SCRIPTED_STARTUP_S": str(startup_s), "SCRIPTED_RECORD": str(record)}
    path = write_space(tmp_path, env=env, hardware={"gpus": GPUS}, search={"sampler": "random", "prior": "none"},
                       params={"tp": {"choices": list(tp), "default": 1},
                               "max_num_seqs": {"choices": [2, 8, 32], "default": 2}})  # fmt: skip
    space = yaml.safe_load(path.read_text())
    space["workload"]["num_prompts"] = 8
    path.write_text(yaml.safe_dump(space))
    return path, record


def launches(record: Path) -> dict[int, dict]:
    """By engine pid: the GPUs it was given and the interval it held them (stop: when it was told to stop)."""
    found: dict[int, dict] = {}
    for line in record.read_text().splitlines():
        kind, pid, at, *rest = line.split()
        entry = found.setdefault(int(pid), {"stop": None})
        if kind == "start":
            entry |= {"start": float(at), "gpus": set(rest[0].split(","))}
        else:
            entry["stop"] = float(at)
    return found


def test_concurrent_trials_never_share_a_gpu_and_an_8_gpu_trial_runs_alone(tmp_path, studies) -> None:
    space, record = slots_space(tmp_path)
    done = autotune("study", "run", str(space), "--n-trials", "14", "--seed", "1", "--gpus", "auto",
                    "--executable", ENGINE, studies=studies, env_extra=fake_nvidia_smi(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "12 workers on GPUs 0,1,2,3,4,5,6,7" in done.stderr  # 8 of 1 GPU fit, and half as many again
    trials = [t for t in show("scripted", studies)["trials"] if t["launched"]]
    runs = launches(record)
    assert len(runs) == len(trials) and all(run["stop"] for run in runs.values())
    # each engine got the GPUs its trial leased, as many as its tp
    by_gpus = sorted(tuple(sorted(run["gpus"])) for run in runs.values())
    assert by_gpus == sorted(tuple(sorted(t["gpus"])) for t in trials)
    assert all(len(t["gpus"]) == t["params"]["tp"] for t in trials)
    intervals = list(runs.values())
    overlapping = [(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1 :]
                   if a["start"] < b["stop"] and b["start"] < a["stop"]]  # fmt: skip
    assert overlapping, "no two trials ran at once"
    assert all(not a["gpus"] & b["gpus"] for a, b in overlapping), "two concurrent engines shared a GPU"
    assert all(len(a["gpus"]) < GPUS and len(b["gpus"]) < GPUS for a, b in overlapping)
    assert any(len(t["gpus"]) == GPUS for t in trials)
    # the per-set memory check saw only the trial's own GPUs
    assert all(set(t["gpu_memory_mib"]["before"]) == set(t["gpus"]) for t in trials)
    listing = autotune("study", "show", "--study", "scripted", studies=studies).stdout
    assert "GPUs" in listing


def test_a_node_runs_extra_workers_only_where_launches_differ_in_size(tmp_path) -> None:
    mixed, _ = slots_space(tmp_path)
    assert concurrent_trials(load_space(mixed), tuple("01234567")) == 12  # 8 of 1 GPU fit; 4 wait meanwhile
    space = yaml.safe_load(mixed.read_text())
    space["params"]["tp"] = {"choices": [2], "default": 2}
    mixed.write_text(yaml.safe_dump(space))
    assert concurrent_trials(load_space(mixed), tuple("01234567")) == 4  # every launch needs 2: no one would wait


def test_a_killed_tuner_with_concurrent_trials_leaves_no_engine_after_the_next_run(tmp_path, studies) -> None:
    # engines that are still starting when the tuner dies; small ones, so that several run at once (an 8-GPU trial,
    # which the largest-first leases may start first, would run alone)
    space, record = slots_space(tmp_path, startup_s=0.3, tp=(1, 2))
    try:
        _kill_and_resume(space, studies, tmp_path)
    finally:  # whatever failed above: no engine of this test outlives it
        for pid in launches(record) if record.exists() else ():
            with contextlib.suppress(OSError):
                if b"autotune.testing.scripted" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.killpg(pid, signal.SIGKILL)


def _kill_and_resume(space: Path, studies: Path, tmp_path: Path) -> None:
    # The killed tuner's engines never become ready (SCRIPTED_NEVER_READY, in its environment only, which its engines
    # inherit) and its start-up timeout is longer than the test: they are still starting when the tuner is killed,
    # however slowly a busy machine runs this test. (A start-up of a few seconds raced the test's polling: on a
    # loaded machine the engines had served and been stopped before the kill.)
    data = yaml.safe_load(space.read_text())
    data["startup_timeout_s"] = 3600
    space.write_text(yaml.safe_dump(data))
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "AUTOTUNE_HEARTBEAT_S": "1",
                        "SCRIPTED_NEVER_READY": "1"} | fake_nvidia_smi(tmp_path)  # fmt: skip
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--n-trials", "4", "--seed", "3",
            "--gpus", "auto", "--executable", ENGINE]  # fmt: skip
    tuner = subprocess.Popen(argv, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        # a deadline only against a hang: the engines recorded stay starting until the kill, whenever it comes
        deadline, engines = time.monotonic() + 600, set()
        while time.monotonic() < deadline and len(engines) < 2 and tuner.poll() is None:
            time.sleep(0.5)
            engines = _engine_groups(studies)  # the engines of the trials running now
        assert len(engines) >= 2, "fewer than two trials ran at once"
    finally:
        os.kill(tuner.pid, signal.SIGKILL)  # the tuner alone: its workers die with it, the engines are orphaned
        tuner.wait()
    # its workers die with it (the fork server exits, then PDEATHSIG): waited for, so that the next run finds their
    # trials' tuner gone rather than a worker still alive for an instant
    deadline = time.monotonic() + 120
    while group_alive(tuner.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(tuner.pid), "a worker of the killed tuner outlived it"
    assert all(group_alive(pgid) for pgid in engines)  # orphans, until a worker finds their trials' tuner gone
    again = autotune("study", "run", str(space), "--n-trials", "4", "--gpus", "auto", "--executable", ENGINE,
                     studies=studies, env_extra=fake_nvidia_smi(tmp_path))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not any(group_alive(pgid) for pgid in engines), "an engine of the killed tuner is still running"
    trials = show("scripted", studies)["trials"]
    # the budget counts launches: every one measured (COMPLETE) or stopped by the pruner (PRUNED: the 4th trial can
    # be judged against 3), the killed ones (FAIL) retried
    measured = [t for t in trials if t["launched"] and t["state"] in ("COMPLETE", "PRUNED")]
    assert len(measured) == 4, [(t["number"], t["state"], t["launched"]) for t in trials]


def _engine_groups(studies: Path) -> set[int]:
    """The process groups of the engines the study's running trials recorded (what a worker would kill)."""
    done = autotune("study", "show", "--study", "scripted", "--json", studies=studies)
    if done.returncode != 0:
        return set()
    groups = set()
    for trial in json.loads(done.stdout)["trials"]:
        if trial["state"] == "RUNNING" and trial.get("engine_process"):
            groups.add(trial["engine_process"]["pgid"])
    return groups
