"""The shipped sbatch recipe (deploy/slurm/autotune-workers.sbatch, unchanged) run by a real Slurm
(scripts/slurm-local.sh: two nodes on this host) as an array of 2 tasks, each `autotune study run --gpus auto` on its
node's fake GPU (an nvidia-smi on PATH that lists the node's own) with the scripted engine, both on one PostgreSQL
study. One task is cancelled with `scancel` while its trial's engine runs: the other worker finds that trial stale
and retries it, the study ends with exactly its budget of launches, no engine is left running, and Slurm's records
(`sacct`, the tasks' output files) say what a user would read: one task COMPLETED 0:0, the other CANCELLED."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml

from autotune.serving.process import group_alive, recorded_group_alive
from tests.cluster.conftest import SLURM_LOCAL, interpreter_bin, slurm_command
from tests.conftest import REPO
from tests.study.conftest import write_space

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SBATCH = REPO / "deploy" / "slurm" / "autotune-workers.sbatch"
BUDGET = 6
STUDY = "slurm-array"
GPU_OF_NODE = {"n0": "0", "n1": "1"}  # disjoint: both nodes are this host, whose GPU lock directory they share
SACCT_FIELDS = "JobID,JobName,NodeList,State,ExitCode"
# the trial cancelled is one of the sampler's, not a baseline (which both workers may be running at first, so that
# its retry would be a duplicate that launches nothing)
FIRST_SAMPLED = 2


def test_an_sbatch_array_shares_one_study_and_a_cancelled_tasks_trial_is_retried(tmp_path, slurm,
                                                                                 postgres_database) -> None:  # fmt: skip
    if not (interpreter_bin() / "autotune").exists():
        pytest.skip(f"no `autotune` command beside {sys.executable} (pip install -e .) for the job to run")
    env = _job_environment(tmp_path, slurm, postgres_database)
    space = _space(tmp_path)
    submitted = slurm_command(env, "sbatch", "--parsable", "--array=0-1", str(SBATCH), str(space), STUDY,
                              cwd=tmp_path)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        victim, killed = _cancel_a_task_mid_trial(env, job, postgres_database, tmp_path)
        _wait(lambda: not _squeue(env, job), 600, "the array to end")
    finally:
        slurm_command(env, "scancel", job)  # whatever failed above: no task of this test outlives it
    survivor = f"{job}_{1 - int(victim.rpartition('_')[2])}"

    # Slurm's record, as `sacct` shows it (accounting lags the job's end a little); where the cluster has no
    # accounting (no MariaDB for slurmdbd), its job completion log, which has the tasks but not their steps
    accounting = _accounting(env)
    source = f"sacct -j {job} -o {SACCT_FIELDS}" if accounting else f"{slurm['SLURM_LOCAL_DIR']}/log/jobcomp.txt"
    read = (lambda: _sacct_final(env, job)) if accounting else (lambda: _jobcomp_final(slurm, job))
    lines = _wait(read, 60, f"{source} to record both tasks' ends")
    print(f"{source}:\n" + "\n".join("  " + " | ".join(row) for row in lines))
    outputs = {task: (tmp_path / f"autotune-{job}_{task.rpartition('_')[2]}.out").read_text()
               for task in (victim, survivor)}  # fmt: skip
    for task, text in outputs.items():
        print(f"{task}'s output, its end:\n" + "\n".join("  " + line[:160] for line in text.splitlines()[-6:]))
    tasks = {row[0]: row for row in lines}
    assert tasks[survivor][3:] == ["COMPLETED", "0:0"], lines
    assert tasks[victim][3].startswith("CANCELLED"), lines
    if accounting:
        assert tasks[f"{survivor}.0"][3:] == ["COMPLETED", "0:0"], lines  # the `srun autotune study run` step
        assert tasks[victim][3] == "CANCELLED by 0", lines  # by root, who ran scancel
        # its step stopped itself on the SIGTERM (exit code 1, its message), before Slurm's SIGKILL (KillWait)
        assert tasks[f"{victim}.0"][4] == "1:0", lines
    assert "CANCELLED" in outputs[victim] and "stopped by SIGTERM" in outputs[victim], outputs[victim][-2000:]

    # the study: the cancelled task's trial found stale (FAIL) and retried by the other, the budget exact
    trials = optuna.load_study(study_name=STUDY, storage=postgres_database).trials
    assert [t.number for t in trials if t.state.name == "FAIL"] == [killed.number]
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retried) == 1 and retried[0].state.name in ("COMPLETE", "PRUNED")
    assert retried[0].params == killed.params
    # its engine launched again (a new process group: the retry starts with the dead trial's attributes), unless
    # the configuration was measured meanwhile
    again = retried[0].user_attrs.get("engine_process") != killed.user_attrs["engine_process"]
    assert again or "duplicate_of" in retried[0].user_attrs
    print(
        f"trial {killed.number} (cancelled mid-trial on GPU {killed.user_attrs['gpus'][0]}) failed as stale; "
        f"retried as trial {retried[0].number} on GPU {retried[0].user_attrs['gpus'][0]}: {retried[0].state.name}, "
        + ("its engine launched again" if again else f"a duplicate of #{retried[0].user_attrs['duplicate_of']}")
    )
    launched = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and t.user_attrs.get("launched")]
    assert len(launched) == BUDGET
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED", "FAIL", "WAITING"}
    assert {tuple(t.user_attrs["gpus"]) for t in trials if t.user_attrs.get("gpus")} == {("0",), ("1",)}

    # no engine left: neither the group any trial recorded nor any process working in the study's directory
    groups = [t.user_attrs["engine_process"]["pgid"] for t in trials if t.user_attrs.get("engine_process")]
    assert not [pgid for pgid in groups if group_alive(pgid)]
    assert not _processes_under(tmp_path / "studies")


def _job_environment(tmp_path: Path, slurm: dict, storage: str) -> dict[str, str]:
    """What sbatch exports to the job (its default): autotune's interpreter first on PATH, after an nvidia-smi that
    lists the node's own GPU; this checkout's code; the study's storage; heartbeats of 1 s (stale after 3 s)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    cases = "".join(f"    {node}) echo '{gpu}, 300' ;;\n" for node, gpu in GPU_OF_NODE.items())
    smi.write_text(f'#!/bin/sh\ncase "$SLURMD_NODENAME" in\n{cases}esac\n')
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STUDIES_DIR"}  # the recipe's: the submit dir's
    return env | slurm | {"PATH": os.pathsep.join([str(bin_dir), str(interpreter_bin()), env["PATH"]]),
                          "PYTHONPATH": str(REPO), "AUTOTUNE_STORAGE": storage, "AUTOTUNE_HEARTBEAT_S": "1"}  # fmt: skip


def _space(tmp_path: Path) -> Path:
    """The scripted study: trials of a few seconds, a budget of BUDGET launches, the engine this interpreter's."""
    path = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "20"}, trials=BUDGET,
                       params={"max_num_seqs": {"choices": [1, 2, 4, 8, 16, 32], "default": 2},
                               "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}})  # fmt: skip
    space = yaml.safe_load(path.read_text())
    space["engines"]["vllm"]["executable"] = [sys.executable, "-m", "autotune.testing.scripted"]
    path.write_text(yaml.safe_dump(space))
    return path


def _cancel_a_task_mid_trial(env: dict, job: str, storage: str,
                             submit_dir: Path) -> tuple[str, optuna.trial.FrozenTrial]:  # fmt: skip
    """`scancel` an array task while its trial's engine runs (both tasks running); (that task, its trial)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        running = {task: node for task, node, state in _squeue(env, job) if state == "RUNNING"}
        for task, node in running.items():
            for trial in _trials(storage):
                if (trial.state.name == "RUNNING" and trial.user_attrs.get("gpus") == [GPU_OF_NODE[node]]
                        and trial.number >= FIRST_SAMPLED and len(running) == 2
                        and recorded_group_alive(trial.user_attrs.get("engine_process"))):  # fmt: skip
                    cancelled = slurm_command(env, "scancel", task)
                    assert cancelled.returncode == 0, cancelled.stderr
                    return task, trial
        time.sleep(0.5)
    out = "\n".join(p.read_text()[-1500:] for p in submit_dir.glob("autotune-*.out"))
    raise AssertionError(f"never saw both tasks run and one run an engine; squeue: {_squeue(env, job)}\n{out}")


def _squeue(env: dict, job: str) -> list[tuple[str, str, str]]:
    """(task id, node, state) of the array's tasks still queued or running."""
    done = slurm_command(env, "squeue", "-h", "-j", job, "-o", "%i %N %T")
    return [tuple(line.split()) for line in done.stdout.splitlines() if len(line.split()) == 3]


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name=STUDY, storage=storage).trials
    except KeyError:  # not created yet
        return []
    except sqlalchemy.exc.IntegrityError:  # this poll made the schema of the new database as a worker did: poll again
        return []


def _sacct_final(env: dict, job: str) -> list[list[str]] | None:
    """sacct's lines for the array (tasks and their steps), once both tasks have ended; else None."""
    done = slurm_command(env, "sacct", "-j", job, "--noheader", "--parsable2", "-o", SACCT_FIELDS)
    rows = [line.split("|") for line in done.stdout.splitlines() if line]
    tasks = [row for row in rows if "." not in row[0]]
    ended = len(tasks) == 2 and all(row[3] not in ("PENDING", "RUNNING") for row in tasks)
    return rows if ended else None


def _accounting(env: dict) -> bool:
    """Whether the cluster keeps accounting (slurmdbd), which sacct reads."""
    config = slurm_command(env, "scontrol", "show", "config").stdout
    return "accounting_storage/slurmdbd" in config


def _jobcomp_final(slurm: dict, job: str) -> list[list[str]] | None:
    """The job completion log's lines for the array's tasks, as sacct's fields, once both tasks have ended."""
    log = Path(slurm["SLURM_LOCAL_DIR"]) / "log" / "jobcomp.txt"
    rows = []
    for line in log.read_text().splitlines() if log.exists() else ():
        fields = dict(field.partition("=")[::2] for field in line.split())
        if fields.get("ArrayJobId") == job:
            task = f"{job}_{fields['ArrayTaskId']}"
            rows.append([task, fields["Name"], fields["NodeList"], fields["JobState"], fields["ExitCode"]])
    return sorted(rows) if len(rows) == 2 else None


def _processes_under(directory: Path) -> list[int]:
    """The live processes whose working directory is in ``directory`` (an engine runs in its trial's directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _wait(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_up_again_keeps_the_running_cluster(slurm) -> None:
    """`up` is idempotent: on a cluster that is up it starts nothing and prints the same SLURM_CONF."""
    run = Path(slurm["SLURM_LOCAL_DIR"]) / "run"
    pids = {path.name: path.read_text() for path in run.glob("*.pid")}
    again = slurm_command(slurm, str(SLURM_LOCAL), "up")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"export SLURM_CONF={slurm['SLURM_CONF']}"
    assert {path.name: path.read_text() for path in run.glob("*.pid")} == pids
    assert {"munged.pid", "slurmctld.pid", "slurmd-n0.pid", "slurmd-n1.pid"} <= pids.keys()
