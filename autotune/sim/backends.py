"""The simulator's two backends (``autotune.serving.seam.Backend``): its server as a process, or its model in process.

- ``SimulatorServerBackend`` (``simulate.mode: server``): the simulated engine's server, launched and measured like
  any engine (``Launch``), in real time × ``time_scale``; its results and checkpoints come back in the model's time.
- ``InProcessBackend`` (``simulate.mode: direct``, and the prior): the performance model computes the benchmark
  result in virtual time; no process, no port, no log. A study of thousands of trials runs this way.

Both keep the real engine's rules, version and command (what a user runs), and label every result simulated. The time
scale, like the choice between the two, lives here: the trial reads results in the engine's own time.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path

from autotune.bench.datasets import build_requests
from autotune.bench.results import BenchmarkResult
from autotune.bench.runner import ProgressHook
from autotune.config import Hardware, ServerConfig
from autotune.engines.base import Engine, LaunchSpec
from autotune.errors import LaunchFailed, StartupFailure
from autotune.serving.seam import Backend, Launch
from autotune.sim.engine import SimulatedEngine
from autotune.sim.models import PerformanceModel, build_model
from autotune.sim.specs import model_shape
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Simulation, Workload

# result fields in seconds' denominators (rates) and in milliseconds (latencies): rescaled from wall to model time
_RATE_FIELDS = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                "max_output_tokens_per_s")  # fmt: skip
DIRECT_PORT = 8000  # the port of the command a simulated-in-process configuration is recorded with (a user's pick)


def to_model_time(result: dict, time_scale: float) -> dict:
    """A result measured against a server running ``time_scale`` × real time, in the model's own time."""
    scaled = dict(result)
    for key, value in result.items():
        if key == "classes" and isinstance(value, list):  # a mix's classes: each one a result
            scaled[key] = [to_model_time(entry, time_scale) for entry in value]
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key.endswith("_ms"):
            scaled[key] = value / time_scale
        elif key in _RATE_FIELDS:
            scaled[key] = value * time_scale
        elif key == "duration":
            scaled[key] = value / time_scale
    return scaled


def simulated_backend(engine: Engine, simulation: Simulation, hardware: Hardware) -> Backend:
    """The backend that simulates ``engine`` on ``hardware`` as ``simulation`` says (its server, or in process)."""
    backend = InProcessBackend if simulation.mode == "direct" else SimulatorServerBackend
    return backend(engine, simulation, hardware)


def knows_model(model: str) -> bool:
    """Whether the analytic model knows ``model``'s shape (a prior from it can rank the model's configurations)."""
    return model_shape(model) is not None


class SimulatorServerBackend:
    """The simulator's server, one process per configuration, standing in for ``engine``."""

    def __init__(self, engine: Engine, simulation: Simulation, hardware: Hardware) -> None:
        self.engine = engine
        self.launcher = SimulatedEngine(engine, simulation, hardware)

    def serve(self, config: ServerConfig, workdir: Path, *, stall_timeout_s: float = 60.0,
              headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> SimulatorLaunch:  # fmt: skip
        """``config`` served by the simulator's server (once entered)."""
        return SimulatorLaunch(self.launcher, config, workdir, stall_timeout_s, headers, gpus)


class SimulatorLaunch(Launch):
    """A launch of the simulator's server: measured in wall time, reported in the model's time."""

    def __init__(self, engine: SimulatedEngine, config: ServerConfig, workdir: Path, stall_timeout_s: float = 60.0,
                 headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> None:  # fmt: skip
        super().__init__(engine, config, workdir, stall_timeout_s, headers, gpus)
        self.time_scale = engine.simulation.time_scale
        self.command = engine.command_spec(config, port=self.port)

    def engine_time(self, metrics: dict) -> dict:
        """``metrics`` in the model's time, labelled simulated (counts are not rescaled)."""
        return to_model_time(metrics, self.time_scale) | {
            "client": metrics.get("client", {}) | {"simulated": True, "mode": "server"}
        }


class InProcessBackend:
    """The simulator's performance model, computing each result in process (``simulate.mode: direct``)."""

    def __init__(self, engine: Engine, simulation: Simulation, hardware: Hardware) -> None:
        self.engine, self.simulation, self.hardware = engine, simulation, hardware
        # nothing is launched; what a study checks before its first trial is the simulator's own program, as for
        # the server mode (it is there wherever autotune is)
        self.launcher = SimulatedEngine(engine, simulation, hardware)

    def serve(self, config: ServerConfig, workdir: Path, *, stall_timeout_s: float = 60.0,
              headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> InProcessSimulation:  # fmt: skip
        """``config``'s performance model (built once entered and asked ``wait_ready``)."""
        return InProcessSimulation(self, config, workdir)


class InProcessSimulation:
    """The simulator computing results in process, behind ``Serving``: no process, no port, no log.

    Its ``spec`` is the real engine's command (on the port a user would pick), since nothing else serves it.
    """

    pgid = None
    port = DIRECT_PORT

    def __init__(self, backend: InProcessBackend, config: ServerConfig, workdir: Path) -> None:
        self.backend, self.config = backend, config
        self.log_path = workdir / "server.log"
        self.model: PerformanceModel | None = None

    @functools.cached_property
    def spec(self) -> LaunchSpec:
        # rendered when asked (the trial records it): the prior only asks for results
        return self.backend.engine.launch_spec(self.config, port=self.port)

    @property
    def command(self) -> LaunchSpec:
        return self.spec

    def __enter__(self) -> InProcessSimulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.model = None

    def wait_ready(self, timeout_s: float) -> float:
        """Build the configuration's model (instant).

        Raises:
            LaunchFailed: the configuration would not start (out of memory, no data in the table...).
        """
        try:
            self.model = build_model(self.backend.simulation, self.config, self.backend.hardware)
        except StartupFailure as exc:
            raise LaunchFailed(exc.kind, str(exc)) from None
        return 0.0

    def gpu_facts(self) -> dict:
        """No process, no GPU memory."""
        return {}

    def alive(self) -> bool:
        """A model has no process to lose: a load that fails leaves the others measurable."""
        return self.model is not None

    def measure(self, workload: Workload, on_progress: ProgressHook | None = None) -> BenchmarkResult:
        """The model's result for ``workload`` (no checkpoints: it is computed at once).

        Raises:
            LaunchFailed: the model has no result for it (a table's failure row, for instance).
        """
        requests = simulated_requests(workload.model_copy(update={"max_concurrency": None, "request_rate": math.inf}))
        try:
            result = self.model.evaluate(workload, requests, self.config.api_model_name)
        except StartupFailure as exc:
            raise LaunchFailed(exc.kind, str(exc)) from None
        return BenchmarkResult.from_vllm_json(result)


def simulated_requests(workload: Workload) -> list:
    """A workload's requests in the simulator's words, built once for every load and trial (loads don't change them)."""
    return _simulated_requests(json.dumps(workload.model_dump(mode="json"), sort_keys=True))


@functools.lru_cache(maxsize=16)  # a space's every workload (the seed's six) stays built
def _simulated_requests(workload_json: str) -> list:
    # keyed by the JSON form: a workload holds mappings (headers, extra_body), which do not hash
    return build_requests(Workload.model_validate(json.loads(workload_json)), word_tokenizer())
