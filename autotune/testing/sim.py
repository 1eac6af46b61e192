"""The simulated engine for tests and benchmarks: the seed study's model and node, a simulated engine of any adapter,
and the simulator served as a subprocess through the launch path every trial uses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.serving.seam import Backend, Launch
from autotune.sim.backends import simulated_backend
from autotune.space.schema import Simulation

V32 = "deepseek-ai/DeepSeek-V3.2"  # the seed study's model
H200X8 = Hardware(gpus=8, gpu_memory_gb=141, gpu="H200")  # the seed study's node


def simulated(config: ServerConfig, time_scale: float = 0.1, mode: str = "server") -> Backend:
    """``config``'s engine, simulated on the seed study's node (``time_scale``: simulated seconds per real one)."""
    return simulated_backend(get_engine(config.engine), Simulation(time_scale=time_scale, mode=mode), H200X8)


@contextlib.contextmanager
def sim_server(backend: Backend, config: ServerConfig, workdir: Path) -> Iterator[Launch]:
    """The simulated engine as a subprocess, through the same serving path every trial uses."""
    with backend.serve(config, workdir) as launch:
        launch.wait_ready(30)
        yield launch
