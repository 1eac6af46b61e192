"""A model named by its hub id: its tokenizer found as the engines find it (the local directory, the Hugging Face cache
of the engine's environment at the revision asked, a download of the tokenizer alone), or a refusal with the fix."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.engines import hub as hub_module
from autotune.engines.hub import ModelRef, resolve_tokenizer
from autotune.errors import UnsupportedConfig, UsageError
from autotune.testing.hub_cache import REVISION, save_to_hub_cache

REPO_ID = "acme/tiny-chat"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A local model directory holding a (word-level) tokenizer.json and a config.json."""
    directory = tmp_path / "tiny-chat"
    directory.mkdir()
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    return directory


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Fails the test if the hub is asked anything; returns the list of what was asked (empty when it passes)."""
    asked: list[str] = []

    def refuse(*args, **kwargs):
        asked.append(repr(args))
        raise AssertionError(f"the hub was asked: {args}")

    monkeypatch.setattr(hub_module.httpx, "head", refuse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    return asked


def test_a_hub_id_resolves_from_the_cache_of_the_engines_environment(model_dir, tmp_path, no_network) -> None:
    snapshot = save_to_hub_cache(model_dir, tmp_path / "hf", REPO_ID)
    # HF_HOME only in the engine's env (the space's), not this process's: the engine reads that cache, so do we
    found = resolve_tokenizer(REPO_ID, {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert found.where == "Hugging Face cache" and found.file == snapshot / "tokenizer.json"
    assert found.load().encode("hello world").ids == [1, 2]
    assert found.reference == REPO_ID and not no_network


def test_hf_hub_cache_wins_over_hf_home(model_dir, tmp_path, no_network) -> None:
    save_to_hub_cache(model_dir, tmp_path / "other", REPO_ID)
    env = {"HF_HOME": str(tmp_path / "empty"), "HF_HUB_CACHE": str(tmp_path / "other" / "hub"), "HF_HUB_OFFLINE": "1"}
    assert resolve_tokenizer(REPO_ID, env).file.is_relative_to(tmp_path / "other")


def test_a_pinned_revision_is_the_one_read(model_dir, tmp_path, no_network) -> None:
    save_to_hub_cache(model_dir, tmp_path / "hf", REPO_ID)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    assert resolve_tokenizer(f"{REPO_ID}@{REVISION}", env).file.parent.name == REVISION
    with pytest.raises(UsageError, match=r"acme/tiny-chat@v2 is not in the Hugging Face cache .*--revision v2"):
        resolve_tokenizer(f"{REPO_ID}@v2", env)


def test_offline_and_not_cached_is_refused_at_once_with_the_fix(tmp_path, no_network) -> None:
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    with pytest.raises(UsageError) as refused:
        resolve_tokenizer("deepseek-ai/DeepSeek-V3.2", env)
    message = str(refused.value)
    assert "HF_HUB_OFFLINE is set" in message and str(tmp_path / "hf" / "hub") in message
    assert "fix: where the hub is reachable, run `hf download deepseek-ai/DeepSeek-V3.2 tokenizer.json" in message
    assert not no_network


def test_an_unreachable_hub_is_refused_without_huggingface_hubs_retries(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(hub_module, "hub_unreachable", lambda env, timeout_s=5.0: "https://hf.example: no route")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("download attempted"))
    with pytest.raises(UsageError, match="the hub is not reachable from here .*no route"):
        resolve_tokenizer(REPO_ID, {"HF_HOME": str(tmp_path / "hf")})


def test_a_reachable_hub_gives_the_tokenizer_alone(model_dir, tmp_path, monkeypatch) -> None:
    fetched: list[tuple] = []

    def download(repo_id, filename, revision=None, cache_dir=None, token=None):
        fetched.append((repo_id, filename, revision, cache_dir))
        snapshot = save_to_hub_cache(model_dir, Path(cache_dir).parent, repo_id, files=(filename,))
        return str(snapshot / filename)

    monkeypatch.setattr(hub_module, "hub_unreachable", lambda env, timeout_s=5.0: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    found = resolve_tokenizer(REPO_ID, {"HF_HOME": str(tmp_path / "hf")})
    assert found.where == "downloaded" and fetched == [(REPO_ID, "tokenizer.json", None, str(tmp_path / "hf" / "hub"))]
    assert sorted(p.name for p in found.file.parent.iterdir()) == ["tokenizer.json"]  # never the weights
    # the next study finds it in the cache, without the hub
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("downloaded twice"))
    assert resolve_tokenizer(REPO_ID, {"HF_HOME": str(tmp_path / "hf")}).where == "Hugging Face cache"


def test_workload_tokenizer_overrides_the_model(model_dir, tmp_path, no_network) -> None:
    found = resolve_tokenizer("acme/not-cached", {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"},
                              override=str(model_dir / "tokenizer.json"))  # fmt: skip
    assert found.where == "workload.tokenizer" and found.file == model_dir / "tokenizer.json"


def test_a_local_directory_without_tokenizer_json_says_what_to_set(tmp_path) -> None:
    (tmp_path / "model").mkdir()
    with pytest.raises(UsageError, match=r"no tokenizer.json in .*model.*fix: set workload.tokenizer"):
        resolve_tokenizer(str(tmp_path / "model"))


@pytest.mark.parametrize(
    ("written", "expected"),
    [("meta-llama/Llama-3.3-70B-Instruct", ModelRef("meta-llama/Llama-3.3-70B-Instruct")),
     ("deepseek-ai/DeepSeek-V3.2@a1b2c3", ModelRef("deepseek-ai/DeepSeek-V3.2", "a1b2c3")),
     ("gpt2", ModelRef("gpt2"))],
)  # fmt: skip
def test_model_references_as_users_write_them(written, expected) -> None:
    assert ModelRef.parse(written) == expected


@pytest.mark.parametrize("written", ["./models/missing", "/models/missing/llama", "org/name@", "a/b/c"])
def test_a_path_that_is_not_there_is_not_taken_for_a_hub_id(written) -> None:
    with pytest.raises(UsageError, match="neither a local directory nor a hub id"):
        ModelRef.parse(written)


def test_a_pinned_revision_is_rendered_where_the_engine_takes_one() -> None:
    config = ServerConfig(engine="vllm", model=f"{REPO_ID}@{REVISION}")
    argv = get_engine("vllm").launch_spec(config).argv
    assert argv[argv.index("serve") + 1] == REPO_ID and config.api_model_name == REPO_ID
    assert argv[argv.index("--revision") + 1] == REVISION and argv[argv.index("--tokenizer-revision") + 1] == REVISION
    sglang = get_engine("sglang").launch_spec(config.model_copy(update={"engine": "sglang"})).argv
    assert sglang[sglang.index("--model-path") + 1] == REPO_ID and sglang[sglang.index("--revision") + 1] == REVISION


def test_an_engine_without_a_revision_flag_refuses_a_pinned_model() -> None:
    config = ServerConfig(engine="trtllm", model=f"{REPO_ID}@{REVISION}")
    with pytest.raises(UnsupportedConfig, match="takes no hub revision.*--local-dir DIR"):
        get_engine("trtllm").check(config, Hardware(gpus=1, gpu_memory_gb=80))
