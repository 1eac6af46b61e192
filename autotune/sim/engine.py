"""The simulated engine: stands in for a real engine adapter (its rules, its version, its failure messages) but its
program is autotune's simulator server (``python -m autotune.sim serve``).

What serves a simulated space, and how its results come back in the model's time, is the simulator's backends'
business (``autotune.sim.backends``). Everything it produces is labelled simulated: the trial's ``simulated``
attribute, the result's ``client.simulated``, the server's ``owned_by`` and the first line of its log.
"""

from __future__ import annotations

import sys

from packaging.version import Version
from tokenizers import Tokenizer

from autotune.config import Hardware, ServerConfig
from autotune.engines.base import Engine, LaunchSpec
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Simulation


class SimulatedEngine(Engine):
    """``inner``'s rules, version and failure messages; the simulator's server as its program."""

    name = "sim"
    default_executable = (sys.executable, "-m", "autotune.sim")
    default_version = "0"

    def __init__(self, inner: Engine, simulation: Simulation, hardware: Hardware) -> None:
        super().__init__(None)
        self.inner, self.simulation, self.hardware = inner, simulation, hardware
        self.rules, self.unsupported_knobs = inner.rules, inner.unsupported_knobs
        self.failure_patterns = inner.failure_patterns

    def version(self, config: ServerConfig) -> Version:
        return self.inner.version(config)

    def launch_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """The simulator's command line for ``config`` of the inner engine (whose own command is ``command_spec``).

        Raises:
            UnsupportedConfig: the real engine has no way to express ``config``.
        """
        self.inner.launch_spec(config, port, host)  # refuses what the real engine cannot express
        return self.render(config, self.version(config), port, host)

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        """The simulator's server, given the configuration, the space's hardware and the time scale as arguments
        (the configuration travels as JSON: its env and extra arguments are the real engine's, not the simulator's)."""
        sim = self.simulation
        argv = (*self.default_executable, "serve", "--port", str(port or 8000), "--host", host, "--time-scale",
                str(sim.time_scale), "--performance-model", sim.performance_model, "--hardware",
                self.hardware.model_dump_json(), "--config", config.model_dump_json())  # fmt: skip
        return LaunchSpec(argv)

    def command_spec(self, config: ServerConfig, port: int | None = None, host: str = "127.0.0.1") -> LaunchSpec:
        """The real engine's launch for ``config``: what a user runs once the study is done."""
        return self.inner.launch_spec(config, port, host)

    def gpus_used(self, config: ServerConfig) -> int:
        return self.inner.gpus_used(config)

    def tokenizer(self, config: ServerConfig, override: str | None = None, download: bool = True) -> Tokenizer:
        return word_tokenizer()
