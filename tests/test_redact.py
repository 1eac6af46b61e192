from __future__ import annotations

import pytest

from autotune.engines.base import LaunchSpec
from autotune.space.redact import is_secret_name, mask_url, redact_spec, scrub_file, secret_values


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "OPENAI_API_KEY", "--api-key", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "--token"]
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--max-num-batched-tokens", "TOKENIZERS_PARALLELISM", "VLLM_CPU_KVCACHE_SPACE", "--tokenizer-mode", "KEYBOARD"],
)
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_spec_and_scrub(tmp_path) -> None:
    spec = LaunchSpec(("vllm", "serve", "m", "--api-key", "sk-123456", "--max-num-batched-tokens", "2048"),
                      {"HF_TOKEN": "hf_abcdef", "TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
    redacted = redact_spec(spec)
    assert redacted["argv"] == ["vllm", "serve", "m", "--api-key", "***", "--max-num-batched-tokens", "2048"]
    assert redacted["env"] == {"TOKENIZERS_PARALLELISM": "false"} and redacted["secret_env"] == ["HF_TOKEN"]
    log = tmp_path / "server.log"
    log.write_text("args: --api-key sk-123456 env hf_abcdef\n")
    scrub_file(log, secret_values(spec))
    assert log.read_text() == "args: --api-key *** env ***\n"


def test_mask_url() -> None:
    assert mask_url("postgresql+psycopg://user:hunter2@db:5432/x") == "postgresql+psycopg://user:***@db:5432/x"
    assert "hunter2" not in mask_url("not a url://user:hunter2@host")
