"""The simulator's calibration set: the seed study's runs (``SEED_RESULTS``, its commands and measured throughputs),
each run's configuration written by hand from the seed study's text (``SEED_CONFIGS``), and its ShareGPT runs as
simulator inputs with a ShareGPT-like load (1000 prompts at once; input and output lengths uniform around ShareGPT's
means, 219 and 197).

Used by the seed-command and rank-agreement tests and by benchmarks/sim_vs_seed.py (which fits TOKEN_COST_S). The
simulator itself never reads these numbers.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autotune.bench.datasets import BenchRequest, build_requests
from autotune.config import ServerConfig
from autotune.errors import StartupFailure
from autotune.sim.analytic import analytic_profile
from autotune.sim.direct import simulate
from autotune.sim.words import word_tokenizer
from autotune.space.schema import SHAREGPT_LIKE
from autotune.testing.sim import H200X8, V32

SEED_NODE = H200X8  # the seed study's node
SEED_RESULTS = Path(__file__).resolve().parent / "data" / "seed-results.csv"  # its runs: command, env, throughputs
_VLLM = {
    "engine": "vllm",
    "engine_version": "0.13.0",
    "model": V32,
    "tokenizer_mode": "deepseek_v32",
    "reasoning_parser": "deepseek_v3",
}
_SGLANG = {"engine": "sglang", "engine_version": "0.5.6.post2", "model": V32}
_SGLANG_TEMPLATE = {**_SGLANG, "chat_template": "./tool_chat_template_deepseekv32.jinja"}
_SGLANG_DPA = {**_SGLANG_TEMPLATE, "tp": 8, "dp": 8, "dp_attention": True}
_SGLANG_PARSERS = {**_SGLANG_DPA, "reasoning_parser": "deepseek-v3", "tool_call_parser": "deepseekv32"}
_SGLANG_32K = {**_SGLANG_PARSERS, "max_model_len": 32768}
_SGLANG_BEST = {
    **_SGLANG_32K,
    "attention_backend": "nsa",
    "prefill_attention_backend": "fa3",
    "decode_attention_backend": "fa3",
}
_TRTLLM = {"engine": "trtllm", "engine_version": "1.2.0rc5", "model": "/workspace/DeepSeek-v3.2", "tp": 8}

# (engine, experiment) -> the canonical knobs of that run, written by hand from the seed study's text.
SEED_CONFIGS: dict[tuple[str, str], dict] = {
    ("vllm", "baseline"): {**_VLLM, "tp": 8},
    ("vllm", "parallel DP+EP"): {**_VLLM, "tp": 1, "dp": 8, "ep": 8, "dp_attention": True, "max_model_len": 81920},
    ("vllm", "MTP"): {**_VLLM, "tp": 8, "speculative": "mtp:1"},
    ("vllm", "DeepGEMM off"): {**_VLLM, "tp": 8, "deep_gemm": False},
    ("vllm", "tool-call parser"): {**_VLLM, "tp": 8, "tool_call_parser": "deepseek_v32"},
    ("vllm", "context 32768"): {**_VLLM, "tp": 8, "max_model_len": 32768},
    ("vllm", "baseline (other workloads)"): {**_VLLM, "tp": 8},
    ("sglang", "baseline"): {**_SGLANG_TEMPLATE, "tp": 8},
    ("sglang", "TP+DP-attention"): {**_SGLANG_TEMPLATE, "tp": 8, "dp_attention": True},
    ("sglang", "TP+DP+DP-attention"): _SGLANG_DPA,
    ("sglang", "TP+DP+DP-attention+EP"): {**_SGLANG_DPA, "ep": 8},
    ("sglang", "MTP (EAGLE)"): {**_SGLANG, "tp": 8, "speculative": "mtp:1"},
    ("sglang", "tool-call parser (+DP8 DP-attention)"): _SGLANG_PARSERS,
    ("sglang", "context 32768"): _SGLANG_32K,
    # the engine-neutral "fp8" is SGLang's fp8_e4m3 (SGLang has no plain fp8)
    ("sglang", "KV cache fp8_e4m3"): {**_SGLANG_32K, "kv_cache_dtype": "fp8"},
    ("sglang", "attention nsa fa3+fa3"): _SGLANG_BEST,
    ("sglang", "attention nsa flashmla_sparse+flashmla_kv"): {
        **_SGLANG_32K,
        "attention_backend": "nsa",
        "prefill_attention_backend": "flashmla_sparse",
        "decode_attention_backend": "flashmla_kv",
    },
    ("sglang", "optimized (other workloads)"): _SGLANG_BEST,
    ("trtllm", "baseline"): _TRTLLM,
    ("trtllm", "TP+EP"): {**_TRTLLM, "ep": 8, "pp": 1},
    ("trtllm", "DeepGEMM off"): {**_TRTLLM, "ep": 8, "pp": 1, "deep_gemm": False},
}


@dataclass(frozen=True)
class SeedRun:
    engine: str
    experiment: str
    config: ServerConfig
    measured_total: float


def sharegpt_runs() -> list[SeedRun]:
    """The seed study's ShareGPT runs: engine, experiment, configuration and measured total throughput."""
    with SEED_RESULTS.open() as file:
        rows = [row for row in csv.DictReader(file) if row["workload"] == "sharegpt"]
    return [SeedRun(r["engine"], r["experiment"], ServerConfig(**SEED_CONFIGS[(r["engine"], r["experiment"])]),
                    float(r["total_token_throughput"])) for r in rows]  # fmt: skip


@lru_cache(maxsize=1)
def sharegpt_like_requests() -> tuple[BenchRequest, ...]:
    return tuple(build_requests(SHAREGPT_LIKE, word_tokenizer()))


def simulated_total(config: ServerConfig, token_cost_s: float | None = None) -> float:
    """Simulated total token throughput (tok/s) of ``config`` on the seed's node; 0 when it would not start."""
    try:
        profile = analytic_profile(config, SEED_NODE, token_cost_s)
    except StartupFailure:
        return 0.0
    requests = list(sharegpt_like_requests())
    records, duration = simulate(profile, requests, [0.0] * len(requests), None)
    return sum((r.prompt_len or 0) + (r.output_tokens or 0) for r in records if r.success) / duration
