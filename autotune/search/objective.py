"""One trial: suggest → static and learned rules → launch → a load sweep on the warm server → values, constraints,
attributes, artifacts, node-minutes.

The only place that maps outcomes to Optuna. A configuration that was rejected, crashed, ran out of memory or timed
out is a COMPLETE trial with a pessimistic value and a violated ``launch`` constraint, so the sampler learns that
region (Optuna's samplers ignore FAIL trials and would suggest it again); FAIL is kept for bugs in the tuner. SLOs are
graded constraints: (measured − limit) / limit, capped at 1, so "barely over" ranks far ahead of "crashed" (whose
launch and SLO constraints are all 1). The value is the best feasible load's (``autotune.search.sweep``); a failure
naming a knob value, or an out-of-memory, teaches the study (``autotune.search.learning``). A slow configuration is
pruned from its first benchmark's checkpoints; several workloads are a sweep each on one launch, their mix the value,
never pruned (``autotune.search.mix_sweep``). Each trial's ``outcome`` says in one word what became of it.

A load whose requests fail is that load's failure (of the kind its server log names), never a slow measurement:
not judged by the pruner nor cut short as an SLO miss. A baseline is never pruned: it is the study's reference.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune import records
from autotune.config import ServerConfig
from autotune.engines import Engine
from autotune.errors import EngineNotInstalled, FailureKind, LaunchFailed, UnsupportedConfig
from autotune.evidence.export import public_config, shell_script
from autotune.records import Outcome, optuna_private
from autotune.search import learning, mix_sweep, pruning, refine, stopping
from autotune.search.backends import anchored_paths, serving_backend
from autotune.search.mix_sweep import MixSweep
from autotune.search.orphans import EngineProcess
from autotune.search.ranking import best_of, maximized
from autotune.search.status import Phase, StatusCallback, StatusEvent, no_status
from autotune.search.sweep import MAX_VIOLATION, LoadResult, LoadSweep, slo_constraint_keys
from autotune.serving.gpus import GpuPool
from autotune.serving.seam import Backend, Serving
from autotune.space.redact import redact_spec
from autotune.space.schema import Point, SearchSpace, Workload
from autotune.text import shorten

log = logging.getLogger(__name__)
LAUNCH_CONSTRAINT = "launch"
PESSIMISTIC = {"maximize": 0.0, "minimize": 1e12}
_DUPLICATE_POLL_S = 1.0
REASON_LIMIT = 500  # characters of a failure reason kept in the trial (the server log has the rest)


def config_key(point: Point) -> str:
    """A digest of what a trial launches (its loads are swept), to find exact duplicates without storing secrets."""
    payload = json.dumps(point.server.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialEnvironment:
    """Where trials run and write: the study's directory, its artifact store, engine executables to override, and
    the node's GPUs the worker's trials lease theirs from (None: the engines see the GPUs they inherit)."""

    study_dir: Path
    artifacts: FileSystemArtifactStore
    executables: dict[str, list[str]]
    gpus: GpuPool | None = None
    # fails a study's stale trials (and retries them): under the study's slot lock, where other workers run too
    fail_stale_trials: Callable[[optuna.Study], None] = optuna.storages.fail_stale_trials
    on_status: StatusCallback = no_status  # what the trial is doing now, for the command line's progress display


class Objective:
    """Callable for one trial; returns the objective values (one per metric of the space)."""

    def __init__(self, space: SearchSpace, environment: TrialEnvironment) -> None:
        self.space, self.env = space, environment
        self.metrics = space.objective.metrics
        # the SLO constraints every trial sets: each workload's (the objective's, or its own) and its classes' own
        self.slo_keys = slo_constraint_keys(space)

    def __call__(self, trial: optuna.Trial) -> list[float]:
        self.env.on_status(StatusEvent(Phase.STARTING, trial.number))
        point = self.space.suggest(trial)
        config = point.server
        key = config_key(point)
        records.write(trial, config_key=key, engine=config.engine, config=public_config(config), launched=False,
                      benchmarks=[], node_minutes=0.0)  # fmt: skip
        previous = self._same_config(trial, key)
        if previous is not None:
            return self._repeat(trial, previous)
        backend = self._backend(config.engine)
        engine = backend.engine
        try:
            engine.check(config, self.space.hardware)
        except UnsupportedConfig as exc:
            records.write(trial, rejected_by=exc.rule)
            return self._infeasible(trial, FailureKind.REJECTED, str(exc))
        cap = None
        if self.space.search.learn_failures:
            rejection, cap = self._ruled_out(trial, config)
            if rejection is not None:
                return self._infeasible(trial, FailureKind.REJECTED, rejection)
        if self.space.simulate is not None:
            records.write(trial, simulated=self.space.simulate.model_dump())
        pool, needed = self.env.gpus, engine.gpus_used(config)
        if pool is not None and needed > len(pool.gpus):
            records.write(trial, rejected_by="worker_gpus")
            return self._infeasible(trial, FailureKind.REJECTED, f"rejected by 'worker_gpus': needs {needed} GPUs, "
                                    f"the worker has {len(pool.gpus)} (--gpus {','.join(pool.gpus)})")  # fmt: skip
        # waiting for GPUs is not the trial's cost: its clock starts once it holds them
        if pool is not None:
            self.env.on_status(StatusEvent(Phase.WAITING_GPUS, trial.number))
        lease = pool.lease(needed, self._typical_trial_s(trial)) if pool is not None else contextlib.nullcontext()
        with lease as gpus:
            if gpus is not None:
                records.write(trial, gpus=list(gpus))
            return self._launch_and_sweep(trial, Point(anchored_paths(config), point.client), backend, cap, gpus)

    def _backend(self, name: str) -> Backend:
        return serving_backend(self.space, name, self.env.executables)

    def _ruled_out(self, trial: optuna.Trial, config: ServerConfig) -> tuple[str | None, int | None]:
        """(why an earlier failure already rules this configuration out, or None; the load index it runs out of
        memory from, by out-of-memory dominance, or None)."""
        rule = learning.broken_learned_rule(trial.study, trial.params, trial)
        if rule is not None:
            records.write(trial, rejected_by=rule["name"])
            return f"rejected by learned rule '{rule['name']}' (trial {rule['trial']}: {rule['reason']})", None
        cap, witness = learning.oom_cap(trial.study, config, trial.number)
        if cap == 0:
            records.write(trial, rejected_by=f"oom_dominance:{witness}")
            return (f"rejected by 'oom_dominance': needs at least the memory of trial {witness}, which ran out of "
                    "memory at the lightest load"), None  # fmt: skip
        return None, cap

    # -- outcomes -----------------------------------------------------------------------------------------------
    def _infeasible(self, trial: optuna.Trial, kind: FailureKind, reason: str) -> list[float]:
        records.write(
            trial, outcome=Outcome.failed(kind), failure_kind=kind, failure_reason=shorten(reason, REASON_LIMIT)
        )
        trial.set_constraint(LAUNCH_CONSTRAINT, 1.0)
        for key in self.slo_keys:
            trial.set_constraint(key, MAX_VIOLATION)
        return [PESSIMISTIC[m.direction] for m in self.metrics]

    def _not_installed(self, trial: optuna.Trial, engine: Engine, failure: LaunchFailed,
                       log_path: Path) -> EngineNotInstalled:  # fmt: skip
        """The error that stops the study when the engine is not installed; the trial keeps what it saw."""
        records.write(trial, failure_kind=failure.kind, failure_reason=shorten(failure.reason, REASON_LIMIT))
        return EngineNotInstalled(f"engine {engine.name} cannot start here ({shorten(failure.reason, 200)}); "
                                  f"{engine.not_installed_fix()}; log: {log_path}")  # fmt: skip

    def _measured(self, trial: optuna.Trial, sweep: LoadSweep) -> list[float]:
        """The trial's outcome: its best feasible load, else the load nearest to feasible (graded violations)."""
        best = sweep.best()
        level = best or sweep.closest()
        records.write(trial, outcome=Outcome.MEASURED if best else Outcome.MISSES_SLO)
        trial.set_constraint(LAUNCH_CONSTRAINT, 0.0)
        for name, violation in level.violations.items():
            trial.set_constraint(name, violation)
        records.write(trial, load=level.load, metrics=level.record().metrics or {},
                      client_saturated=level.result.get("client", {}).get("saturated", False))  # fmt: skip
        return level.values

    def _same_config(self, trial: optuna.Trial, key: str) -> optuna.trial.FrozenTrial | None:
        """A finished trial that ran this exact configuration, waiting for one that is running it now.

        Of two workers that picked the same configuration at once, the lower trial number launches it; the other
        waits and takes its outcome (the key is stored before looking, so at least one of them sees the other).
        """
        done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        while True:
            same = [
                t
                for t in trial.study.get_trials(deepcopy=False)
                if records.config_key(t) == key and t.number != trial.number
            ]
            finished = [t for t in same if t.state in done]
            if finished:
                return finished[0]
            if not any(t.state == optuna.trial.TrialState.RUNNING and t.number < trial.number for t in same):
                return None
            time.sleep(_DUPLICATE_POLL_S)
            self.env.fail_stale_trials(trial.study)  # a dead worker's trial must not keep us waiting

    def _repeat(self, trial: optuna.Trial, previous: optuna.trial.FrozenTrial) -> list[float]:
        """An exact duplicate is never launched again: it gets the earlier trial's outcome (it does not count against
        the budget; ``neighbour_after_duplicate`` may find an untried neighbour to launch instead: ``autotune.search.study``)."""
        records.write(trial, outcome=Outcome.DUPLICATE, duplicate_of=previous.number)
        records.write(trial, **records.duplicated(previous))
        if previous.state == optuna.trial.TrialState.PRUNED:
            raise optuna.TrialPruned(f"duplicate of pruned trial {previous.number}")
        for name, value in previous.constraints.items():
            trial.set_constraint(name, value)
        return list(previous.values)

    def neighbour_after_duplicate(self, study: optuna.Study) -> refine.Neighbour | None:
        """After a duplicate: an untried neighbour of the incumbent (``autotune.search.refine``), for the study to queue; None
        without one (or an incumbent). Neither tried nor queued already: called under the slot lock."""
        incumbent = self._incumbent(study)
        if incumbent is None or not self.space.search.refine:
            return None
        trials = study.get_trials(deepcopy=False)
        tried = {records.config_key(t) for t in trials}
        tried |= {config_key(self.space.point_from_params(queued)) for t in trials
                  if t.state == optuna.trial.TrialState.WAITING and (queued := optuna_private.queued_params(t))}  # fmt: skip
        neighbour = refine.untried_neighbour(study, self.space, incumbent, tried, config_key)
        return None if neighbour is None else refine.Neighbour(neighbour, incumbent.number)

    # -- a launch and its sweep ---------------------------------------------------------------------------------
    def _launch_and_sweep(self, trial: optuna.Trial, point: Point, backend: Backend, cap: int | None,
                          gpus: tuple[str, ...] | None) -> list[float]:  # fmt: skip
        config, engine = point.server, backend.engine
        workdir = self.env.study_dir / "trials" / str(trial.number)
        launch = backend.serve(config, workdir, stall_timeout_s=self.space.stall_timeout_s,
                               headers=self.space.mix_workloads()[0].headers, gpus=gpus)  # fmt: skip
        command = launch.command
        self._record_command(trial, redact_spec(command))
        if launch.spec != command:
            records.write(trial, served_by=redact_spec(launch.spec))
        records.write(trial, engine_version=str(engine.version(config)))
        levels = self.space.load_levels(config.engine)
        incumbent = self._incumbent(trial.study)
        start = (
            levels.index(records.chosen_load(incumbent))
            if incumbent and records.chosen_load(incumbent) in levels
            else None
        )
        sweep = LoadSweep(levels, self.space.objective, incumbent.values[0] if incumbent else None, cap, start,
                          self.space.workload)  # fmt: skip
        mixed = MixSweep(self.space, config.engine, trial.study, trial.number, cap) if self.space.is_mix else None
        # the trial's node-minutes: from here to the engine's stop (the engine record's clock: an orphan's, if killed)
        started, launched_at, served = time.monotonic(), time.time(), False
        records.write(trial, launched=True)
        self.env.on_status(StatusEvent(Phase.LAUNCHING, trial.number))
        try:
            with launch:
                if launch.pgid is not None:  # first: what a worker that finds this trial stale must kill
                    records.write(trial, engine_process=EngineProcess.launched(launch.pgid, launched_at).model_dump())
                self.env.on_status(StatusEvent(Phase.WAITING_READY, trial.number))
                ready_s = launch.wait_ready(self.space.startup_timeout_s)
                if launch.pgid is not None:
                    records.write(trial, launch_s=round(ready_s, 2))
                bench_started, served = time.monotonic(), True  # served unless every load fails (below)
                if mixed is None:
                    self._sweep(trial, launch, sweep)
                else:
                    mix_sweep.measure_workloads(mixed, lambda one, workload, earlier: self._sweep(
                        trial, launch, one, workload, earlier), launch.alive)  # fmt: skip
                records.write(trial, benchmark_s=round(time.monotonic() - bench_started, 2))
            self._save_results(trial, workdir, mixed.sweeps if mixed else {None: sweep})
            if mixed is not None:
                served = mixed.unserved() is None and bool(mixed.results)
                return mix_sweep.report(trial, mixed)
            if sweep.closest() is None:  # the engine started, but no load was served: it failed at the lightest
                served = False
                failed = sweep.measured[min(sweep.measured)]
                raise LaunchFailed(FailureKind(failed.failure), failed.reason, failed.reason)
            self._learn_oom(trial, sweep)
            return self._measured(trial, sweep)
        except LaunchFailed as exc:
            stopping.raise_if_requested()  # an engine killed by the SIGTERM that stops us did not fail
            if exc.kind == FailureKind.NOT_INSTALLED:  # no configuration can start: the study stops, nothing learned
                raise self._not_installed(trial, backend.launcher, exc, launch.log_path) from None
            self._learn(trial, engine, point.server, exc)
            return self._infeasible(trial, exc.kind, exc.reason)
        finally:
            wall_s = time.monotonic() - started
            records.write(trial, trial_s=round(wall_s, 2))
            if (gpu_facts := launch.gpu_facts()).get("before"):  # where nvidia-smi exists: the release check's data
                records.write(trial, gpu_memory_mib=gpu_facts)
            benchmarks = (mixed or sweep).benchmarks_run
            records.write(trial, node_minutes=round(self._node_minutes(served, benchmarks, wall_s), 3))
            if launch.log_path.exists():
                records.write(trial, server_log=str(launch.log_path))  # where a shortened reason is in full
                upload_artifact(artifact_store=self.env.artifacts, file_path=str(launch.log_path),
                                study_or_trial=trial, mimetype="text/plain")  # fmt: skip

    def _sweep(self, trial: optuna.Trial, launch: Serving, sweep: LoadSweep, workload: Workload | None = None,
               earlier: tuple = ()) -> None:  # fmt: skip
        """Measure the sweep's levels on the running engine, one after another, until the sweep is done: of the
        space's workload, or of ``workload`` of several (after the ``earlier`` workloads' records)."""
        base = workload or self.space.workload
        while (index := sweep.next_level()) is not None:
            load = sweep.levels[index]
            self.env.on_status(
                StatusEvent(
                    Phase.MEASURING,
                    trial.number,
                    index,
                    len(sweep.levels),
                    load,
                    workload.name if workload is not None else None,
                )
            )
            # the pruner compares trials' first benchmarks: with several workloads they may be of different ones
            first = index if not sweep.measured and workload is None else None
            hook = self._progress_hook(trial, first, self.space.workload_slo(base))
            # the same prompts for every trial and load (each trial starts a fresh server, so no cache carries
            # over between trials): configurations are compared on equal work
            workload_at_load = base.model_copy(update=load)
            sweep.benchmarks_run += 1
            try:
                # the sweep keeps vllm bench's fields as a dict, as the trial's records and benchmark.json store them
                sweep.add(index, LoadResult(load, launch.measure(workload_at_load, on_progress=hook).to_vllm_json()))
            except pruning.LoadLost as lost:
                sweep.add(index, LoadResult(load, lost.metrics, stopped_early=True))
            except LaunchFailed as exc:
                stopping.raise_if_requested()  # the engine died of the SIGTERM that stops us: no verdict on the load
                sweep.add(index, LoadResult(load, failure=exc.kind.value, reason=exc.reason))
                if not launch.alive():
                    break
            finally:
                tagged = [r.model_copy(update={"workload": workload.name}) if workload else r for r in sweep.records()]
                records.write(trial, benchmarks=[*earlier, *tagged])  # as it goes: a pruned trial keeps its levels

    def _incumbent(self, study: optuna.Study) -> optuna.trial.FrozenTrial | None:
        """The study's best feasible trial so far (single-objective studies only)."""
        best = best_of(study.get_trials(deepcopy=False), maximized(self.metrics[0].direction))
        return best if len(self.metrics) == 1 else None

    def _typical_trial_s(self, trial: optuna.Trial) -> float | None:
        """The median wall time of the study's completed launches so far (None before the first)."""
        completed = trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        lengths = [s for t in completed if (s := records.trial_seconds(t)) is not None]
        return statistics.median(lengths) if lengths else None

    def _node_minutes(self, served: bool, benchmarks: int, wall_s: float) -> float:
        """What the trial cost: its wall time on a real engine; the space's virtual costs on the simulator."""
        if self.space.simulate is None:
            return wall_s / 60
        cost = self.space.simulate.cost
        return cost.launch_min + cost.benchmark_min * benchmarks if served else cost.failed_launch_min

    # -- learning from failures ---------------------------------------------------------------------------------
    def _learn_oom(self, trial: optuna.Trial, sweep: LoadSweep) -> None:
        lowest = sweep.lowest_failure()
        if lowest is not None and sweep.measured[lowest].failure == FailureKind.OOM.value:
            records.write(trial, oom_from_level=lowest)

    def _learn(self, trial: optuna.Trial, engine: Engine, config: ServerConfig, failure: LaunchFailed) -> None:
        """A failed start teaches the study: out of memory (dominance), or a rule when its message names a value."""
        if not self.space.search.learn_failures:
            return
        if failure.kind == FailureKind.OOM:
            records.write(trial, oom_from_level=0)
            return
        if failure.kind not in learning.LEARNABLE:
            return
        params = self.space.engine_params(config.engine)
        knobs = {name: params[name].knob_values(name.split(".", 1)[-1], value) for name, value in trial.params.items()
                 if name in params and value is not None}  # fmt: skip
        served = {(name, value) for t in trial.study.get_trials(deepcopy=False) if records.chosen_load(t)
                  for name, value in t.params.items()}  # fmt: skip
        named = [n for n in learning.named_params(engine, config, knobs, failure.evidence)
                 if (n, trial.params[n]) not in served]  # fmt: skip
        if len(named) == 1:
            rule = learning.learn(trial.study, trial.number, named[0], trial.params[named[0]], failure.kind,
                                  failure.reason)  # fmt: skip
            records.write(trial, taught_rule=rule)
            log.info("trial %d taught the study rule %s", trial.number, rule)

    # -- progress, records --------------------------------------------------------------------------------------
    def _progress_hook(self, trial: optuna.Trial, level: int | None, slo: dict[str, float]):
        """What watches a load as it runs (``autotune.search.pruning``): Optuna's pruner on the trial's first benchmark (at
        ``level``; None for the later ones) when the study has one metric, and the workload's SLO on every load."""
        prune = self._pruning_hook(trial, level) if level is not None and len(self.metrics) == 1 else None
        return pruning.progress_hook(prune, slo)

    def _pruning_hook(self, trial: optuna.Trial, level: int):
        """Optuna's pruner on the first benchmark of ``trial``, run at load ``level`` (``autotune.search.pruning``)."""
        return pruning.pruning_hook(trial, level, self.metrics[0].name)

    def _record_command(self, trial: optuna.Trial, launch: dict) -> None:
        """The launch command (redacted) as an attribute and as a shell-script artifact (shown by optuna-dashboard)."""
        records.write(trial, launch=launch)
        path = self.env.study_dir / "trials" / str(trial.number) / "command.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shell_script(launch) + "\n")
        upload_artifact(artifact_store=self.env.artifacts, file_path=str(path), study_or_trial=trial,
                        mimetype="text/x-shellscript")  # fmt: skip

    def _save_results(self, trial: optuna.Trial, workdir: Path, sweeps: dict[str | None, LoadSweep]) -> None:
        """benchmark.json: every load measured, lightest first (of each workload, by name), each with its full
        result (vllm bench's fields)."""
        if not any(sweep.measured for sweep in sweeps.values()):
            return
        path = workdir / "benchmark.json"
        levels = [{"load": r.load, "result": r.result, "failure_kind": r.failure} | ({"workload": name} if name else {})
                  for name, sweep in sweeps.items() for _, r in sorted(sweep.measured.items())]  # fmt: skip
        path.write_text(json.dumps({"levels": levels}, indent=1, default=str))
        upload_artifact(artifact_store=self.env.artifacts, file_path=str(path), study_or_trial=trial,
                        mimetype="application/json")  # fmt: skip
