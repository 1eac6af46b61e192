"""Every command of the seed study (seed-results.csv) is reproduced from a ServerConfig: same argv up to flag order,
same values, same environment."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from tests.conftest import DATA

V32 = "deepseek-ai/DeepSeek-V3.2"
VLLM = {
    "engine": "vllm",
    "engine_version": "0.13.0",
    "model": V32,
    "tokenizer_mode": "deepseek_v32",
    "reasoning_parser": "deepseek_v3",
}
SGLANG = {"engine": "sglang", "engine_version": "0.5.6.post2", "model": V32}
SGLANG_TEMPLATE = {**SGLANG, "chat_template": "./tool_chat_template_deepseekv32.jinja"}
SGLANG_DPA = {**SGLANG_TEMPLATE, "tp": 8, "dp": 8, "dp_attention": True}
SGLANG_PARSERS = {**SGLANG_DPA, "reasoning_parser": "deepseek-v3", "tool_call_parser": "deepseekv32"}
SGLANG_32K = {**SGLANG_PARSERS, "max_model_len": 32768}
SGLANG_BEST = {
    **SGLANG_32K,
    "attention_backend": "nsa",
    "prefill_attention_backend": "fa3",
    "decode_attention_backend": "fa3",
}
TRTLLM = {"engine": "trtllm", "engine_version": "1.2.0rc5", "model": "/workspace/DeepSeek-v3.2", "tp": 8}

# (engine, experiment) -> the canonical knobs of that run, written by hand from the seed study's text.
SEED_CONFIGS: dict[tuple[str, str], dict] = {
    ("vllm", "baseline"): {**VLLM, "tp": 8},
    ("vllm", "parallel DP+EP"): {**VLLM, "tp": 1, "dp": 8, "ep": 8, "dp_attention": True, "max_model_len": 81920},
    ("vllm", "MTP"): {**VLLM, "tp": 8, "speculative": "mtp:1"},
    ("vllm", "DeepGEMM off"): {**VLLM, "tp": 8, "deep_gemm": False},
    ("vllm", "tool-call parser"): {**VLLM, "tp": 8, "tool_call_parser": "deepseek_v32"},
    ("vllm", "context 32768"): {**VLLM, "tp": 8, "max_model_len": 32768},
    ("vllm", "baseline (other workloads)"): {**VLLM, "tp": 8},
    ("sglang", "baseline"): {**SGLANG_TEMPLATE, "tp": 8},
    ("sglang", "TP+DP-attention"): {**SGLANG_TEMPLATE, "tp": 8, "dp_attention": True},
    ("sglang", "TP+DP+DP-attention"): SGLANG_DPA,
    ("sglang", "TP+DP+DP-attention+EP"): {**SGLANG_DPA, "ep": 8},
    ("sglang", "MTP (EAGLE)"): {**SGLANG, "tp": 8, "speculative": "mtp:1"},
    ("sglang", "tool-call parser (+DP8 DP-attention)"): SGLANG_PARSERS,
    ("sglang", "context 32768"): SGLANG_32K,
    # the engine-neutral "fp8" is SGLang's fp8_e4m3 (SGLang has no plain fp8)
    ("sglang", "KV cache fp8_e4m3"): {**SGLANG_32K, "kv_cache_dtype": "fp8"},
    ("sglang", "attention nsa fa3+fa3"): SGLANG_BEST,
    ("sglang", "attention nsa flashmla_sparse+flashmla_kv"): {
        **SGLANG_32K,
        "attention_backend": "nsa",
        "prefill_attention_backend": "flashmla_sparse",
        "decode_attention_backend": "flashmla_kv",
    },
    ("sglang", "optimized (other workloads)"): SGLANG_BEST,
    ("trtllm", "baseline"): TRTLLM,
    ("trtllm", "TP+EP"): {**TRTLLM, "ep": 8, "pp": 1},
    ("trtllm", "DeepGEMM off"): {**TRTLLM, "ep": 8, "pp": 1, "deep_gemm": False},
}

# Other spellings SGLang's argparse accepts for the same option (its docs launch with `--dp 2`; `--model` is an alias
# of `--model-path`). The seed used both spellings; autotune always renders the canonical one.
FLAG_ALIASES = {"sglang": {"--dp": "--dp-size", "--tp": "--tp-size", "--model": "--model-path"}}


def seed_rows() -> list[dict]:
    with open(DATA / "seed-results.csv", newline="") as f:
        return list(csv.DictReader(f))


def argv_shape(engine: str, argv: list[str], executable_len: int) -> tuple[list[str], Counter]:
    """(positionals after the executable, multiset of (flag, values)) with `--flag=value` split and aliases resolved."""
    positionals: list[str] = []
    groups: list[list[str]] = []
    for token in argv[executable_len:]:
        if token.startswith("-"):
            flag, _, value = token.partition("=")
            groups.append([FLAG_ALIASES.get(engine, {}).get(flag, flag)] + ([value] if value else []))
        elif groups:
            groups[-1].append(token)
        else:
            positionals.append(token)
    return positionals, Counter(tuple(g) for g in groups)


def parse_env(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split()) if text else {}


@pytest.mark.parametrize("row", seed_rows(), ids=lambda r: f"{r['engine']}-{r['experiment']}-{r['workload']}")
def test_seed_command_is_reproduced(row: dict) -> None:
    config = ServerConfig.model_validate(SEED_CONFIGS[(row["engine"], row["experiment"])])
    # The CSV shows commands as typed text with the JSON unquoted ({"method":"mtp",...}); no value contains a space,
    # so splitting on whitespace gives the argv the seed ran.
    expected = row["command"].split()
    port = int(expected[expected.index("--port") + 1]) if "--port" in expected else None
    host = expected[expected.index("--host") + 1] if "--host" in expected else "127.0.0.1"
    adapter = get_engine(config.engine)
    executable_len = len(adapter.executable)
    assert expected[:executable_len] == list(adapter.executable)

    spec = adapter.launch_spec(config, port=port, host=host)

    assert spec.argv[:executable_len] == adapter.executable
    assert argv_shape(row["engine"], list(spec.argv), executable_len) == argv_shape(
        row["engine"], expected, executable_len
    )
    assert spec.env == parse_env(row["env"])
    assert spec.files == {}  # none of the seed's runs needed a TRT-LLM options file


def test_every_seed_row_has_a_config() -> None:
    keys = {(r["engine"], r["experiment"]) for r in seed_rows()}
    assert len(seed_rows()) == 29
    assert keys == set(SEED_CONFIGS)


def test_shape_comparison_sees_a_wrong_value() -> None:
    good = ["vllm", "serve", "m", "-tp", "8"]
    assert argv_shape("vllm", good, 1) != argv_shape("vllm", ["vllm", "serve", "m", "-tp", "4"], 1)
    assert argv_shape("vllm", good, 1) != argv_shape("vllm", [*good, "--enforce-eager"], 1)
    assert argv_shape("sglang", ["x", "--dp", "8"], 1) == argv_shape("sglang", ["x", "--dp-size=8"], 1)
