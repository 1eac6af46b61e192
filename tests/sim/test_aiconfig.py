"""The aiconfigurator performance model (optional extra): configurations map onto its estimate call, its failures
become failure kinds. Skipped where the extra is not installed (849 MB; not in CI)."""

from __future__ import annotations

import pytest

from autotune.config import ServerConfig
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.aiconfig import AiconfiguratorModel
from autotune.space.schema import Workload
from autotune.testing.sim import H200X8, V32

pytest.importorskip("aiconfigurator", reason="needs the aiconfigurator extra: pip install 'autotune[aiconfigurator]'")
WORKLOAD = Workload(dataset="random", input_len=4000, output_len=200, num_prompts=64, max_concurrency=64)


def estimate(**knobs) -> dict:
    return AiconfiguratorModel(ServerConfig(model=V32, **knobs), H200X8).evaluate(WORKLOAD, [None] * 64, "m")


def test_layouts_and_speculative_decoding_are_estimated() -> None:
    tp8 = estimate(engine="vllm", tp=8)
    dp8 = estimate(engine="sglang", tp=8, dp=8, dp_attention=True, ep=8)
    mtp = estimate(engine="sglang", tp=8, dp=8, dp_attention=True, ep=8, speculative="mtp:1")
    for result in (tp8, dp8, mtp):
        assert result["output_throughput"] > 0 and result["mean_tpot_ms"] > 0 and result["client"]["simulated"]
    assert mtp["mean_tpot_ms"] < dp8["mean_tpot_ms"]  # accepted draft tokens shorten the time per output token


def test_memory_overflow_is_a_failure_kind() -> None:
    long = Workload(dataset="random", input_len=32000, output_len=100, num_prompts=1024, max_concurrency=1024)
    config = ServerConfig(model=V32, engine="trtllm", tp=8, dp_attention=True, ep=8)
    with pytest.raises(StartupFailure) as failure:
        AiconfiguratorModel(config, H200X8).evaluate(long, [None] * 1024, "m")
    assert failure.value.kind in (FailureKind.OOM, FailureKind.NO_DATA)
