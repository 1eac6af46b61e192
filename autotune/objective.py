"""One trial: suggest → static check → launch → warm-up → benchmark → values, constraints, attributes, artifacts.

The only place that maps outcomes to Optuna. A configuration that was rejected, crashed, ran out of memory or timed
out is a COMPLETE trial with a pessimistic value and a violated ``launch`` constraint, so the sampler learns that
region (Optuna's samplers ignore FAIL trials and would suggest it again); FAIL is kept for bugs in the tuner. SLOs are
graded constraints: (measured − limit) / limit. A slow configuration is pruned from the benchmark's checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.bench.runner import Progress
from autotune.config import ServerConfig
from autotune.engines import Engine, get_engine
from autotune.errors import FailureKind, UnsupportedConfig
from autotune.export import public_config, shell_script
from autotune.launch import LaunchFailed, launch_for
from autotune.redact import redact_spec
from autotune.server import group_record
from autotune.sim.engine import SimulatedEngine
from autotune.space import Point, SearchSpace

log = logging.getLogger(__name__)
LAUNCH_CONSTRAINT = "launch"
PESSIMISTIC = {"maximize": 0.0, "minimize": 1e12}
_CHECKPOINT_STEPS = 10
_DUPLICATE_POLL_S = 1.0


def config_key(point: Point) -> str:
    """A digest of what a trial runs (server knobs and client load), to find exact duplicates without storing secrets."""
    payload = json.dumps([point.server.model_dump(mode="json"), point.client], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _anchored(value: str) -> str:
    """A relative path that exists here, made absolute: the engine runs in the trial's directory, not ours."""
    path = Path(value)
    # absolute(), not resolve(): a virtual environment's python must keep its own path, not its symlink's target
    return str(path.absolute()) if not path.is_absolute() and path.exists() else value


def engine_for(space: SearchSpace, name: str, executables: dict[str, list[str]] | None = None) -> Engine:
    """The adapter that runs ``name``'s trials of ``space``: the engine itself, or the simulator standing in for it."""
    executable = (executables or {}).get(name) or space.engines[name].executable
    engine = get_engine(name, [_anchored(part) for part in executable] if executable else None)
    if space.simulate is not None:
        return SimulatedEngine(engine, space.simulate, space.hardware)
    return engine


def anchored_paths(config: ServerConfig) -> ServerConfig:
    """``config`` with its relative model and chat-template paths made absolute (the engine runs elsewhere)."""
    return config.model_copy(update={k: _anchored(v) for k in ("model", "chat_template") if (v := getattr(config, k))})


@dataclass(frozen=True)
class TrialEnvironment:
    """Where trials run and write: the study's directory, its artifact store, engine executables to override."""

    study_dir: Path
    artifacts: FileSystemArtifactStore
    executables: dict[str, list[str]]


class Objective:
    """Callable for one trial; returns the objective values (one per metric of the space)."""

    def __init__(self, space: SearchSpace, environment: TrialEnvironment) -> None:
        self.space, self.env = space, environment
        self.metrics = space.objective.metrics
        self.slo = space.objective.slo

    def __call__(self, trial: optuna.Trial) -> list[float]:
        point = self.space.suggest(trial)
        config = point.server
        key = config_key(point)
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("engine", config.engine)
        trial.set_user_attr("config", public_config(config))
        previous = self._same_config(trial, key)
        if previous is not None:
            return self._repeat(trial, previous)
        engine = self._engine(config.engine)
        try:
            engine.check(config, self.space.hardware)
        except UnsupportedConfig as exc:
            return self._infeasible(trial, FailureKind.REJECTED, str(exc))
        if isinstance(engine, SimulatedEngine):
            trial.set_user_attr("simulated", self.space.simulate.model_dump())
        return self._launch_and_measure(trial, Point(anchored_paths(config), point.client), engine)

    def _engine(self, name: str) -> Engine:
        return engine_for(self.space, name, self.env.executables)

    # -- outcomes -----------------------------------------------------------------------------------------------
    def _infeasible(self, trial: optuna.Trial, kind: FailureKind, reason: str) -> list[float]:
        trial.set_user_attr("failure_kind", kind.value)
        trial.set_user_attr("failure_reason", reason[:500])
        trial.set_constraint(LAUNCH_CONSTRAINT, 1.0)
        for metric in self.slo:
            trial.set_constraint(f"slo:{metric}", 1.0)
        return [PESSIMISTIC[m.direction] for m in self.metrics]

    def _feasible(self, trial: optuna.Trial, result: dict) -> list[float]:
        trial.set_constraint(LAUNCH_CONSTRAINT, 0.0)
        for metric, limit in self.slo.items():
            trial.set_constraint(f"slo:{metric}", (result[metric] - limit) / limit)
        for name in ("output_throughput", "total_token_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                     "p99_tpot_ms", "mean_tpot_ms", "completed", "failed"):  # fmt: skip
            if name in result:
                trial.set_user_attr(name, result[name])
        trial.set_user_attr("client_saturated", result["client"].get("saturated", False))
        return [float(result[m.name]) for m in self.metrics]

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
                if t.user_attrs.get("config_key") == key and t.number != trial.number
            ]
            finished = [t for t in same if t.state in done]
            if finished:
                return finished[0]
            if not any(t.state == optuna.trial.TrialState.RUNNING and t.number < trial.number for t in same):
                return None
            time.sleep(_DUPLICATE_POLL_S)
            optuna.storages.fail_stale_trials(trial.study)  # a dead worker's trial must not keep us waiting

    def _repeat(self, trial: optuna.Trial, previous: optuna.trial.FrozenTrial) -> list[float]:
        """An exact duplicate is never launched again: it gets the earlier trial's outcome."""
        trial.set_user_attr("duplicate_of", previous.number)
        for name in ("failure_kind", "failure_reason", "launch", "output_throughput", "total_token_throughput"):
            if name in previous.user_attrs:
                trial.set_user_attr(name, previous.user_attrs[name])
        if previous.state == optuna.trial.TrialState.PRUNED:
            raise optuna.TrialPruned(f"duplicate of pruned trial {previous.number}")
        for name, value in previous.constraints.items():
            trial.set_constraint(name, value)
        return list(previous.values)

    # -- a launch -----------------------------------------------------------------------------------------------
    def _launch_and_measure(self, trial: optuna.Trial, point: Point, engine: Engine) -> list[float]:
        config = point.server
        workdir = self.env.study_dir / "trials" / str(trial.number)
        launch = launch_for(engine, config, workdir, self.space.stall_timeout_s)
        command = engine.command_spec(config, port=launch.port)
        self._record_command(trial, redact_spec(command))
        if launch.spec != command:
            trial.set_user_attr("served_by", redact_spec(launch.spec))
        trial.set_user_attr("engine_version", str(engine.version(config)))
        started = time.monotonic()
        try:
            with launch:
                launched = launch.pgid is not None  # not for the in-process simulator
                if launched:  # first: what a worker that finds this trial stale must kill
                    trial.set_user_attr("engine_process", group_record(launch.pgid))
                ready_s = launch.wait_ready(self.space.startup_timeout_s)
                if launched:
                    trial.set_user_attr("launch_s", round(ready_s, 2))
                bench_started = time.monotonic()
                hook = self._pruning_hook(trial, engine) if len(self.metrics) == 1 else None
                # the same prompts for every trial (each starts a fresh server, so no cache carries over):
                # configurations are compared on equal work
                result = launch.measure(self.space.workload.model_copy(update=point.client), on_progress=hook)
                trial.set_user_attr("benchmark_s", round(time.monotonic() - bench_started, 2))
            self._save_result(trial, workdir, result)
            return self._feasible(trial, result)
        except LaunchFailed as exc:
            return self._infeasible(trial, exc.kind, exc.reason)
        finally:
            trial.set_user_attr("trial_s", round(time.monotonic() - started, 2))
            if launch.log_path.exists():
                upload_artifact(artifact_store=self.env.artifacts, file_path=str(launch.log_path),
                                study_or_trial=trial, mimetype="text/plain")  # fmt: skip

    def _pruning_hook(self, trial: optuna.Trial, engine: Engine):
        metric = self.metrics[0].name

        def report(progress: Progress) -> None:
            value = engine.model_time(progress.metrics).get(metric)
            if value is None:
                return
            trial.report(float(value), step=round(progress.finished / progress.total * _CHECKPOINT_STEPS))
            # the last checkpoint is the measurement itself: keep it, however it compares
            if progress.finished < progress.total and trial.should_prune():
                trial.set_user_attr("pruned_at", f"{progress.finished}/{progress.total} requests")
                raise optuna.TrialPruned(f"{metric} {value:.1f} at {progress.finished}/{progress.total} requests")

        return report

    def _record_command(self, trial: optuna.Trial, launch: dict) -> None:
        """The launch command (redacted) as an attribute and as a shell-script artifact (shown by optuna-dashboard)."""
        trial.set_user_attr("launch", launch)
        path = self.env.study_dir / "trials" / str(trial.number) / "command.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shell_script(launch) + "\n")
        upload_artifact(artifact_store=self.env.artifacts, file_path=str(path), study_or_trial=trial,
                        mimetype="text/x-shellscript")  # fmt: skip

    def _save_result(self, trial: optuna.Trial, workdir: Path, result: dict) -> None:
        path = workdir / "benchmark.json"
        path.write_text(json.dumps(result, indent=1))
        upload_artifact(artifact_store=self.env.artifacts, file_path=str(path), study_or_trial=trial,
                        mimetype="application/json")  # fmt: skip
