"""Engine adapters: version-aware rendering, TRT-LLM's options file, failure classification, the contract."""

from __future__ import annotations

import pytest
import yaml

from autotune.config import ServerConfig
from autotune.engines import ENGINES, get_engine
from autotune.engines.trtllm import EXTRA_OPTIONS_FILE
from autotune.errors import FailureKind, UnsupportedConfig, UsageError

V32 = "deepseek-ai/DeepSeek-V3.2"


def render(**knobs):
    config = ServerConfig.model_validate({"model": V32, **knobs})
    return get_engine(config.engine).launch_spec(config)


def test_vllm_attention_backend_is_env_before_014_and_flag_after() -> None:
    old = render(engine="vllm", engine_version="0.13.0", attention_backend="FLASHMLA_SPARSE")
    new = render(engine="vllm", engine_version="0.14.0", attention_backend="FLASHMLA_SPARSE")
    assert old.env == {"VLLM_ATTENTION_BACKEND": "FLASHMLA_SPARSE"} and "--attention-backend" not in old.argv
    assert new.env == {} and new.argv[-2:] == ("--attention-backend", "FLASHMLA_SPARSE")


def test_sglang_0_5_23_renames() -> None:
    knobs = dict(
        engine="sglang", tp=8, dp=8, dp_attention=True, prefill_attention_backend="fa3", cuda_graph=False, dcp=2
    )
    new = render(engine_version="0.5.23", **knobs).argv
    assert new[new.index("--attn-dp-size") :][:2] == ("--attn-dp-size", "8")
    assert "--dsa-prefill-backend" in new and "--nsa-prefill-backend" not in new
    assert "--cuda-graph-backend-decode" in new and "--disable-cuda-graph" not in new
    assert "--dcp-size" in new and "--enable-dp-attention" not in new
    knobs.pop("dcp")
    old = render(engine_version="0.5.6.post2", **knobs).argv
    assert {"--enable-dp-attention", "--nsa-prefill-backend", "--disable-cuda-graph"} <= set(old)
    assert "--attn-dp-size" not in old


def test_sglang_kv_fp8_is_e4m3() -> None:
    argv = render(engine="sglang", kv_cache_dtype="fp8").argv
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"


def test_speculative_rendering_per_engine() -> None:
    vllm = render(engine="vllm", speculative="mtp:2").argv
    assert vllm[vllm.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":2}'
    sglang = render(engine="sglang", speculative="eagle:3:1:4").argv
    assert sglang[sglang.index("--speculative-num-steps") :][:6] == (
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    )  # fmt: skip
    assert render(engine="sglang", speculative="none").argv == render(engine="sglang").argv


def test_trtllm_options_file() -> None:
    spec = render(engine="trtllm", tp=8, dp=8, dp_attention=True, attention_backend="flashinfer", kv_cache_dtype="fp8_e4m3",
                  cuda_graph=False, speculative="mtp:3")  # fmt: skip
    assert spec.argv[-2:] == ("--extra_llm_api_options", EXTRA_OPTIONS_FILE)
    assert yaml.safe_load(spec.files[EXTRA_OPTIONS_FILE]) == {
        "enable_attention_dp": True,
        "attn_backend": "FLASHINFER",
        "kv_cache_config": {"dtype": "fp8"},
        "cuda_graph_config": None,
        "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3},
    }
    assert render(engine="trtllm", tp=8).files == {}


def test_vllm_tool_parser_brings_auto_tool_choice() -> None:
    argv = render(engine="vllm", tool_call_parser="deepseek_v32").argv
    assert "--enable-auto-tool-choice" in argv  # vLLM: "--enable-auto-tool-choice requires --tool-call-parser"


def test_unset_knobs_render_nothing() -> None:
    assert render(engine="vllm").argv == ("vllm", "serve", V32)
    assert render(engine="sglang").argv == ("python3", "-m", "sglang.launch_server", "--model-path", V32)
    assert render(engine="trtllm").argv == ("trtllm-serve", V32)


def test_host_and_port_only_when_asked() -> None:
    config = ServerConfig(engine="vllm", model=V32)
    spec = get_engine("vllm").launch_spec(config, port=8123)
    assert spec.argv[-4:] == ("--host", "127.0.0.1", "--port", "8123")


def test_extra_args_and_env_come_last_and_win() -> None:
    config = ServerConfig(
        engine="vllm", model=V32, deep_gemm=False, extra_args=("--seed", "7"), env={"VLLM_USE_DEEP_GEMM": "1"}
    )
    spec = get_engine("vllm").launch_spec(config)
    assert spec.argv[-2:] == ("--seed", "7")
    assert spec.env == {"VLLM_USE_DEEP_GEMM": "1"}


def test_executable_comes_from_the_caller() -> None:
    config = ServerConfig(engine="vllm", model="tiny")
    spec = get_engine("vllm", ["/opt/venv/bin/python", "vllm_cli.py"]).launch_spec(config)
    assert spec.argv == ("/opt/venv/bin/python", "vllm_cli.py", "serve", "tiny")


def test_adapter_refuses_a_config_of_another_engine() -> None:
    with pytest.raises(UnsupportedConfig):
        get_engine("sglang").launch_spec(ServerConfig(engine="vllm", model=V32))


def test_unknown_engine_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="vllm, sglang, trtllm"):
        get_engine("tgi")


# Real messages from engines.md §6 and the CPU runs of vllm-cpu.md.
FAILURES = [
    (
        "vllm",
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. Reason: ['sparse not supported']",
        FailureKind.UNSUPPORTED,
    ),
    (
        "vllm",
        "AssertionError: DCP requires attention impls to return the softmax lse for decode",
        FailureKind.UNSUPPORTED,
    ),
    (
        "vllm",
        "ValueError: To serve at least one request with the models's max seq len (163840), (20.5 GiB KV cache is needed",
        FailureKind.OOM,
    ),
    (
        "vllm",
        "ValueError: max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)",
        FailureKind.UNSUPPORTED,
    ),
    ("vllm", "Unknown attention backend: 'FOO'. Valid options are: FLASH_ATTN", FailureKind.BAD_FLAG),
    ("vllm", "vllm: error: unrecognized arguments: --swap-space 4", FailureKind.BAD_FLAG),
    ("vllm", "NotImplementedError: Unsupported speculative method: 'mtp'", FailureKind.UNSUPPORTED),
    ("vllm", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", FailureKind.OOM),
    ("sglang", "launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8'", FailureKind.BAD_FLAG),
    (
        "sglang",
        "ValueError: DeepSeek NSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype",
        FailureKind.UNSUPPORTED,
    ),
    ("sglang", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", FailureKind.OOM),
    ("sglang", "Currently standalone speculative decoding does not support dp attention.", FailureKind.UNSUPPORTED),
    ("sglang", "OSError: [Errno 98] Address already in use", FailureKind.PORT_IN_USE),
    (
        "trtllm",
        "pydantic_core._pydantic_core.ValidationError: enable_atention_dp Extra inputs are not permitted",
        FailureKind.BAD_FLAG,
    ),
    ("trtllm", "ValueError: DSA cache requires block reuse to be disabled in KV cache config", FailureKind.UNSUPPORTED),
    ("trtllm", "RuntimeError: NCCL error in: ... unhandled system error", FailureKind.NCCL),
    ("vllm", "Segmentation fault (core dumped)", FailureKind.CRASH),
]


@pytest.mark.parametrize(("engine", "log_tail", "kind"), FAILURES, ids=[f"{e}-{k}" for e, _, k in FAILURES])
def test_classify_failure(engine: str, log_tail: str, kind: FailureKind) -> None:
    assert (
        get_engine(engine).classify_failure(1, f"INFO starting\n{log_tail}\nEngine core initialization failed.") is kind
    )


def test_classify_failure_without_a_message_uses_the_exit() -> None:
    engine = get_engine("vllm")
    assert engine.classify_failure(-9, "INFO loading weights") is FailureKind.OOM  # the kernel's OOM killer
    assert engine.classify_failure(137, "") is FailureKind.OOM
    assert engine.classify_failure(1, "INFO loading weights") is FailureKind.CRASH
    assert engine.classify_failure(-9, "OSError: [Errno 98] Address already in use") is FailureKind.PORT_IN_USE


# knobs each engine renders as values (transformers serve has no tp, max_num_seqs or max_model_len)
CONTRACT_KNOBS = {
    "transformers": {"continuous_batching": True, "max_num_batched_tokens": 256, "kv_cache_blocks": 32768}
}


@pytest.mark.parametrize("name", list(ENGINES))
def test_contract_rendering_is_pure_and_argv_only(name: str) -> None:
    knobs = CONTRACT_KNOBS.get(name, {"tp": 8, "max_num_seqs": 256, "max_model_len": 32768})
    config = ServerConfig(engine=name, model=V32, cuda_graph=False, **knobs)
    engine = get_engine(name)
    first, second = engine.launch_spec(config, port=9000), engine.launch_spec(config, port=9000)
    assert first == second
    assert all(isinstance(token, str) for token in first.argv)
    assert {"256", "32768"} <= set(first.argv)
