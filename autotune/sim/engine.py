"""The simulated engine: stands in for a real engine adapter (its rules, its command, its failure messages) but runs
autotune's simulator, as a server subprocess (``mode: server``) or in-process (``mode: direct``).

Everything it produces is labelled simulated: the trial's ``simulated`` attribute, the result's ``client.simulated``,
the server's ``owned_by`` and the first line of its log.
"""

from __future__ import annotations

import sys

from packaging.version import Version
from tokenizers import Tokenizer

from autotune.bench.datasets import BenchRequest
from autotune.config import Hardware, ServerConfig
from autotune.engines.base import Engine, LaunchSpec
from autotune.sim.models import PerformanceModel, build_model
from autotune.sim.words import word_tokenizer
from autotune.space import Simulation, Workload

# result fields in seconds' denominators (rates) and in milliseconds (latencies): rescaled from wall to model time
_RATE_FIELDS = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                "max_output_tokens_per_s")  # fmt: skip


def to_model_time(result: dict, time_scale: float) -> dict:
    """A result measured against a server running ``time_scale`` × real time, in the model's own time."""
    scaled = dict(result)
    for key, value in result.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key.endswith("_ms"):
            scaled[key] = value / time_scale
        elif key in _RATE_FIELDS:
            scaled[key] = value * time_scale
        elif key == "duration":
            scaled[key] = value / time_scale
    return scaled


class SimulatedEngine(Engine):
    """``inner``'s rules, version and command, served by the simulator."""

    name = "sim"
    default_executable = (sys.executable, "-m", "autotune.sim")
    default_version = "0"

    def __init__(self, inner: Engine, simulation: Simulation, hardware: Hardware) -> None:
        super().__init__(None)
        self.inner, self.simulation, self.hardware = inner, simulation, hardware
        self.rules, self.unsupported_knobs = inner.rules, inner.unsupported_knobs
        self.failure_patterns = inner.failure_patterns

    @property
    def direct(self) -> bool:
        return self.simulation.mode == "direct"

    def version(self, config: ServerConfig) -> Version:
        return self.inner.version(config)

    def launch_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """The simulator's command line (the configuration travels as JSON; the real command is ``command_spec``)."""
        self.inner.launch_spec(config, port, host)  # refuses what the real engine cannot express
        sim = self.simulation
        argv = (*self.default_executable, "serve", "--port", str(port or 8000), "--host", host, "--time-scale",
                str(sim.time_scale), "--performance-model", sim.performance_model, "--hardware",
                self.hardware.model_dump_json(), "--config", config.model_dump_json())  # fmt: skip
        return LaunchSpec(argv)

    def render(self, config, version, port, host) -> LaunchSpec:  # pragma: no cover - launch_spec is overridden
        raise NotImplementedError

    def command_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """The real engine's launch for ``config``: what a user runs once the study is done."""
        return self.inner.launch_spec(config, port, host)

    def gpus_used(self, config: ServerConfig) -> int:
        return self.inner.gpus_used(config)

    def tokenizer(self, config: ServerConfig) -> Tokenizer:
        return word_tokenizer()

    def model_time(self, result: dict) -> dict:
        if self.direct:
            return result
        return to_model_time(result, self.simulation.time_scale) | {
            "client": result.get("client", {}) | {"simulated": True, "mode": "server"}
        }

    def performance_model(self, config: ServerConfig) -> PerformanceModel:
        """The direct mode's model of ``config`` on the space's hardware.

        Raises:
            StartupFailure: the configuration would not start (its kind and the engine's message).
        """
        return build_model(self.simulation, config, self.hardware)

    def evaluate(self, config: ServerConfig, workload: Workload, requests: list[BenchRequest]) -> dict:
        """The direct mode: the benchmark result of ``workload`` on ``config``, computed in-process.

        Raises:
            StartupFailure: the configuration would not start (its kind and the engine's message).
        """
        return self.performance_model(config).evaluate(workload, requests, config.api_model_name)
