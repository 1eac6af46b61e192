"""Issue #48: the static rule ``weights-fit`` must not refuse a layout the engine serves. vLLM shards an MoE model's
experts over its whole DP × TP group when expert parallelism is off ("the expert layers will by default form a
(DP x TP) sized tensor parallel group"), so DeepSeek-V3 at tp=2, dp=4 without EP fits on 8 × H200 (it was
refused as "~345 GB of weights per GPU"); SGLang's DP without DP-attention is whole replicas, where it does not."""

from __future__ import annotations

import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from tests.conftest import H200X8

V3 = "deepseek-ai/DeepSeek-V3"


def _check(**knobs) -> None:
    config = ServerConfig.model_validate({"model": V3, **knobs})
    get_engine(config.engine).check(config, H200X8)


def test_vllm_spreads_the_experts_over_dp_times_tp_without_expert_parallel() -> None:
    _check(engine="vllm", engine_version="0.13.0", tp=2, dp=4)
    _check(engine="vllm", engine_version="0.13.0", tp=1, dp=8)


def test_vllm_without_data_parallel_still_needs_the_gpus_for_its_weights() -> None:
    with pytest.raises(UnsupportedConfig) as caught:
        _check(engine="vllm", engine_version="0.13.0", tp=2)
    assert caught.value.rule == "weights-fit" and "GB of weights per GPU" in caught.value.reason


def test_sglang_data_parallel_without_dp_attention_replicates_the_model() -> None:
    with pytest.raises(UnsupportedConfig) as caught:
        _check(engine="sglang", engine_version="0.5.6.post2", tp=2, dp=4)
    assert caught.value.rule == "weights-fit"
