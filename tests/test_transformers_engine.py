"""The `transformers serve` adapter: its flags, rules and failure kinds, and what differs from the serving engines
(readiness without /v1/models, no request extensions, an out-of-memory during a benchmark), on the scripted server
made strict like transformers serve (the real one runs in tests/engine and on the GPU: benchmarks/gpu_study.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from autotune.bench.client import ClientOptions, request_body
from autotune.bench.datasets import BenchRequest
from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, LaunchFailed, UnsupportedConfig
from autotune.serving.seam import Launch
from autotune.space.schema import Workload

SCRIPTED = [sys.executable, "-m", "autotune.testing.scripted"]
PROMPTS = Workload(dataset="jsonl", path=str(Path(__file__).parent / "study" / "prompts.jsonl"), output_len=4,
                   num_prompts=6)  # fmt: skip
ONE_GPU = Hardware(gpus=1, gpu_memory_gb=141, gpu="H200")


def config(**knobs) -> ServerConfig:
    return ServerConfig(engine="transformers", model="/models/llama-738m", **knobs)


def test_renders_every_knob_it_has() -> None:
    spec = get_engine("transformers").launch_spec(
        config(continuous_batching=True, cuda_graph=True, attention_backend="sdpa", dtype="bfloat16",
               torch_compile=True, max_num_batched_tokens=512, kv_cache_blocks=4096, gpu_memory_utilization=0.8),
        port=8123,
    )  # fmt: skip
    assert spec.argv == ("transformers", "serve", "/models/llama-738m", "--continuous-batching", "--attn-implementation",
                         "sdpa", "--dtype", "bfloat16", "--compile", "--cb-max-batch-tokens", "512", "--cb-num-blocks",
                         "4096", "--cb-max-memory-percent", "0.8", "--cb-use-cuda-graph", "--host", "127.0.0.1",
                         "--port", "8123")  # fmt: skip
    plain = get_engine("transformers").launch_spec(config(continuous_batching=True, cuda_graph=False))
    assert plain.argv[-1] == "--no-cb-use-cuda-graph"
    assert get_engine("transformers").launch_spec(config()).argv == ("transformers", "serve", "/models/llama-738m")


@pytest.mark.parametrize(
    ("knobs", "rule"),
    [({"cuda_graph": True}, "cb-knobs-need-continuous-batching"),
     ({"max_num_batched_tokens": 256}, "cb-knobs-need-continuous-batching"),
     ({"tp": 2}, "one-device"), ({"speculative": "mtp:1"}, "knob-not-supported"),
     ({"kv_cache_dtype": "fp8"}, "knob-not-supported"), ({"served_model_name": "m"}, "knob-not-supported")],
)  # fmt: skip
def test_static_rules_refuse_what_it_cannot_run(knobs, rule) -> None:
    with pytest.raises(UnsupportedConfig) as refused:
        get_engine("transformers").check(config(**knobs), ONE_GPU)
    assert refused.value.rule == rule
    get_engine("transformers").check(config(continuous_batching=True, cuda_graph=True), ONE_GPU)  # and passes this


def test_other_engines_refuse_its_own_knobs() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        with pytest.raises(UnsupportedConfig, match="continuous_batching"):
            get_engine(engine).check(ServerConfig(engine=engine, model="m", continuous_batching=True), ONE_GPU)


@pytest.mark.parametrize(
    ("log", "kind"),
    [("ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package "
      "flash_attn seems to be not installed.", FailureKind.UNSUPPORTED),
     ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB",
      FailureKind.OOM),
     ("Error: No such option: --cb-use-cuda-graphs", FailureKind.BAD_FLAG)],
)  # fmt: skip
def test_failures_in_its_own_words(log, kind) -> None:
    assert get_engine("transformers").classify_failure(1, f"INFO loading\n{log}\n") is kind


def test_sends_no_request_extensions() -> None:
    request = BenchRequest(prompt="hello there", prompt_len=2, output_len=8)
    for endpoint in ("/v1/completions", "/v1/chat/completions"):
        engine = get_engine("transformers")
        strict = ClientOptions("http://x", "m", endpoint, extensions=engine.request_extensions,
                               chat_length_field=engine.chat_length_field)  # fmt: skip
        body = json.loads(request_body(strict, request))
        assert "ignore_eos" not in body and "repetition_penalty" not in body
        assert body["max_tokens"] == 8 and "max_completion_tokens" not in body
        assert json.loads(request_body(ClientOptions("http://x", "m", endpoint), request))["ignore_eos"] is True


def strict_launch(tmp_path, engine: str, **env: str) -> Launch:
    server = ServerConfig(engine=engine, model="tiny", continuous_batching=True if engine == "transformers" else None,
                          env={"SCRIPTED_STRICT": "1", **env})  # fmt: skip
    return Launch(get_engine(engine, [*SCRIPTED]), server, tmp_path / engine)


def test_a_strict_server_is_ready_and_measured_through_the_transformers_adapter(tmp_path) -> None:
    workload = PROMPTS.model_copy(update={"endpoint": "/v1/chat/completions"})
    with strict_launch(tmp_path, "transformers") as launch:
        launch.wait_ready(30)  # /v1/models lists nothing: readiness is a one-token completion
        result = launch.measure(workload)
    assert result.completed == 6 and result.failed == 0
    # the same server through an adapter that expects /v1/models to name the model never becomes ready
    with strict_launch(tmp_path, "vllm") as launch, pytest.raises(LaunchFailed) as never:
        launch.wait_ready(3)
    assert never.value.kind is FailureKind.TIMEOUT


def test_an_out_of_memory_during_the_benchmark_is_oom(tmp_path) -> None:
    workload = PROMPTS
    with strict_launch(tmp_path, "transformers", SCRIPTED_OOM_AT_REQUEST="2") as launch:
        launch.wait_ready(30)  # request 1, the readiness probe, is served
        with pytest.raises(LaunchFailed) as failed:
            launch.measure(workload)
    assert failed.value.kind is FailureKind.OOM and "CUDA out of memory" in failed.value.evidence


def test_an_out_of_memory_at_the_readiness_probe_fails_the_launch_at_once(tmp_path) -> None:
    # the first request allocates the KV pool: it fails, the server stays up answering 500, the log says why
    with strict_launch(tmp_path, "transformers", SCRIPTED_OOM_AT_REQUEST="1") as launch:
        with pytest.raises(LaunchFailed) as failed:
            launch.wait_ready(60)
        assert launch.alive()  # still running: the log, not an exit, said the launch failed
    assert failed.value.kind is FailureKind.OOM and "failed while running" in failed.value.reason


def test_autotune_bench_sends_what_the_named_engine_takes(tmp_path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    with strict_launch(tmp_path, "transformers") as launch:
        launch.wait_ready(30)
        args = ["bench", "--base-url", launch.base_url, "--model", "tiny", "--dataset", "jsonl", "--dataset-path",
                PROMPTS.path, "--num-prompts", "4", "--endpoint", "/v1/chat/completions", "--json"]  # fmt: skip
        strict = CliRunner().invoke(app, [*args, "--engine", "transformers"])
        vllm_style = CliRunner().invoke(app, args)  # ignore_eos is sent: a strict server refuses every request
    assert strict.exit_code == 0, strict.output
    assert json.loads(strict.stdout)["completed"] == 4
    assert vllm_style.exit_code == 1 and "http_422" in vllm_style.stdout + vllm_style.stderr
