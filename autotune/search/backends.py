"""Which backend serves a space's configurations: the engine itself as a process, or the simulator standing in for it.

The trial (``autotune.search.objective``), ``study validate`` and the prior ask here and get an ``autotune.serving.seam.Backend``;
they never see which one. A space with ``simulate`` gets the simulator's backends (``autotune.sim.backends``: its
server, or its model in process); this module is where that choice is handed out, so that the modules on the
trial's path import nothing of the simulator.
"""

from __future__ import annotations

from pathlib import Path

from autotune.config import ServerConfig
from autotune.engines import Engine, get_engine
from autotune.serving.seam import Backend, ProcessBackend
from autotune.sim import backends as simulator
from autotune.space.schema import SearchSpace, Simulation


def serving_backend(space: SearchSpace, name: str, executables: dict[str, list[str]] | None = None) -> Backend:
    """What serves ``space``'s configurations of engine ``name``: the engine (its executable overridden by
    ``executables``, else the space's), or the simulator standing in for it where the space says ``simulate``."""
    executable = (executables or {}).get(name) or space.engines[name].executable
    engine = get_engine(name, [_anchored(part) for part in executable] if executable else None)
    if space.simulate is not None:
        return simulator.simulated_backend(engine, space.simulate, space.hardware)
    return ProcessBackend(engine)


def engine_for(space: SearchSpace, name: str, executables: dict[str, list[str]] | None = None) -> Engine:
    """The adapter whose program runs ``name``'s trials of ``space`` (the engine itself, or the simulator standing in
    for it): what is checked to be installed before a study's first launch."""
    return serving_backend(space, name, executables).launcher


def prediction_backend(space: SearchSpace, name: str, performance_model: str) -> Backend:
    """The simulator's ``performance_model`` in process, for engine ``name`` on ``space``'s hardware (the prior's)."""
    simulation = Simulation(performance_model=performance_model, mode="direct")
    return simulator.simulated_backend(get_engine(name), simulation, space.hardware)


def simulator_knows_model(model: str) -> bool:
    """Whether the simulator's analytic model knows ``model``'s shape."""
    return simulator.knows_model(model)


def _anchored(value: str) -> str:
    """A relative path that exists here, made absolute: the engine runs in the trial's directory, not ours."""
    path = Path(value)
    # absolute(), not resolve(): a virtual environment's python must keep its own path, not its symlink's target
    return str(path.absolute()) if not path.is_absolute() and path.exists() else value


def anchored_paths(config: ServerConfig) -> ServerConfig:
    """``config`` with its relative model and chat-template paths made absolute (the engine runs elsewhere)."""
    return config.model_copy(update={k: _anchored(v) for k in ("model", "chat_template") if (v := getattr(config, k))})
