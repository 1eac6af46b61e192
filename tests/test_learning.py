"""Out-of-memory dominance: a configuration is ruled out only when it needs at least the memory of one that ran out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.search.learning import named_params, needs_at_least

MEMORY = {
    "max_model_len": st.sampled_from([None, 4096, 32768, 131072]),
    "max_num_seqs": st.sampled_from([None, 64, 256, 1024]),
    "max_num_batched_tokens": st.sampled_from([None, 2048, 8192, 32768]),
    "gpu_memory_utilization": st.sampled_from([None, 0.8, 0.9, 0.95]),
    "kv_cache_dtype": st.sampled_from([None, "auto", "fp8"]),
    "tp": st.sampled_from([None, 2, 4, 8]),
}
configs = st.fixed_dictionaries(MEMORY).map(lambda knobs: ServerConfig(engine="vllm", model="m", **knobs))
ORDER = {"kv_cache_dtype": {None: 2, "auto": 2, "fp8": 1}}


def _memory_rank(knob: str, value) -> float:
    """Larger = needs more memory (None compares only with None)."""
    if knob in ORDER:
        return ORDER[knob][value]
    if knob == "tp":
        return -(value or 1)
    return -value if knob == "gpu_memory_utilization" else value


@given(configs, configs)
def test_dominance_never_blocks_a_configuration_that_needs_less_memory(oom, candidate) -> None:
    less = any(
        getattr(candidate, k) is not None
        and getattr(oom, k) is not None
        and _memory_rank(k, getattr(candidate, k)) < _memory_rank(k, getattr(oom, k))
        for k in MEMORY
    ) or any(
        k not in ORDER and k != "tp" and (getattr(candidate, k) is None) != (getattr(oom, k) is None) for k in MEMORY
    )
    if less:  # smaller in some memory knob (or not comparable): never ruled out by this failure
        assert not needs_at_least(candidate, oom)


@given(configs)
def test_a_configuration_needs_at_least_its_own_memory(config) -> None:
    assert needs_at_least(config, config)


def test_more_memory_in_every_knob_is_dominated_and_other_knobs_must_match() -> None:
    oom = ServerConfig(engine="vllm", model="m", tp=4, max_num_seqs=256, kv_cache_dtype="fp8", max_model_len=32768)
    hungrier = oom.model_copy(update={"tp": 2, "max_num_seqs": 1024, "kv_cache_dtype": None})
    assert needs_at_least(hungrier, oom)
    assert not needs_at_least(oom.model_copy(update={"max_num_seqs": 64}), oom)
    assert not needs_at_least(oom.model_copy(update={"tp": 8}), oom)  # more GPUs per copy: less each
    assert not needs_at_least(hungrier.model_copy(update={"speculative": "mtp:1"}), oom)  # another knob: unknown
    assert not needs_at_least(hungrier.model_copy(update={"dp": 2}), oom)  # another layout


def test_a_failure_names_the_one_parameter_whose_value_its_error_line_mentions() -> None:
    config = ServerConfig(engine="vllm", model="m", max_num_seqs=16, dtype="bfloat16", speculative="mtp:1")
    params = {
        "max_num_seqs": {"max_num_seqs": 16},
        "dtype": {"dtype": "bfloat16"},
        "speculative": {"speculative": "mtp:1"},
    }
    log = "INFO starting with bfloat16 weights\nNotImplementedError: Unsupported speculative method: 'mtp'\n"
    assert named_params(get_engine("vllm"), config, params, log) == ["speculative"]
    assert named_params(get_engine("vllm"), config, params, "RuntimeError: Engine core initialization failed") == []


def test_a_camel_case_error_names_a_snake_case_value() -> None:
    # transformers serve's words for --attn-implementation flash_attention_2 when flash_attn is not installed
    config = ServerConfig(engine="transformers", model="m", continuous_batching=True, cuda_graph=True,
                          attention_backend="flash_attention_2")  # fmt: skip
    params = {"batching": {"continuous_batching": True, "cuda_graph": True},
              "transformers.attention_backend": {"attention_backend": "flash_attention_2"}}  # fmt: skip
    log = ("ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
           "the package for FlashAttention2 doesn't seem to be installed.")  # fmt: skip
    assert named_params(get_engine("transformers"), config, params, log) == ["transformers.attention_backend"]
