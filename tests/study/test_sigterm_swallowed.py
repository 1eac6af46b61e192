"""A SIGTERM whose exception is swallowed where it lands (Python ran the handler inside a weakref callback) while the
same signal kills the engine (``scancel`` signals the worker and its engine at once): the engine's death is no crash
of its configuration, nothing is learned, the trial is left RUNNING for the next run, and the worker starts no other
trial but stops with "stopped by SIGTERM"."""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
import threading
import time
import weakref

import optuna
import pytest
from optuna.trial import TrialState

from autotune.errors import AutotuneError
from autotune.search.status import Phase, StatusEvent
from autotune.search.study import RunOptions, prepare_study
from autotune.search.workers import run_node, run_trials
from autotune.serving.process import group_alive, kill_group
from autotune.space.files import load_space
from tests.study.conftest import ENGINE, write_space

_GUARD_S = 60  # a guard against a hang while the engine dies, not a timing assertion


def sigterm_swallowed_in_a_weakref_callback() -> None:
    """SIGTERM to this process, its handler run inside a weakref callback, which drops the handler's exception."""

    class Referent:
        pass

    def callback(_: object) -> None:
        signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns (the main thread handles signals)

    referent = Referent()
    ref = weakref.ref(referent, callback)
    del referent  # the callback runs here; an exception it raises is reported as unraisable, not raised
    assert ref() is None


def test_a_sigterm_swallowed_where_it_landed_is_no_crash_and_stops_the_worker(tmp_path, monkeypatch) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = write_space(tmp_path, params={"max_num_seqs": {"choices": [2, 8], "default": 2}})
    # the scripted engine by this interpreter (PATH's python, which the space names, may lack autotune)
    options = RunOptions("stop", f"sqlite:///{tmp_path}/s.db", tmp_path / "studies", n_trials=2, heartbeat_s=0,
                         executables={"vllm": shlex.split(ENGINE)})  # fmt: skip
    swallowed: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: swallowed.append(unraisable.exc_type))
    killed: list[int] = []
    prepared = None

    def on_status(event: StatusEvent) -> None:
        if event.phase != Phase.MEASURING or killed:
            return
        # the scheduler's SIGTERM reaches the tuner inside a weakref callback, and its engine too
        pgid = prepared.study.trials[event.trial].user_attrs["engine_process"]["pgid"]
        killed.append(pgid)
        sigterm_swallowed_in_a_weakref_callback()
        kill_group(pgid, grace_s=0)  # SIGTERM now; SIGKILL only if it outlived the wait below
        deadline = time.monotonic() + _GUARD_S
        while group_alive(pgid) and time.monotonic() < deadline:  # the benchmark starts on a dead engine
            time.sleep(0.05)

    prepared = prepare_study(load_space(path), path, options, on_status)
    previous_handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(AutotuneError, match="stopped by SIGTERM"):
            run_trials(prepared)
    finally:
        for pgid in killed:
            kill_group(pgid, grace_s=5)

    assert killed and len(swallowed) == 1 and "Terminated" in swallowed[0].__name__, swallowed  # it was swallowed
    assert signal.getsignal(signal.SIGTERM) == previous_handler
    trials = prepared.study.trials
    started = [t for t in trials if t.state != TrialState.WAITING]
    assert len(started) == 1, [(t.number, t.state.name, t.user_attrs.get("failure_kind")) for t in started]
    trial = started[0]
    assert trial.state == TrialState.RUNNING  # left to be retried by the next run
    assert trial.user_attrs["engine_process"]["pgid"] == killed[0]
    assert not {"failure_kind", "failure_reason", "outcome", "taught_rule", "oom_from_level"} & set(trial.user_attrs)
    assert not any(b.get("failure_kind") for b in trial.user_attrs.get("benchmarks", []))  # no load judged either
    assert not group_alive(killed[0])


def test_a_node_whose_sigterm_was_swallowed_stops_its_workers(tmp_path, monkeypatch) -> None:
    # only the node's process is signalled (a container's first process, `kill PID`): it must tell its workers
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # the engine serves no request: the worker stays in its benchmark until told to stop (or the stall guard)
    path = write_space(tmp_path, env={"SCRIPTED_HANG": "1"}, stall_timeout_s=_GUARD_S)
    options = RunOptions("node", f"sqlite:///{tmp_path}/s.db", tmp_path / "studies", n_trials=1, heartbeat_s=0,
                         executables={"vllm": shlex.split(ENGINE)})  # fmt: skip
    swallowed: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: swallowed.append(unraisable.exc_type))

    def on_progress(study: optuna.Study) -> None:
        measuring = [t for t in study.get_trials(deepcopy=False) if "launch_s" in t.user_attrs]
        if measuring and not swallowed:
            sigterm_swallowed_in_a_weakref_callback()

    with pytest.raises(AutotuneError, match="stopped by SIGTERM"):
        run_node(load_space(path), path, options, workers=1, on_progress=on_progress)
    assert len(swallowed) == 1 and "Terminated" in swallowed[0].__name__, swallowed
    (trial,) = optuna.load_study(study_name="node", storage=options.storage).trials
    assert trial.state == TrialState.RUNNING and "failure_kind" not in trial.user_attrs  # the worker stopped it
    assert not group_alive(trial.user_attrs["engine_process"]["pgid"])


def test_a_sigterm_that_lands_in_a_benchmarks_task_stops_the_benchmark(tmp_path, monkeypatch) -> None:
    # asyncio keeps an exception raised in a task to that task: a SIGTERM handled while the client's watchdog ran
    # killed the watchdog alone, and the benchmark of a stalled stream then waited with no stall timeout left
    from autotune.bench.client import ClientOptions
    from autotune.bench.http import StreamingClient
    from autotune.bench.runner import run_benchmark
    from autotune.search import stopping
    from autotune.space.schema import Workload
    from autotune.testing import scripted

    watch = StreamingClient._watch

    async def watch_where_the_signal_lands(self) -> None:
        await asyncio.sleep(0.2)  # the stalled request is in flight
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the watchdog task
        await watch(self)

    monkeypatch.setattr(StreamingClient, "_watch", watch_where_the_signal_lands)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "FAULT:stall x", "output_len": 8}\n')
    workload = Workload(dataset="jsonl", path=str(prompts), num_prompts=1)
    with scripted.serving(tmp_path / "scripted") as server:
        # the guard: the old code waited on the stalled stream until the server went away (then no Terminated)
        guard = threading.Timer(_GUARD_S, kill_group, (server.pgid,), {"grace_s": 0})
        guard.start()
        try:
            with pytest.raises(stopping.Terminated), stopping.stop_on_sigterm():
                run_benchmark(ClientOptions(server.base_url, "scripted", stall_timeout_s=3600), workload, None)
        finally:
            guard.cancel()
    assert stopping.requested()
