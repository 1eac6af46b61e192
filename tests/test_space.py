"""Search spaces: the shipped files load, suggest valid points through Optuna, and enumerate what they promise."""

from __future__ import annotations

import optuna
import pytest

from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from autotune.space.files import load_space, parse_space
from tests.conftest import SPACES

SHIPPED = sorted(SPACES.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_space_is_documented_at_its_top(path) -> None:
    head = path.read_text().splitlines()[:5]
    assert all(line.startswith("#") for line in head)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_optuna_suggests_valid_points(path) -> None:
    space = load_space(path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen_engines = set()
    for _ in range(40):
        trial = study.ask()
        point = space.suggest(trial)
        seen_engines.add(point.server.engine)
        assert point.server.engine_version == space.engines[point.server.engine].version
        # the stored params rebuild the same point: what `study best` will rely on
        assert space.point_from_params(trial.params) == point
        assert all(not name.partition(".")[1] or name.startswith(point.server.engine + ".") for name in trial.params)
        if _passes(space, point):
            assert get_engine(point.server.engine).launch_spec(point.server, port=8000).argv
        study.tell(trial, 1.0)
    assert seen_engines == set(space.engines)


def _passes(space, point) -> bool:
    try:
        get_engine(point.server.engine).check(point.server, space.hardware)
    except UnsupportedConfig:
        return False
    return True


def test_deepseek_space_covers_the_seed_dimensions() -> None:
    space = load_space(SPACES / "deepseek-v32-h200x8.yaml")
    assert set(space.engines) == {"vllm", "sglang", "trtllm"}
    knobs = set(space.params)
    for section in space.engines.values():
        for name, param in section.params.items():
            knobs |= {k for option in param.tied for k in option} if hasattr(param, "tied") else {name}
    seed = {"tp", "dp", "ep", "dp_attention", "dcp", "speculative", "deep_gemm", "tool_call_parser", "max_model_len",
            "kv_cache_dtype", "attention_backend", "prefill_attention_backend", "decode_attention_backend"}  # fmt: skip
    left_out = {"max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "cuda_graph"}
    assert seed | left_out <= knobs


def test_baselines_are_the_seed_step_1_launches() -> None:
    space = load_space(SPACES / "deepseek-v32-h200x8.yaml")
    baselines = {engine: space.default_point(engine).server for engine in space.engines}
    assert {engine: cfg.tp for engine, cfg in baselines.items()} == {"vllm": 8, "sglang": 8, "trtllm": 8}
    assert baselines["vllm"].knobs() == {
        "engine": "vllm", "engine_version": "0.13.0", "model": "deepseek-ai/DeepSeek-V3.2", "tp": 8,
        "reasoning_parser": "deepseek_v3", "tokenizer_mode": "deepseek_v32",
    }  # fmt: skip


def test_tiny_space_enumerates_its_size_and_defaults_to_the_slow_config() -> None:
    space = load_space(SPACES / "vllm-cpu-tiny.yaml")
    points = list(space.enumerate("vllm", launches_only=True))
    assert len(points) == space.launch_size("vllm") == 96 and space.size("vllm") == 96 * 2  # × 2 loads, swept
    assert len({p.server.model_dump_json() for p in points}) == 96
    assert space.load_levels("vllm") == [{"max_concurrency": 16}, {"max_concurrency": 64}]
    assert "max_concurrency" not in space.launch_params("vllm")
    default = space.default_point("vllm").server
    assert (default.max_num_seqs, default.dtype, default.cuda_graph, default.speculative) == (4, "float32", False, None)


MINIMAL = """
engines:
  vllm: {fixed: {model: m}}
params:
  layout: {tied: [{tp: 1}, {tp: 2, dp: 2}], default: {tp: 1}}
  max_concurrency: {choices: [8, 64], default: 8}
  gpu_memory_utilization: {float: [0.5, 0.9], default: 0.9}
  max_num_seqs: {int: [8, 512], log: true, default: 256}
"""


def test_tied_options_and_client_knobs() -> None:
    space = parse_space(MINIMAL)
    point = space.point("vllm", {"layout": "tp=2,dp=2", "max_concurrency": 64, "max_num_seqs": 32})
    assert (point.server.tp, point.server.dp, point.server.max_num_seqs) == (2, 2, 32)
    assert point.client == {"max_concurrency": 64}
    assert space.size("vllm") == float("inf")
    study = optuna.create_study()
    trial = study.ask()
    point = space.suggest(trial)
    assert isinstance(trial.distributions["max_num_seqs"], optuna.distributions.IntDistribution)
    assert trial.distributions["max_num_seqs"].log
    assert 0.5 <= point.server.gpu_memory_utilization <= 0.9
