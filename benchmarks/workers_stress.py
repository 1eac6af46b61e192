"""Many `autotune study run` workers on one PostgreSQL study: kills, retries, duplicates, coordination overhead.

    .venv/bin/python benchmarks/workers_stress.py [--workers 16] [--trials 1000] [--kills 5] [--seed 0]
        [--scaling 1,4,16,32] [--scaling-trials 200] [--storage URL] [--quick] [--json OUT]

Needs a PostgreSQL server (default: the one the tests use, ``postgresql+psycopg://postgres@127.0.0.1:5432/test``).
Every study it makes is named ``ws-<uuid>-...`` and deleted at the end.

The space: the quickstart (three engines, about 2.7 million launch configurations, many of them refused by static
rules) with the simulator in direct mode (``simulate: {mode: direct, performance_model: analytic}``, 200 prompts):
each trial is computed in-process in about 0.1 s, no server process, so what is measured is the coordination.
Configurations do repeat (TPE converges, the refine step fills slots with neighbours): a trial whose configuration
was measured before is recorded as ``duplicate_of`` and not measured again, and its count is printed.

Stress run: ``--workers`` processes start at once on one study with a budget of ``--trials``; ``--kills`` times, at a
random moment (a random number of finished trials, then up to 0.5 s), the process group of one worker, at random
among those running a trial, is killed with SIGKILL and a new process with the same command started (a worker
picked among all would mostly be one waiting for the budget lock, with no trial to lose). Checked afterwards, from the storage:

- budget: autotune's budget is a number of launches (duplicates and rejections launch nothing and do not count); a
  dead worker's trial is failed as stale by another worker and queued again (RetryHeartbeatStaleTrialCallback), so
  "exactly the budget" means launches (``autotune.search.budget.count``) == budget, every FAIL trial is such a stale trial,
  and none is left RUNNING (a refinement queued once the budget was full may be left WAITING);
- every stale trial has a later retry (its ``retry_history``) that finished with its parameters;
- lost: COMPLETE trials without values; duplicates measured: finished trials that are not ``duplicate_of`` another
  but share its ``config_key`` with an earlier one; overlaps: two trials of one ``config_key`` measuring at the same
  time (a finished trial measures during its last ``trial_s``, a killed one from its start until its worker died).

Coordination overhead per trial: each worker is autotune's CLI (``autotune.cli.main``, what ``python -m autotune``
runs) with timers wrapped around ``autotune.search.locks.budget_lock``, the ask (``autotune.search.trial_queue.start_trial``: the
budget counted, then the oldest queued trial or a new one started), ``Study.tell``, the objective and every
RDBStorage method, one JSON line per trial. Overhead = the worker's wall time per trial (end of one trial to the end
of the next) minus the objective: the lock wait, the lock held (the stale-trial check, the ask, the first
heartbeat), the tell, the stale-trial check and the progress line. The sampler is not in the ask: Optuna 5
samples at the first suggest, in the objective. Storage = the main thread's time in RDBStorage calls, the objective's
included (it reads the study's trials to find duplicates, the incumbent and learned rules). The scaling runs (fresh
studies of ``--scaling-trials``, no kills) give throughput (finished trials / seconds from the first trial's start to
the last one's end) and the overhead at each worker count; the first (1 worker) is the anchor. On a machine with
fewer cores than workers, CPU sharing is part of what is measured (the core count is printed).

Storage calls per trial: each RDBStorage method the main thread calls (not again for the methods it calls itself),
and each of autotune's batched writes (``autotune.records.batch.one_call``: several attributes in one transaction) as
one; SQL: the statements the main thread sends (SQLAlchemy's ``before_cursor_execute``), the budget lock's included.
A trial made 70 calls before the batched writes (2026-12-01/03) and about 52 after (results/workers_stress-2026-12-03.txt).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import inspect
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import optuna
import sqlalchemy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _workers_report import (  # noqa: E402
    HEADER,
    PARTS,
    Run,
    calls_line,
    check,
    cores,
    per_trial,
    row_line,
    scaling_line,
    stress_lines,
    throughput,
)

from autotune.testing.spaces import direct_quickstart  # noqa: E402

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TIMINGS_ENV = "WORKERS_STRESS_TIMINGS"
POLL_S, STALL_S = 0.5, 120.0


# -- the worker: autotune's CLI with timers --------------------------------------------------------------------------
class _Timer:
    """Sums the time spent in wrapped calls during one trial; writes one line per trial."""

    def __init__(self, sink) -> None:
        self.sink, self.parts, self.since = sink, dict.fromkeys((*PARTS[3:-1], "objective", "calls", "sql"), 0), None
        self.cpu_since, self.depth, self.methods = time.process_time(), 0, {}

    def storage(self, function):
        """A storage method: its time counts once (not again for the methods it calls), on the main thread only
        (the heartbeat thread's writes run beside the trial)."""

        def timed(*args, **kwargs):
            if self.depth or threading.current_thread() is not threading.main_thread():
                return function(*args, **kwargs)
            self.depth += 1
            self.parts["calls"] += 1
            self.methods[function.__name__] = self.methods.get(function.__name__, 0) + 1
            try:
                return self.wrap("storage", function)(*args, **kwargs)
            finally:
                self.depth -= 1

        return timed

    def statement(self, *_args) -> None:
        """A SQL statement sent (SQLAlchemy's ``before_cursor_execute``) by the main thread: the lock's included."""
        if threading.current_thread() is threading.main_thread():
            self.parts["sql"] += 1

    def wrap(self, part: str, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.parts[part] += time.perf_counter() - started

        return timed

    def lock(self, original):
        @contextlib.contextmanager
        def timed(*args, **kwargs):
            started = time.perf_counter()
            self.since = self.since or started
            with original(*args, **kwargs):
                acquired = time.perf_counter()
                self.parts["lock_wait"] += acquired - started
                try:
                    yield
                finally:
                    self.parts["lock_held"] += time.perf_counter() - acquired

        return timed

    def trial(self, run_trial):
        def timed(study, storage, trial, *args, **kwargs):
            try:
                return run_trial(study, storage, trial, *args, **kwargs)
            finally:
                now, cpu = time.perf_counter(), time.process_time()
                record = {
                    "trial": trial.number,
                    "cycle": now - self.since,
                    "cpu": cpu - self.cpu_since,
                    **self.parts,
                    "methods": self.methods,
                }
                self.sink.write(json.dumps(record) + "\n")
                self.sink.flush()
                self.parts, self.since, self.cpu_since = dict.fromkeys(self.parts, 0.0), now, cpu
                self.methods = {}

        return timed


def run_worker(argv: list[str]) -> None:
    import autotune.search.study as study_module
    import autotune.search.trial_queue as trial_queue
    import autotune.search.workers as workers_module
    from autotune.cli import main as cli_main
    from autotune.search.objective import Objective

    timer = _Timer((Path(os.environ[TIMINGS_ENV]) / f"{os.getpid()}.jsonl").open("a"))
    # the budget lock is taken in both: the study's set-up and stale-trial ends, the workers' asks and refinements
    timed_lock = timer.lock(workers_module.budget_lock)
    study_module.budget_lock = workers_module.budget_lock = timed_lock
    workers_module._run_trial = timer.trial(workers_module._run_trial)
    trial_queue.start_trial = timer.wrap("ask", trial_queue.start_trial)  # autotune's ask, within the budget
    optuna.study.Study.tell = timer.wrap("tell", optuna.study.Study.tell)
    Objective.__call__ = timer.wrap("objective", Objective.__call__)
    rdb = optuna.storages.RDBStorage
    for name, method in list(vars(rdb).items()):
        if inspect.isfunction(method) and not name.startswith("__"):  # not the static methods
            setattr(rdb, name, timer.storage(method))
    with contextlib.suppress(ImportError):  # autotune's batched writes (one transaction each) count as one call
        from autotune.records import batch

        batch.one_call = timer.storage(batch.one_call)
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", timer.statement)
    sys.argv = ["autotune", *argv]
    cli_main()


# -- the driver ------------------------------------------------------------------------------------------------------
class Fleet:
    """The worker processes of one study, each in its own session (killed by process group, nothing else)."""

    def __init__(self, argv: list[str], env: dict, logs: Path) -> None:
        self.argv, self.env, self.logs = argv, env, logs
        self.procs: list[subprocess.Popen] = []

    def start(self, index: int) -> subprocess.Popen:
        with (self.logs / f"worker-{index}-{len(self.procs)}.log").open("w") as log:
            proc = subprocess.Popen([*self.argv, str(index)], cwd=REPO, env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        proc.index = index  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def kill(self, proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def kill_all(self) -> None:
        for proc in self.alive():
            self.kill(proc)


def run_study(args, name: str, workers: int, budget: int, kills: int, rng: random.Random, tmp: Path) -> Run:
    run = Run(name, workers, budget)
    timings, logs = tmp / name / "timings", tmp / name / "logs"
    timings.mkdir(parents=True)
    logs.mkdir()
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp / name / "studies"), "AUTOTUNE_HEARTBEAT_S": "1",
                        TIMINGS_ENV: str(timings)}  # fmt: skip
    env.pop("AUTOTUNE_STORAGE", None)
    # the last argument is the worker's index, its sampler seed: workers with one seed would suggest alike
    argv = [sys.executable, __file__, "_worker", "study", "run", str(args.space), "--study", name, "--storage",
            args.storage, "--n-trials", str(budget), "--seed"]  # fmt: skip
    fleet = Fleet(argv, env, logs)
    targets = sorted(rng.sample(range(budget // 10, budget * 85 // 100), kills)) if kills else []
    started = datetime.datetime.now()
    try:
        for index in range(workers):
            fleet.start(args.seed * 1000 + index)
        _watch(fleet, run, targets, rng, args.storage)
    finally:
        fleet.kill_all()
    run.exits = [p.returncode for p in fleet.procs]
    study = optuna.load_study(study_name=name, storage=args.storage)
    trials = study.get_trials(deepcopy=False)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    run.setup_s = (min(starts) - started).total_seconds() if starts else 0.0
    run.check = check(study, trials, run.kills)
    for path in timings.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a killed worker's last line may be cut
                run.timings.append(json.loads(line))
    return run


def _watch(fleet: Fleet, run: Run, targets: list[int], rng: random.Random, storage: str) -> None:
    """Wait for the workers to finish, killing and restarting one at each target; give up on a stall."""
    engine = sqlalchemy.create_engine(storage)
    last, progress_at = -1, time.monotonic()
    try:
        while fleet.alive():
            time.sleep(POLL_S)
            finished = _finished(engine, run.name)
            if finished != last:
                last, progress_at = finished, time.monotonic()
            if time.monotonic() - progress_at > STALL_S:
                run.stalled = True
                return
            if targets and finished >= targets[0]:
                time.sleep(rng.uniform(0, 0.5))
                busy = _busy_pids(engine, run.name)
                candidates = [p for p in fleet.alive() if p.pid in busy]
                if not candidates:  # every worker between trials (or waiting for the lock): try again shortly
                    continue
                targets.pop(0)
                victim = rng.choice(candidates)
                fleet.kill(victim)
                run.kills.append({"worker": f"{socket.gethostname()}:{victim.pid}", "at": datetime.datetime.now()})
                fleet.start(victim.index)  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def _busy_pids(engine: sqlalchemy.Engine, name: str) -> set[int]:
    """The process ids of the workers that are running a trial (its ``worker`` attribute: host:pid)."""
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text(
            "SELECT a.value_json FROM trial_user_attributes a JOIN trials t USING (trial_id) JOIN studies s USING "
            "(study_id) WHERE s.study_name = :n AND t.state = 'RUNNING' AND a.key = 'worker'"), {"n": name})  # fmt: skip
        return {int(json.loads(value).rsplit(":", 1)[1]) for (value,) in rows}


def _finished(engine: sqlalchemy.Engine, name: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sqlalchemy.text(
            "SELECT count(*) FROM trials JOIN studies USING (study_id) WHERE study_name = :n AND "
            "trials.state IN ('COMPLETE', 'PRUNED')"), {"n": name}).scalar()  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scaling", default="1,4,16,32", help="worker counts of the scaling runs (1 first: the anchor)"
    )
    parser.add_argument("--scaling-trials", type=int, default=200)
    parser.add_argument("--storage", default=os.environ.get("AUTOTUNE_STORAGE", POSTGRES))
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 workers, 100 trials, 1 kill; 1,2,4 × 40")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.trials, args.kills, args.scaling, args.scaling_trials = 4, 100, 1, "1,2,4", 40
    rng, tag = random.Random(args.seed), uuid.uuid4().hex[:8]
    optuna.storages.RDBStorage(args.storage)  # the schema, in a database no study was made in yet (the watch reads it)
    names, rows, rates = [], [], {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        args.space = direct_quickstart(tmp, num_prompts=200)
        print(f"seed {args.seed}; space: quickstart in direct mode; PostgreSQL; heartbeat 1 s; {cores()}\n{HEADER}",
              flush=True)  # fmt: skip
        try:
            plan = [(f"scaling ({args.scaling_trials} trials)", int(w), args.scaling_trials, 0)
                    for w in args.scaling.split(",") if w]  # fmt: skip
            for label, workers, budget, kills in [*plan, (f"stress ({args.trials} trials)", args.workers,
                                                         args.trials, args.kills)]:  # fmt: skip
                names.append(f"ws-{tag}-{len(names)}")
                run = run_study(args, names[-1], workers, budget, kills, rng, tmp)
                rate = throughput(run, args.storage)
                anchor = rows[0][1:] if rows else (rate, per_trial(run.timings))
                rows.append((run, rate, per_trial(run.timings)))
                rates.update({workers: rate} if kills == 0 else {})
                print(row_line(label, run, rate, anchor), flush=True)
        finally:
            for name in names:
                with contextlib.suppress(KeyError):
                    optuna.delete_study(study_name=name, storage=args.storage)
    print(
        "(ms per trial per worker, means; trials/s of the study as a whole; vs 1: against the first row; held: the\n"
        " budget lock held (the ask runs in it); busy: share of the run's time some worker held it, 1.00 = saturated;\n"
        " storage: time in RDBStorage calls, objective's included; calls: storage calls per trial (RDBStorage\n"
        " methods and autotune's batched writes, autotune.records.batch.one_call, each one call); SQL: statements\n"
        " sent per trial, the budget lock's included; CPU: worker's)"
    )
    stress, stress_rate, stress_ms = rows[-1]
    print("\n".join(["", *stress_lines(stress, stress_rate, STALL_S), ""]))
    if len(rates) > 1:
        print(scaling_line(rates))
    print(calls_line(rows))
    print(
        f"overhead per trial: {stress_ms['overhead']:.0f} ms at {stress.workers} workers (stress run) vs "
        f"{rows[0][2]['overhead']:.0f} ms at {rows[0][0].workers} (first row): "
        f"{stress_ms['overhead'] / rows[0][2]['overhead']:.1f}x"
    )
    if args.json:
        figures = [{"workers": r.workers, "budget": r.budget, "trials_per_s": rate, "per_trial": ms}
                   for r, rate, ms in rows]  # fmt: skip
        args.json.write_text(json.dumps({"stress": stress.check, "runs": figures}, indent=1, default=str))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        run_worker(sys.argv[2:])
    else:
        main()
