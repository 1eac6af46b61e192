"""Static rules: the seed's failures that are knowable before launch are rejected with a reason; valid configs pass."""

from __future__ import annotations

import csv
import json

import pytest

from autotune.config import Hardware, ServerConfig
from autotune.engines import ENGINES, get_engine
from autotune.engines.models import resolve_model
from autotune.errors import FailureKind, UnsupportedConfig
from tests.conftest import DATA, H200X8

V32 = "deepseek-ai/DeepSeek-V3.2"
VLLM_013 = {"engine": "vllm", "engine_version": "0.13.0", "model": V32, "tp": 8}
SGLANG_056 = {"engine": "sglang", "engine_version": "0.5.6.post2", "model": V32, "tp": 8}

# seed-failures.csv, by experiment: the configuration, and the rule expected to reject it (None: only knowable at run
# time, so it must pass the static rules and be classified from the log instead).
SEED_FAILURES = {
    "DCP": ({**VLLM_013, "dcp": 8}, "sparse-dcp"),
    "attention CUTLASS_MLA": ({**VLLM_013, "attention_backend": "CUTLASS_MLA"}, "sparse-attention-backend"),
    "attention FLASHMLA": ({**VLLM_013, "attention_backend": "FLASHMLA"}, "sparse-attention-backend"),
    "attention TRITON_MLA": ({**VLLM_013, "attention_backend": "TRITON_MLA"}, "sparse-attention-backend"),
    "full context with DP8+EP": ({**VLLM_013, "tp": 1, "dp": 8, "ep": 8}, None),
    "DeepGEMM off": ({**SGLANG_056, "deep_gemm": False}, "nsa-needs-deepgemm"),
}


def seed_failures() -> list[dict]:
    with open(DATA / "seed-failures.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("row", seed_failures(), ids=lambda r: f"{r['engine']}-{r['experiment']}")
def test_seed_failures_knowable_before_launch_are_rejected(row: dict) -> None:
    knobs, rule = SEED_FAILURES[row["experiment"]]
    config = ServerConfig.model_validate(knobs)
    engine = get_engine(config.engine)
    if rule is None:
        engine.check(config, H200X8)  # an OOM at full context depends on the KV cache: learned at run time
        assert engine.classify_failure(1, "torch.OutOfMemoryError: CUDA out of memory.") is FailureKind.OOM
        return
    with pytest.raises(UnsupportedConfig) as caught:
        engine.check(config, H200X8)
    assert caught.value.rule == rule
    assert caught.value.reason


def test_seed_failure_table_is_covered() -> None:
    assert {r["experiment"] for r in seed_failures()} == set(SEED_FAILURES)


def test_dcp_is_allowed_where_vllm_fixed_it() -> None:
    get_engine("vllm").check(ServerConfig.model_validate({**VLLM_013, "engine_version": "0.33.0", "dcp": 8}), H200X8)


def test_the_sparse_backend_passes() -> None:
    get_engine("vllm").check(ServerConfig.model_validate({**VLLM_013, "attention_backend": "FLASHMLA_SPARSE"}), H200X8)


def test_seed_best_config_passes() -> None:
    best = {**SGLANG_056, "dp": 8, "dp_attention": True, "attention_backend": "nsa", "max_model_len": 32768}
    get_engine("sglang").check(ServerConfig.model_validate(best), H200X8)


REJECTED = [
    ("gpu-count", {**VLLM_013, "tp": 8, "dp": 2}),
    ("weights-fit", {**VLLM_013, "tp": 4}),
    ("context-within-model", {**VLLM_013, "max_model_len": 200_000}),
    ("batched-tokens-cover-seqs", {**VLLM_013, "max_num_seqs": 1024, "max_num_batched_tokens": 512}),
    ("ep-spans-tp-dp", {**VLLM_013, "ep": 4}),
    ("dp-attention-is-dp-ep", {**VLLM_013, "dp_attention": True}),
    ("dcp-divides-tp", {**VLLM_013, "engine_version": "0.33.0", "dcp": 3}),
    ("speculative-method", {**VLLM_013, "speculative": "eagle:3:1:4"}),
    ("knob-not-supported", {**VLLM_013, "prefill_attention_backend": "fa3"}),
    ("gpu-count", {**SGLANG_056, "dp": 2}),
    ("dp-attention-divides-tp", {**SGLANG_056, "dp": 3, "dp_attention": True}),
    ("ep-divides-tp", {**SGLANG_056, "ep": 3}),
    ("nsa-kv-dtype", {**SGLANG_056, "kv_cache_dtype": "fp8_e5m2"}),
    ("eagle-topk-page-size", {**SGLANG_056, "speculative": "eagle:3:4:8"}),
    ("eagle-draft-tokens", {**SGLANG_056, "speculative": "eagle:3:1:8"}),
    ("dcp-needs-0.5.23", {**SGLANG_056, "dcp": 2}),
    ("context-within-model", {**SGLANG_056, "max_model_len": 200_000}),
    ("knob-not-supported", {**SGLANG_056, "tokenizer_mode": "slow"}),
    ("attention-backend-known", {"engine": "trtllm", "model": V32, "tp": 8, "attention_backend": "FLASHMLA"}),
    ("kv-cache-dtype", {"engine": "trtllm", "model": V32, "tp": 8, "kv_cache_dtype": "fp8_e5m2"}),
    ("dp-is-attention-dp", {"engine": "trtllm", "model": V32, "tp": 8, "dp": 8}),
    ("knob-not-supported", {"engine": "trtllm", "model": V32, "tp": 8, "dtype": "bfloat16"}),
    ("speculative-method", {"engine": "trtllm", "model": V32, "tp": 8, "speculative": "eagle:1:1:2"}),
]


@pytest.mark.parametrize(("rule", "knobs"), REJECTED, ids=[f"{k['engine']}-{r}" for r, k in REJECTED])
def test_rule_rejects(rule: str, knobs: dict) -> None:
    config = ServerConfig.model_validate(knobs)
    with pytest.raises(UnsupportedConfig) as caught:
        get_engine(config.engine).check(config, H200X8)
    assert caught.value.rule == rule
    assert rule in str(caught.value)


def test_sglang_context_override_env_lifts_the_rule() -> None:
    knobs = {**SGLANG_056, "max_model_len": 200_000, "env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}}
    get_engine("sglang").check(ServerConfig.model_validate(knobs), H200X8)


def test_unsupported_knob_is_refused_by_rendering_too() -> None:
    config = ServerConfig(engine="trtllm", model=V32, dtype="bfloat16")
    with pytest.raises(UnsupportedConfig, match="dtype"):
        get_engine("trtllm").launch_spec(config)


def test_unknown_model_gets_no_model_rules(caplog: pytest.LogCaptureFixture) -> None:
    config = ServerConfig(engine="vllm", model="my-org/private-model", tp=8, attention_backend="CUTLASS_MLA", dcp=8)
    caplog.set_level("INFO")
    get_engine("vllm").check(config, H200X8)
    assert resolve_model("my-org/private-model") is None
    assert "no model-specific rules" in caplog.text


def test_cpu_host_skips_gpu_rules() -> None:
    get_engine("vllm").check(ServerConfig(engine="vllm", model=V32, tp=64), Hardware(gpus=0))


def test_model_facts_come_from_a_local_config(tmp_path) -> None:
    model = tmp_path / "DeepSeek-V3.2-local"
    model.mkdir()
    config = {
        "architectures": ["DeepseekV32ForCausalLM"],
        "index_topk": 2048,
        "n_routed_experts": 256,
        "max_position_embeddings": 4096,
    }
    (model / "config.json").write_text(json.dumps(config))
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    info = resolve_model(str(model))
    assert info is not None and info.source == "config.json"
    assert (info.sparse_attention, info.moe, info.max_positions, info.parameter_bytes) == (True, True, 4096, 1000)
    with pytest.raises(UnsupportedConfig, match="context-within-model"):
        get_engine("vllm").check(ServerConfig(engine="vllm", model=str(model), max_model_len=8192), Hardware())


def test_profiles_match_local_checkpoint_names() -> None:
    # The seed served TRT-LLM from /workspace/DeepSeek-v3.2: same model, different case, not a local path here.
    info = resolve_model("/workspace/DeepSeek-v3.2")
    assert info is not None and info.sparse_attention and info.source == "profile"


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_rule_has_a_name_and_description(name: str) -> None:
    rules = get_engine(name).rules
    assert rules and all(rule.name and rule.description for rule in rules)
