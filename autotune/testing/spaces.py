"""Spaces written for tests and benchmarks from the shipped ones."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.space.files import find_space


def direct_quickstart(directory: Path, num_prompts: int) -> Path:
    """The quickstart space (three engines, millions of configurations) with the simulator in direct mode: each trial
    is computed in-process (about 0.1 s for a few hundred prompts, no server process), so what a run measures is the
    study around the trials. Written as ``directory/space.yaml``; returns its path."""
    space = yaml.safe_load(find_space("quickstart").read_text())
    space["simulate"] = {"mode": "direct", "performance_model": "analytic"}
    space["workload"]["num_prompts"] = num_prompts
    path = directory / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path
