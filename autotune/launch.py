"""One launch of a configuration on its engine, measured: start, wait until it serves, run workloads, stop.

Shared by a study's trials and by ``study validate``, so both classify failures alike, check the engine outlived each
benchmark, and scrub secrets from the server log. Every way a launch can fail as a property of the configuration
(it crashed, ran out of memory, never became ready, died or failed requests during a benchmark) is a
``LaunchFailed`` carrying its FailureKind; anything else is a bug and propagates.

``launch_for`` picks the kind: ``Launch`` (an engine process, real or the simulator's server) or
``DirectSimulation`` (the simulator in-process, ``simulate.mode: direct``), which share one interface.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

from autotune.bench.client import ClientOptions, bearer
from autotune.bench.datasets import build_requests
from autotune.bench.runner import ProgressHook, run_benchmark
from autotune.config import ServerConfig
from autotune.engines.base import Engine, LaunchSpec
from autotune.errors import AutotuneError, FailureKind
from autotune.redact import scrub_file, secret_values
from autotune.server import ServerCrashed, ServerProcess, ServerStartTimeout, free_port
from autotune.sim.analytic import StartupFailure
from autotune.sim.engine import SimulatedEngine
from autotune.sim.models import PerformanceModel
from autotune.sim.words import word_tokenizer
from autotune.space import Workload


class LaunchFailed(AutotuneError):
    """The configuration did not serve a benchmark: ``kind`` says how, ``reason`` in the engine's words, ``evidence``
    the end of its log (what learned rules read)."""

    def __init__(self, kind: FailureKind, reason: str, evidence: str = "") -> None:
        self.kind, self.reason, self.evidence = kind, reason, evidence or reason
        super().__init__(f"{kind.value}: {reason}")


class Launch:
    """A context manager: the engine serving ``config`` on a free port, in ``workdir``; stopped (whole process group)
    and its log scrubbed of secrets on exit.

    Args:
        engine: the adapter (real or simulated) that renders and classifies.
        config: what to launch (paths already absolute: the engine runs in ``workdir``).
        workdir: the launch's directory: files, ``server.log``.
        stall_timeout_s: a request that receives nothing for this long fails as a timeout.
        headers: sent with every request and readiness probe, besides the launch's own API key (as a bearer token).
        gpus: the GPUs the engine may use (``CUDA_VISIBLE_DEVICES``), whose memory is watched; None: as inherited.
    """

    def __init__(self, engine: Engine, config: ServerConfig, workdir: Path, stall_timeout_s: float = 60.0,
                 headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> None:  # fmt: skip
        self.engine, self.config, self.stall_timeout_s = engine, config, stall_timeout_s
        self.port = free_port()
        self.spec = with_inherited_key(engine, engine.launch_spec(config, port=self.port))
        self.headers = {**(headers or {}), **bearer(engine.api_key(self.spec, os.environ))}
        self.server = ServerProcess(self.spec, workdir, self.port, engine.readiness(config), engine.failed_while_alive,
                                    self.headers, gpus)  # fmt: skip

    @property
    def pgid(self) -> int | None:
        return self.server.pgid

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    def __enter__(self) -> Launch:
        try:
            self.server.__enter__()
        except ServerCrashed as exc:  # the program could not be executed at all
            raise self._crashed(exc) from None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.server.stop()
        finally:
            scrub_file(self.server.log_path, secret_values(self.spec))

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until the engine served the expected model.

        Raises:
            LaunchFailed: it exited first (kind from its exit code and log), or was not ready in time (timeout).
        """
        try:
            return self.server.wait_ready(timeout_s)
        except ServerCrashed as exc:
            raise self._crashed(exc) from None
        except ServerStartTimeout as exc:
            # killed for taking too long; a log that names a cause (CUDA out of memory at its first request) wins
            tail = self.server.log_tail()
            raise LaunchFailed(self._cause_in_log(tail, FailureKind.TIMEOUT), str(exc), tail) from None

    def _crashed(self, exc: ServerCrashed) -> LaunchFailed:
        return LaunchFailed(self.engine.classify_failure(exc.returncode, exc.log_tail), str(exc), exc.log_tail)

    def alive(self) -> bool:
        """Whether the engine still runs (another load can be measured on it)."""
        return self.server.alive()

    def measure(self, workload: Workload, on_progress: ProgressHook | None = None) -> dict:
        """Benchmark ``workload`` on the running engine; the result in the engine's time (the simulator's is scaled).

        Raises:
            LaunchFailed: the engine died during the benchmark, or a request failed: a load whose requests fail is that
                load's failure (configurations are compared on equal work, and one that drops requests does not
                serve the load), its kind the one the log names (out of memory at that load, say), else hang when
                every failed request timed out, else crash.
            UsageError: the workload's file gives no prompts (it changed since the checks before the launch): the
                client's input, never the configuration's failure.
        """
        options = ClientOptions(self.server.base_url, self.config.api_model_name, workload.endpoint,
                                workload.ignore_eos, stall_timeout_s=self.stall_timeout_s,
                                extra_body=workload.extra_body, headers=self.headers | workload.headers,
                                extensions=self.engine.request_extensions,
                                chat_length_field=self.engine.chat_length_field)  # fmt: skip
        raw = run_benchmark(options, workload, self.engine.tokenizer(self.config), on_progress=on_progress,
                            include_requests=False)  # fmt: skip
        result = self.engine.model_time(raw)
        if not self.server.alive():
            returncode, tail = self.server.process.returncode, self.server.log_tail()
            kind = self.engine.classify_failure(returncode, tail)
            raise LaunchFailed(kind, f"engine died during the benchmark (exit {returncode})", tail)
        if result["failed"]:
            # e.g. a KV pool allocated at the first requests that does not fit, or activations of a batch this large:
            # the log says CUDA out of memory
            errors, tail = result["errors_by_type"], self.server.log_tail()
            otherwise = FailureKind.HANG if set(errors) == {"timeout"} else FailureKind.CRASH
            total = result["completed"] + result["failed"]
            share = "every request" if result["completed"] == 0 else f"{result['failed']} of {total} requests"
            raise LaunchFailed(self._cause_in_log(tail, otherwise), f"ready, but {share} failed: {errors}", tail)
        return result

    def _cause_in_log(self, tail: str, otherwise: FailureKind) -> FailureKind:
        """The failure kind the log names (out of memory, ...) for a server that is still up, else ``otherwise``."""
        kind = self.engine.classify_failure(None, tail)
        return otherwise if kind == FailureKind.CRASH else kind

    def gpu_facts(self) -> dict:
        """GPU memory (MiB by GPU) before the launch, once ready and after the stop; whether it was released."""
        return {**self.server.gpu_memory, "released": self.server.gpus_released}


def with_inherited_key(engine: Engine, spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with the engine's API-key variable added to its env when the engine would inherit it from ours: the
    launch then says it needs the key (its stored form names the variable) and its log is scrubbed of it."""
    name = engine.api_key_env
    if not name or name in spec.env or not os.environ.get(name):
        return spec
    return dataclasses.replace(spec, env={**spec.env, name: os.environ[name]})


class DirectSimulation:
    """The simulator computing results in-process, behind ``Launch``'s interface: no process, no port, no log.

    Its ``spec`` is the real engine's command (on the port a user would pick), since nothing else serves it.
    """

    pgid = None
    port = 8000

    def __init__(self, engine: SimulatedEngine, config: ServerConfig, workdir: Path) -> None:
        self.engine, self.config = engine, config
        self.spec = engine.command_spec(config, port=self.port)
        self.log_path = workdir / "server.log"
        self.model: PerformanceModel | None = None

    def __enter__(self) -> DirectSimulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.model = None

    def wait_ready(self, timeout_s: float) -> float:
        """Build the configuration's model (instant).

        Raises:
            LaunchFailed: the configuration would not start (out of memory, no data in the table...).
        """
        try:
            self.model = self.engine.performance_model(self.config)
        except StartupFailure as exc:
            raise LaunchFailed(exc.kind, str(exc)) from None
        return 0.0

    def gpu_facts(self) -> dict:
        """No process, no GPU memory."""
        return {}

    def alive(self) -> bool:
        """A model has no process to lose: a load that fails leaves the others measurable."""
        return self.model is not None

    def measure(self, workload: Workload, on_progress: ProgressHook | None = None) -> dict:
        """The model's result for ``workload`` (no checkpoints: it is computed at once).

        Raises:
            LaunchFailed: the model has no result for it (a table's failure row, for instance).
        """
        requests = simulated_requests(workload.model_copy(update={"max_concurrency": None, "request_rate": math.inf}))
        try:
            return self.model.evaluate(workload, requests, self.config.api_model_name)
        except StartupFailure as exc:
            raise LaunchFailed(exc.kind, str(exc)) from None


def simulated_requests(workload: Workload) -> list:
    """A workload's requests in the simulator's words, built once for every load and trial (loads don't change them)."""
    return _simulated_requests(json.dumps(workload.model_dump(mode="json"), sort_keys=True))


@functools.lru_cache(maxsize=4)
def _simulated_requests(workload_json: str) -> list:
    # keyed by the JSON form: a workload holds mappings (headers, extra_body), which do not hash
    return build_requests(Workload.model_validate(json.loads(workload_json)), word_tokenizer())


def launch_for(engine: Engine, config: ServerConfig, workdir: Path, stall_timeout_s: float = 60.0,
               headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None
               ) -> Launch | DirectSimulation:  # fmt: skip
    """How ``config`` runs on ``engine``: an engine process, or the simulator in-process (direct mode)."""
    if isinstance(engine, SimulatedEngine) and engine.direct:
        return DirectSimulation(engine, config, workdir)
    return Launch(engine, config, workdir, stall_timeout_s, headers, gpus)
