"""A storage that stops answering mid-study: PostgreSQL stopped (ridden out, or given up in one line), a disk that
fills up or turns read-only under a SQLite study (one line with the fix; the rerun finishes)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tests.conftest import REPO
from tests.study.conftest import ENGINE, autotune, write_space
from tests.study.own_postgres import own_postgres

# The outage is 30 s; 8 s already outlasts the grace period of a 1-s heartbeat (3 s) more than twice over.
# AUTOTUNE_TEST_OUTAGE_S=30 runs the issue's.
OUTAGE_S = float(os.environ.get("AUTOTUNE_TEST_OUTAGE_S", "8"))
_PARAMS = {"max_num_seqs": {"choices": [1, 2, 4, 8, 16, 32], "default": 2},
           "dtype": {"choices": ["float32", "bfloat16"], "default": "float32"}}  # fmt: skip
_GUARD_S = 240  # a guard against a hang, not a timing


def _trials(storage: str, name: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name=name, storage=storage).trials
    except (KeyError, Exception):  # not created yet, or the schema is being made at this moment
        return []


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + _GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.3)


def _worker(space: Path, storage: str, name: str, n_trials: int, studies: Path, **env: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--study", name, "--storage", storage,
            "--n-trials", str(n_trials), "--executable", ENGINE]  # fmt: skip
    environment = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "AUTOTUNE_HEARTBEAT_S": "1"} | env
    return subprocess.Popen(argv, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip


def _assert_budget_launched_once_each(trials: list[optuna.trial.FrozenTrial], n_trials: int) -> None:
    launched = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and t.user_attrs.get("launched")]
    assert len(launched) == n_trials  # the budget: nothing lost
    keys = [t.user_attrs["config_key"] for t in launched]
    assert len(keys) == len(set(keys))  # no configuration launched twice


@pytest.mark.slow
def test_four_workers_ride_out_postgres_stopped(tmp_path) -> None:
    n_trials, name = 12, "outage"
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "40"}, params=_PARAMS)  # trials of a few seconds
    with own_postgres() as server:
        workers = [_worker(space, server.url, name, n_trials, tmp_path / "studies") for _ in range(4)]
        try:
            # stopped while trials run and some have finished: the outage hits engines mid-benchmark
            _wait_for(lambda: sum(t.state.name == "COMPLETE" for t in _trials(server.url, name)) >= 2
                      and sum(t.state.name == "RUNNING" for t in _trials(server.url, name)) >= 2,
                      "two finished trials and two running")  # fmt: skip
            server.stop()
            time.sleep(OUTAGE_S)  # the outage itself, not a wait for something to happen
            server.start()
            outputs = [w.communicate(timeout=_GUARD_S) for w in workers]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    os.killpg(worker.pid, 9)
        errors = [err for _, err in outputs]
        # each failed worker's own last lines: the whole list is cut short in a failure's report
        failed = {i: err[-2000:] for i, (w, err) in enumerate(zip(workers, errors, strict=True)) if w.returncode}
        assert not failed, failed
        assert not any("Traceback" in err for err in errors), errors
        assert sum("unreachable" in err for err in errors) >= 2, errors  # they did meet the outage, and said so
        trials = optuna.load_study(study_name=name, storage=server.url).trials
    # no FAIL: no worker's trial was taken for a dead worker's when the storage came back, nor given up
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED", "WAITING"}, [t.state.name for t in trials]
    _assert_budget_launched_once_each(trials, n_trials)


@pytest.mark.slow
def test_a_worker_that_gives_up_says_so_and_leaves_its_trial_to_be_retried(tmp_path) -> None:
    n_trials, name, studies = 3, "gives-up", tmp_path / "studies"
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "40"}, params=_PARAMS)
    with own_postgres() as server:
        worker = _worker(space, server.url, name, n_trials, studies, AUTOTUNE_STORAGE_RETRY_S="2")
        try:
            _wait_for(lambda: any(t.state.name == "RUNNING" and "engine_process" in t.user_attrs
                                  for t in _trials(server.url, name)), "a trial with its engine running")  # fmt: skip
            server.stop()
            _, err = worker.communicate(timeout=_GUARD_S)  # it gives up while the storage is still down
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, 9)
        server.start()
        assert worker.returncode == 1, err
        assert "Traceback" not in err, err
        errors = [line for line in err.splitlines() if line.startswith("autotune: error:")]
        assert len(errors) == 1 and "unreachable for 2 s; fix:" in errors[0], err
        # left RUNNING, not failed as a configuration: the next run finds it stale and runs it again
        assert [t.state.name for t in _trials(server.url, name)].count("RUNNING") == 1
        rerun = autotune("study", "run", str(space), "--study", name, "--storage", server.url,
                         "--n-trials", str(n_trials), "--executable", ENGINE, studies=studies)  # fmt: skip
        assert rerun.returncode == 0, rerun.stderr
        trials = optuna.load_study(study_name=name, storage=server.url).trials
    assert [t.state.name for t in trials].count("FAIL") == 1  # the given-up trial, as a dead worker's
    _assert_budget_launched_once_each(trials, n_trials)


@contextlib.contextmanager
def _small_filesystem() -> Iterator[Path]:
    """A 32-MiB tmpfs mounted for the test (root with CAP_SYS_ADMIN, as in this container): a real filesystem that
    fills up (and a directory of which a read-only bind mount covers: a chmod would not stop root)."""
    mount_point = Path(tempfile.mkdtemp(prefix="autotune-fs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount_point)], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        mount_point.rmdir()
        pytest.skip(f"cannot mount a small tmpfs to fill up: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-R", "-l", str(mount_point)], check=False)
        mount_point.rmdir()


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as out:
        while True:
            out.write(b"\0" * (1 << 20))
            out.flush()
    return filler


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_disk_that_fills_up_or_turns_read_only_is_one_line_and_the_rerun_finishes(tmp_path, fault) -> None:
    n_trials, name = 4, "disk"
    space = write_space(tmp_path, env={"SCRIPTED_ITL_MS": "20"}, params=_PARAMS)
    with _small_filesystem() as mount_point:
        studies = mount_point / "studies"
        storage = f"sqlite:///{studies}/{name}.db"
        worker = _worker(space, storage, name, n_trials, studies)
        try:
            _wait_for(lambda: any(t.state.name == "COMPLETE" for t in _trials(storage, name)), "a finished trial")
            if fault == "full":
                filler = _fill(mount_point)
            else:  # a read-only mount of the same files over the directory: an open file stays writable (as when a
                # filesystem is remounted read-only under a process; a remount itself is refused while files are open)
                for argv in (["mount", "--bind", str(studies), str(studies)],
                             ["mount", "-o", "remount,bind,ro", str(studies)]):  # fmt: skip
                    done = subprocess.run(argv, capture_output=True, text=True)
                    if done.returncode != 0:  # seen once in CI: exit 32, the container refused the remount
                        pytest.skip(f"{' '.join(argv[:3])} refused here ({done.returncode}): {done.stderr.strip()}")
            _, err = worker.communicate(timeout=_GUARD_S)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, 9)
        assert worker.returncode == 1, err
        assert "Traceback" not in err, err
        errors = [line for line in err.splitlines() if line.startswith("autotune: error:")]
        assert len(errors) == 1 and "fix: free space" in errors[0] and "rerun" in errors[0], err
        if fault == "full":
            filler.unlink()
        else:
            subprocess.run(["umount", str(studies)], check=True)
        with sqlite3.connect(studies / f"{name}.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rerun = autotune("study", "run", str(space), "--study", name, "--storage", storage,
                         "--n-trials", str(n_trials), "--executable", ENGINE, studies=studies)  # fmt: skip
        assert rerun.returncode == 0, rerun.stderr
        _assert_budget_launched_once_each(optuna.load_study(study_name=name, storage=storage).trials, n_trials)
