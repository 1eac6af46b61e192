"""Exports of a configuration: docker run lines for each engine's official image; secrets never stored or printed."""

from __future__ import annotations

import shlex

from autotune.config import ServerConfig
from autotune.evidence.export import docker_run, public_config, shell_script
from autotune.space.redact import MASK

V32 = "deepseek-ai/DeepSeek-V3.2"


def words(line: str) -> list[str]:
    return shlex.split(line.replace('"$HOME', '"HOME').replace('"$PWD', '"PWD'))


def test_vllm_image_takes_the_serve_arguments() -> None:
    config = ServerConfig(engine="vllm", engine_version="0.13.0", model=V32, tp=8, attention_backend="FLASHMLA_SPARSE")
    line = docker_run(config, ["HF_TOKEN"], port=9000)
    argv = words(line)
    image = argv.index("vllm/vllm-openai:v0.13.0")
    assert argv[:2] == ["docker", "run"] and argv[image + 1 : image + 2] == [V32]  # entrypoint is `vllm serve`
    assert "serve" not in argv[image:] and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("-p") : argv.index("-p") + 2] == ["-p", "9000:9000"]
    assert "VLLM_ATTENTION_BACKEND=FLASHMLA_SPARSE" in argv  # vLLM 0.13 takes the backend from the environment
    assert argv[argv.index("HF_TOKEN") - 1] == "-e"  # passed through by name: the value stays on the host


def test_sglang_and_trtllm_images_take_the_whole_command() -> None:
    sglang = words(docker_run(ServerConfig(engine="sglang", engine_version="0.5.6.post2", model=V32, tp=8), []))
    image = sglang.index("lmsysorg/sglang:v0.5.6.post2")
    assert sglang[image + 1 : image + 4] == ["python3", "-m", "sglang.launch_server"]
    trtllm = docker_run(
        ServerConfig(engine="trtllm", engine_version="1.2.0rc5", model=V32, tp=8, kv_cache_dtype="fp8"), []
    )
    assert trtllm.startswith("cat > ")  # the options YAML is written first, into the mounted working directory
    last = words(trtllm.splitlines()[-1])
    assert last[last.index("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc5") + 1] == "trtllm-serve"


def test_public_config_drops_secrets() -> None:
    config = ServerConfig(engine="vllm", model=V32, env={"HF_TOKEN": "hf_abcdef", "VLLM_USE_DEEP_GEMM": "0"},
                          extra_args=("--api-key", "sk-12345", "--max-num-seqs", "8"))  # fmt: skip
    stored = public_config(config)
    assert stored["env"] == {"VLLM_USE_DEEP_GEMM": "0"}
    assert stored["extra_args"] == ["--api-key", MASK, "--max-num-seqs", "8"]
    assert "hf_abcdef" not in str(stored) and "sk-12345" not in str(stored)


def test_shell_script_names_missing_secrets() -> None:
    script = shell_script(
        {"argv": ["vllm", "serve", "m x"], "env": {"A": "1 2"}, "files": {}, "secret_env": ["HF_TOKEN"]}
    )
    assert script.splitlines() == ["# set HF_TOKEN in your environment first (kept out of the study)",
                                   "A='1 2' vllm serve 'm x'"]  # fmt: skip
