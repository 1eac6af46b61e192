"""A tuner killed outright leaves its engine orphaned: the next run on the host kills it before launching anything,
counts its time, and retries its configuration; trials of a live tuner or of another host are left alone."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.storages._rdb import models as rdb_models

from autotune.search.orphans import EngineProcess, TunerProcess, end_dead_workers_trials
from autotune.search.study import open_storage
from autotune.serving.process import group_alive, kill_group, recorded_group_alive
from tests.conftest import REPO
from tests.study.conftest import ENGINE, show, write_space

_GUARD_S = 240  # a guard against a hang (the old behaviour: the rerun waits for the orphan's trial to go stale)


def test_a_killed_tuners_engine_is_killed_before_the_rerun_launches_and_its_time_counted(tmp_path, studies) -> None:
    # each scripted engine appends "start PID TIME" as it starts and, at SIGTERM, "stop PID TIME"
    launches = tmp_path / "launches.log"
    space = write_space(tmp_path, stall_timeout_s=600, params={"max_num_seqs": {"choices": [2, 8], "default": 2}})
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--n-trials", "2", "--seed", "1",
            "--executable", ENGINE]  # fmt: skip
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "SCRIPTED_RECORD": str(launches)}
    # the first run's engine is ready but answers no request: its tuner is mid-benchmark for as long as the test needs
    tuner = subprocess.Popen(argv, cwd=REPO, env=env | {"AUTOTUNE_HEARTBEAT_S": "1", "SCRIPTED_HANG": "1"},
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    rerun = orphan = None
    try:
        killed = _wait_for_benchmark(studies, tuner)
        orphan = EngineProcess.of(killed)
        os.killpg(tuner.pid, signal.SIGKILL)  # the tuner only: its engine runs in a session of its own
        tuner.wait()
        assert orphan is not None and orphan.alive_here(), "the engine did not outlive its tuner"
        # a heartbeat far longer than the test: its grace period cannot be what ends the orphan's trial
        rerun = subprocess.Popen(argv, cwd=REPO, env=env | {"AUTOTUNE_HEARTBEAT_S": "3600"}, start_new_session=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            _, err = rerun.communicate(timeout=_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the rerun never ended the orphan's trial (it waits for the trial's heartbeat to go stale)")
        assert rerun.returncode == 0, err
    finally:
        for group in (tuner.pid, rerun and rerun.pid):
            if group and group_alive(group):
                kill_group(group, grace_s=5)
        for trial in _study(studies).trials if (studies / "scripted.db").exists() else []:  # the orphan, and others
            if (engine := EngineProcess.of(trial)) is not None and engine.alive_here():
                kill_group(engine.pgid, grace_s=5)

    events = [line.split()[:2] for line in launches.read_text().splitlines()]
    assert events[0] == ["start", str(orphan.pgid)]
    next_launch = next(i for i, (kind, _) in enumerate(events) if kind == "start" and i > 0)
    assert events.index(["stop", str(orphan.pgid)]) < next_launch  # the orphan ended before the rerun launched
    assert not group_alive(orphan.pgid)

    trials = _study(studies).trials
    ended = trials[killed.number]
    assert ended.state.name == "FAIL"
    engine = EngineProcess.of(ended)
    assert engine.launched_at == orphan.launched_at and engine.ended_at is not None
    assert ended.user_attrs["node_minutes"] == engine.node_minutes() > 0  # its engine's time, start to kill
    # the tuner's record encloses the engine's own: launched before it started, ended once it had stopped
    start, stop = (float(line.split()[2]) for line in launches.read_text().splitlines()
                   if line.split()[1] == str(orphan.pgid))  # fmt: skip
    assert engine.launched_at <= start <= stop <= engine.ended_at
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE" and retried[0].params == ended.params
    report = show("scripted", studies)
    assert [t["node_minutes"] for t in report["trials"] if t["number"] == killed.number] == [engine.node_minutes()]
    assert report["node_minutes"] == pytest.approx(sum(t["node_minutes"] or 0 for t in report["trials"]), abs=0.01)


def test_only_trials_whose_tuner_is_gone_from_this_host_are_ended(tmp_path) -> None:
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_s=3600))
    here = TunerProcess.this_one()
    exited = subprocess.Popen(["sleep", "60"])
    gone = TunerProcess.model_validate(here.model_dump() | {"pid": exited.pid, "started": _started(exited.pid)})
    exited.kill()
    exited.wait()
    tuners = {
        "live": here,
        "elsewhere": here.model_copy(update={"host": "another-host", "pid": exited.pid}),
        "exited": gone,
        "pid reused": here.model_copy(update={"started": here.started - 1}),  # this pid, a later process
    }
    engines = {name: subprocess.Popen(["sleep", "60"], start_new_session=True) for name in tuners}
    try:
        trials = {name: _running(study, tuner, engines[name].pid) for name, tuner in tuners.items()}
        ended = end_dead_workers_trials(study)
        assert sorted(ended) == sorted(trials[name].number for name in ("exited", "pid reused"))
        for name, trial in trials.items():
            frozen = study._storage.get_trial(trial._trial_id)
            record = frozen.user_attrs["engine_process"]
            if name in ("live", "elsewhere"):
                assert frozen.state.name == "RUNNING" and recorded_group_alive(record), name
                continue
            assert frozen.state.name == "FAIL" and not group_alive(record["pgid"]), name
            assert frozen.user_attrs["node_minutes"] == EngineProcess.model_validate(record).node_minutes() > 0
        retries = [t for t in study.trials if t.state.name == "WAITING"]
        assert sorted(t.system_attrs["failed_trial"] for t in retries) == sorted(ended)
        # a retry is a new trial: not the dead tuner's, not its engine, none of its cost
        # and nothing the dead attempt recorded (its log, its load): only what marks the configuration
        assert all(t.user_attrs == {"baseline": True} for t in retries), [t.user_attrs for t in retries]
        assert end_dead_workers_trials(study) == []  # ended once
    finally:
        for engine in engines.values():
            kill_group(engine.pid, grace_s=5)
            engine.wait()


def test_a_stale_trial_of_another_host_counts_its_engine_until_its_last_heartbeat(tmp_path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_s=1)
    study = optuna.create_study(storage=storage)
    launched_at = time.time() - 3600
    tuner = TunerProcess(host="another-host", boot_id="another-boot", pid=4242, started=1)
    trial = study.ask()
    trial.set_user_attr("worker_process", tuner.model_dump())
    engine = EngineProcess(pgid=4242, host="another-host", boot_id="another-boot", started=1, launched_at=launched_at)
    trial.set_user_attr("engine_process", engine.model_dump())
    storage.record_heartbeat(trial._trial_id)
    session = storage.scoped_session()
    beat = rdb_models.TrialHeartbeatModel.where_trial_id(trial._trial_id, session, True)
    beat.heartbeat -= datetime.timedelta(minutes=30)  # its host went quiet half an hour ago, an hour after the launch
    session.commit()
    session.close()
    assert end_dead_workers_trials(study) == [trial.number]
    frozen = study._storage.get_trial(trial._trial_id)
    assert frozen.state.name == "FAIL"
    assert frozen.user_attrs["node_minutes"] == pytest.approx(30.0, abs=0.1)  # SQLite keeps heartbeats to the second


def test_a_worker_back_from_its_own_silence_gives_the_others_a_grace_period_first(tmp_path) -> None:
    """Seen in CI: a worker that waited out a PostgreSQL outage on the budget lock made no storage call meanwhile, so
    its storage never saw the outage; back, it took every other worker's 8-s-old heartbeat for a dead worker's."""
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", heartbeat_s=1)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.set_user_attr("worker_process", TunerProcess(host="h", boot_id="b", pid=4242, started=1).model_dump())
    storage.record_heartbeat(trial._trial_id)
    session = storage.scoped_session()
    beat = rdb_models.TrialHeartbeatModel.where_trial_id(trial._trial_id, session, True)
    beat.heartbeat -= datetime.timedelta(seconds=8)  # nobody could beat through the outage
    session.commit()
    session.close()
    outage = storage.outage
    outage.answered_last -= outage.silence_s + 1  # this process last heard the storage before the outage
    assert end_dead_workers_trials(study) == []  # the others get their grace period to beat again
    assert study._storage.get_trial(trial._trial_id).state.name == "RUNNING"
    outage.answered_again -= outage.silence_s  # the grace period passed, and this trial never beat again
    assert end_dead_workers_trials(study) == [trial.number]
    assert study._storage.get_trial(trial._trial_id).state.name == "FAIL"


def _running(study: optuna.Study, tuner: TunerProcess, engine_pgid: int) -> optuna.Trial:
    trial = study.ask()
    trial.set_user_attr("worker_process", tuner.model_dump())
    trial.set_user_attr("engine_process", EngineProcess.launched(engine_pgid, time.time() - 90).model_dump())
    # what a fixed configuration is marked with, and what the dead attempt had recorded of its own
    for name, value in {"baseline": True, "launched": True, "server_log": "/x/server.log", "load": {"rate": 1}}.items():
        trial.set_user_attr(name, value)
    return trial


def _started(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _wait_for_benchmark(studies: Path, tuner: subprocess.Popen) -> optuna.trial.FrozenTrial:
    """The trial whose engine serves and whose benchmark has begun (the engine answers none of it: it hangs)."""
    deadline = time.monotonic() + _GUARD_S
    while time.monotonic() < deadline:
        assert tuner.poll() is None, "the tuner ended before its benchmark"
        try:
            trials = _study(studies).trials
        except (KeyError, sqlalchemy.exc.SQLAlchemyError):  # not created yet, or the tuner is creating it now
            trials = []
        for trial in trials:
            if trial.state.name == "RUNNING" and "launch_s" in trial.user_attrs:
                return trial
        time.sleep(0.2)
    raise AssertionError("the tuner never started a benchmark")


def _study(studies: Path) -> optuna.Study:
    return optuna.load_study(study_name="scripted", storage=f"sqlite:///{studies}/scripted.db")
