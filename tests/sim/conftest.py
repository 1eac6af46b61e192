from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.launch import Launch
from autotune.sim.engine import SimulatedEngine
from autotune.space import Simulation
from tests.conftest import H200X8

V32 = "deepseek-ai/DeepSeek-V3.2"


def simulated(config: ServerConfig, time_scale: float = 0.1, mode: str = "server") -> SimulatedEngine:
    return SimulatedEngine(get_engine(config.engine), Simulation(time_scale=time_scale, mode=mode), H200X8)


@contextlib.contextmanager
def sim_server(engine: SimulatedEngine, config: ServerConfig, workdir: Path) -> Iterator[Launch]:
    """The simulated engine as a subprocess, through the same launch path every trial uses."""
    with Launch(engine, config, workdir) as launch:
        launch.wait_ready(30)
        yield launch
