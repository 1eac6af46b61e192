"""The analytic model: it ranks the seed study's measured configurations like the measurements do, and its physics
moves the way the engines do (memory limits, speculative decoding, batching limits, attention DP)."""

from __future__ import annotations

import pandas as pd
import pytest

from autotune.bench.datasets import build_requests
from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.analytic import analytic_profile
from autotune.sim.direct import direct_benchmark
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Workload
from autotune.testing.seedset import sharegpt_runs, simulated_total
from autotune.testing.sim import H200X8, V32

VLLM_TP8 = ServerConfig(engine="vllm", model=V32, tp=8)


def run(config: ServerConfig, concurrency: int, prompts: int = 64, input_len: int = 64, output_len: int = 256) -> dict:
    workload = Workload(dataset="random", input_len=input_len, output_len=output_len, num_prompts=prompts,
                        max_concurrency=concurrency, seed=3)  # fmt: skip
    requests = build_requests(workload, word_tokenizer())
    return direct_benchmark(analytic_profile(config, H200X8), workload, requests, "sim")


def test_ranks_the_seed_sharegpt_runs_like_the_measurements() -> None:
    runs = sharegpt_runs()
    table = pd.DataFrame({"measured": [r.measured_total for r in runs],
                          "simulated": [simulated_total(r.config) for r in runs]})  # fmt: skip
    rho = table.simulated.rank().corr(table.measured.rank())
    print(f"Spearman rho over {len(runs)} seed runs: {rho:.3f}")
    assert len(runs) == 19 and rho >= 0.8


def test_weights_that_do_not_fit_fail_at_start_like_the_engine() -> None:
    one_gpu = ServerConfig(engine="vllm", model=V32, tp=1)  # 690 GB of weights on one 141 GB GPU
    with pytest.raises(StartupFailure) as failure:
        analytic_profile(one_gpu, H200X8)
    assert failure.value.kind == FailureKind.OOM
    assert get_engine("vllm").classify_failure(1, str(failure.value)) == FailureKind.OOM
    sglang = ServerConfig(engine="sglang", model=V32, tp=2)
    with pytest.raises(StartupFailure, match="Not enough memory") as failure:
        analytic_profile(sglang, H200X8)
    assert get_engine("sglang").classify_failure(1, str(failure.value)) == FailureKind.OOM


def test_vllm_refuses_a_context_its_kv_cache_cannot_hold() -> None:
    tight = VLLM_TP8.model_copy(update={"gpu_memory_utilization": 0.66})  # weights fit, a 163840-token request does not
    with pytest.raises(StartupFailure, match="max seq len \\(163840\\)") as failure:
        analytic_profile(tight, H200X8)
    assert get_engine("vllm").classify_failure(1, str(failure.value)) == FailureKind.OOM
    analytic_profile(tight.model_copy(update={"max_model_len": 32768}), H200X8)  # a shorter context starts


def test_attention_dp_multiplies_kv_capacity_of_mla() -> None:
    tp8 = analytic_profile(VLLM_TP8, H200X8)
    dp8 = analytic_profile(ServerConfig(engine="vllm", model=V32, tp=1, dp=8, ep=8, dp_attention=True), H200X8)
    # MLA's latent KV is replicated over a TP group: eight DP ranks hold eight different batches' KV
    assert dp8.ranks == 8 and dp8.kv_tokens_per_rank * dp8.ranks > 3 * tp8.kv_tokens_per_rank


def test_speculative_decoding_pays_at_low_concurrency_and_costs_at_high() -> None:
    mtp = VLLM_TP8.model_copy(update={"speculative": "mtp:1"})
    low, low_mtp = run(VLLM_TP8, 1, prompts=4), run(mtp, 1, prompts=4)
    high, high_mtp = run(VLLM_TP8, 1024, prompts=1024), run(mtp, 1024, prompts=1024)
    assert low_mtp["median_tpot_ms"] < 0.8 * low["median_tpot_ms"]
    assert high_mtp["output_throughput"] < high["output_throughput"]


def test_max_num_seqs_queues_the_rest() -> None:
    free, capped = run(VLLM_TP8, 64), run(VLLM_TP8.model_copy(update={"max_num_seqs": 8}), 64)
    assert capped["median_ttft_ms"] > 3 * free["median_ttft_ms"]
    assert capped["output_throughput"] < free["output_throughput"]


def test_sglang_caps_running_requests_with_speculative_decoding() -> None:
    eagle = ServerConfig(engine="sglang", model=V32, tp=8, speculative="mtp:1")
    assert analytic_profile(eagle, H200X8).max_running == 48
    assert analytic_profile(eagle.model_copy(update={"max_num_seqs": 256}), H200X8).max_running == 256


def test_throughput_grows_with_load_then_saturates() -> None:
    totals = [run(VLLM_TP8, c, prompts=max(64, c))["output_throughput"] for c in (1, 16, 256, 1024)]
    assert totals[0] < totals[1] < totals[2]
    assert totals[3] < 1.5 * totals[2]  # the engine saturates: four times the load, far less than four times the rate


def test_a_request_longer_than_the_context_is_refused_not_queued() -> None:
    short = VLLM_TP8.model_copy(update={"max_model_len": 600})
    result = run(short, 4, prompts=4, input_len=512, output_len=128)  # 512 + 128 > 600
    assert result["completed"] == 0 and result["failed"] == 4 and result["errors_by_type"] == {"http_400": 4}
