"""Model shapes beyond DeepSeek: their sizes add up to the published parameter counts, the rules' profiles agree with
them, and the analytic model starts, fails and serves with them like the engines do."""

from __future__ import annotations

import pytest

from autotune.bench.datasets import build_requests
from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.engines.models import resolve_model
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.analytic import analytic_profile
from autotune.sim.direct import direct_benchmark
from autotune.sim.specs import model_shape
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Workload

H200X8 = Hardware(gpus=8, gpu_memory_gb=141, gpu="H200")
QWEN3_235B = "Qwen/Qwen3-235B-A22B"

# hub id, published total and active parameters (billions, from the model cards), bytes per stored param
PUBLISHED = [
    ("Qwen/Qwen3-235B-A22B", 235, 22, 2),
    ("Qwen/Qwen3-235B-A22B-FP8", 235, 22, 1),
    ("Qwen/Qwen3-30B-A3B", 30.5, 3.3, 2),
    ("Qwen/Qwen3-30B-A3B-FP8", 30.5, 3.3, 1),
    ("Qwen/Qwen3-32B", 32.8, 32.8, 2),
    ("Qwen/Qwen3-32B-FP8", 32.8, 32.8, 1),
    ("Qwen/Qwen3-8B", 8.2, 8.2, 2),
    ("Qwen/Qwen3-8B-FP8", 8.2, 8.2, 1),
    ("meta-llama/Llama-3.3-70B-Instruct", 70.6, 70.6, 2),
]
MODELS = [model for model, *_ in PUBLISHED]


def run(config: ServerConfig, concurrency: int = 8, prompts: int = 16, input_len: int = 64,
        output_len: int = 64) -> dict:  # fmt: skip
    workload = Workload(dataset="random", input_len=input_len, output_len=output_len, num_prompts=prompts,
                        max_concurrency=concurrency, seed=3)  # fmt: skip
    requests = build_requests(workload, word_tokenizer())
    return direct_benchmark(analytic_profile(config, H200X8), workload, requests, "sim")


@pytest.mark.parametrize(("model", "total_b", "active_b", "width"), PUBLISHED)
def test_shapes_add_up_to_the_published_parameter_counts(model: str, total_b: float, active_b: float,
                                                         width: int) -> None:  # fmt: skip
    shape = model_shape(model)
    assert shape is not None and shape.bytes_per_param == width
    assert shape.weight_bytes == pytest.approx(total_b * 1e9 * width, rel=0.05)
    assert shape.active_params == pytest.approx(active_b * 1e9, rel=0.10)
    assert not shape.latent_kv and shape.mtp_acceptance == 0.0 and shape.sparse_topk is None


@pytest.mark.parametrize("model", MODELS)
def test_the_rules_profile_agrees_with_the_shape(model: str) -> None:
    shape, info = model_shape(model), resolve_model(model)
    assert shape is not None and info is not None and info.source == "profile"
    assert info.max_positions == shape.max_positions
    assert info.moe == (shape.moe_layers > 0)
    assert info.parameter_bytes is not None
    if shape.bytes_per_param == 2:
        assert info.parameter_bytes == pytest.approx(shape.weight_bytes, rel=0.02)
    else:  # FP8 checkpoints keep embeddings and lm_head in bf16, which the shape counts at 1 byte
        assert shape.weight_bytes < info.parameter_bytes < 1.2 * shape.weight_bytes


def test_grouped_query_kv_is_split_across_tensor_parallel_ranks() -> None:
    tp1 = analytic_profile(ServerConfig(engine="vllm", model="Qwen/Qwen3-30B-A3B", tp=1), H200X8)
    tp2 = analytic_profile(ServerConfig(engine="vllm", model="Qwen/Qwen3-30B-A3B", tp=2), H200X8)
    assert tp1.kv_bytes_per_token() == 2 * 4 * 128 * 2 * 48  # K and V, 4 kv heads of 128, bf16, 48 layers
    assert tp2.kv_bytes_per_token() == tp1.kv_bytes_per_token() / 2
    assert tp2.weights_per_gpu() == pytest.approx(tp1.weights_per_gpu() / 2)


def test_qwen3_235b_on_eight_h200_starts_and_serves() -> None:
    config = ServerConfig(engine="vllm", model=QWEN3_235B, tp=8)
    profile = analytic_profile(config, H200X8)
    assert profile.weights_per_gpu() == pytest.approx(470e9 / 8, rel=0.02)
    assert profile.max_model_len == 40960 and profile.kv_tokens_per_rank > 40960
    result = run(config)
    assert result["completed"] == 16 and result["failed"] == 0
    assert result["output_throughput"] > 0


def test_qwen3_235b_bf16_does_not_fit_two_h200() -> None:
    with pytest.raises(StartupFailure) as failure:  # 470 GB of bf16 weights on 2 x 141 GB
        analytic_profile(ServerConfig(engine="vllm", model=QWEN3_235B, tp=2), H200X8)
    assert failure.value.kind == FailureKind.OOM
    assert get_engine("vllm").classify_failure(1, str(failure.value)) == FailureKind.OOM
    fp8 = ServerConfig(engine="vllm", model=f"{QWEN3_235B}-FP8", tp=2, max_model_len=16384)
    analytic_profile(fp8, H200X8)  # 235 GB of FP8 weights fit, leaving KV room for a shorter context
    analytic_profile(ServerConfig(engine="vllm", model=QWEN3_235B, tp=4), H200X8)  # and four GPUs hold the bf16


@pytest.mark.parametrize(("model", "tp"), [("Qwen/Qwen3-30B-A3B", 1), ("Qwen/Qwen3-30B-A3B-FP8", 1),
                                           ("Qwen/Qwen3-32B", 1), ("Qwen/Qwen3-8B", 1),
                                           ("meta-llama/Llama-3.3-70B-Instruct", 2)])  # fmt: skip
def test_each_new_model_serves_in_the_direct_simulator(model: str, tp: int) -> None:
    result = run(ServerConfig(engine="vllm", model=model, tp=tp))
    assert result["completed"] == 16 and result["output_throughput"] > 0


def test_the_active_experts_make_a_moe_faster_than_a_dense_model_of_its_size() -> None:
    moe = run(ServerConfig(engine="vllm", model="Qwen/Qwen3-30B-A3B", tp=1), concurrency=1, prompts=4)
    dense = run(ServerConfig(engine="vllm", model="Qwen/Qwen3-32B", tp=1), concurrency=1, prompts=4)
    assert moe["median_tpot_ms"] < dense["median_tpot_ms"]
