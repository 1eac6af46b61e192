"""`autotune init`: a space for a dense model, an MoE model and DeepSeek-V3.2 that validates, whose defaults and
offered layouts pass the static rules, and that holds what applies to the model (and nothing that does not)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.engines import get_engine
from autotune.errors import UsageError
from autotune.space.files import parse_space
from autotune.space.init import Request, write_space
from autotune.space.schema import TiedParam
from tests.conftest import local_llama

ENGINES = ("vllm", "sglang", "trtllm")
runner = CliRunner()


def written(model: str, **changes):
    request = Request(**{"model": model, "gpus": 8, "gpu_memory_gb": 141, "engines": ENGINES} | changes)
    text = write_space(request)
    return text, yaml.safe_load(text), parse_space(text, f"init {model}")


def layouts(data: dict, engine: str) -> list[dict]:
    return data["engines"][engine]["params"]["layout"]["tied"]


@pytest.mark.parametrize(
    "model", ["meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3.2"]
)
def test_defaults_and_every_offered_layout_pass_the_static_rules(model) -> None:
    _, data, space = written(model, slo=("p99_tpot_ms=50",))
    for engine in ENGINES:
        adapter = get_engine(engine)
        adapter.check(space.default_point(engine).server, space.hardware)  # raises UnsupportedConfig if refused
        tied = space.engine_params(engine)[f"{engine}.layout"]
        assert isinstance(tied, TiedParam)
        knobs = {knob for layout in tied.tied for knob in layout}
        for layout in tied.tied:
            config = space.default_point(engine).server.model_copy(update=dict.fromkeys(knobs) | layout)
            adapter.check(config, space.hardware)
        assert data["engines"][engine]["fixed"]["model"] == model
    assert space.objective.slo == {"p99_tpot_ms": 50.0}
    assert [level["max_concurrency"] for level in space.load_levels("vllm")] == [16, 32, 64, 128, 256, 512]


def test_deepseek_v32_holds_the_seed_studys_best_layouts() -> None:
    text, data, space = written("deepseek-ai/DeepSeek-V3.2")
    assert {"tp": 8, "dp": 8, "dp_attention": True} in layouts(data, "sglang")
    assert {"tp": 8} in layouts(data, "vllm")
    argv = get_engine("vllm").launch_spec(space.default_point("vllm").server).argv
    assert argv[argv.index("-tp") + 1] == "8"
    # MoE with MLA, sparse attention and an MTP head: expert parallel, DP attention, sparse backends, MTP
    assert any(layout.get("ep") == 8 for layout in layouts(data, "trtllm"))
    assert data["engines"]["vllm"]["params"]["attention_backend"]["choices"] == [None, "FLASHMLA_SPARSE"]
    assert "mtp:1" in data["engines"]["sglang"]["params"]["speculative"]["choices"]
    assert "built-in profile" in text and "sparse attention" in text


def test_dense_model_gets_tensor_parallel_copies_and_no_moe_or_mtp_knobs() -> None:
    _, data, _ = written("meta-llama/Llama-3.3-70B-Instruct")
    for engine in ENGINES:
        offered = layouts(data, engine)
        assert offered and all("ep" not in layout and "dp_attention" not in layout for layout in offered)
        assert "speculative" not in data["engines"][engine]["params"]
    # 141 GB of bf16 weights do not leave room for KV on one 141 GB GPU: the smallest copy is tp=2, four of them
    assert layouts(data, "vllm")[0] == {"tp": 2, "dp": 4}
    assert all(layout["tp"] >= 2 for layout in layouts(data, "sglang"))
    contexts = data["params"]["max_model_len"]["choices"]
    assert contexts[0] is None and all(c <= 131072 for c in contexts[1:])


def test_moe_model_gets_expert_parallel_and_dp_attention() -> None:
    _, data, _ = written("Qwen/Qwen3-235B-A22B")
    assert {"tp": 8, "ep": 8} in layouts(data, "sglang")
    assert {"tp": 1, "dp": 8, "ep": 8, "dp_attention": True} in layouts(data, "vllm")
    assert "speculative" not in data["engines"]["vllm"]["params"]  # Qwen3 has no MTP head
    assert all(c < 40960 for c in data["params"]["max_model_len"]["choices"][1:])  # within its 40960 positions


def test_a_local_config_json_is_read_and_named_as_the_source(tmp_path) -> None:
    model = local_llama(tmp_path / "my-model", 32768)
    text, data, _ = written(str(model), engines=("vllm",))
    assert f"{model}/config.json" in text
    assert layouts(data, "vllm")[0] == {"tp": 1, "dp": 8}
    assert all(c < 32768 for c in data["params"]["max_model_len"]["choices"][1:])


def test_sharegpt_workload_and_the_simulate_section() -> None:
    _, _, space = written("deepseek-ai/DeepSeek-V3.2", workload="sharegpt")
    assert space.workload.dataset == "sharegpt" and space.workload.path and space.simulate is None
    # simulated, ShareGPT is random prompts of its mean lengths: the file a user must fetch is not needed to try it
    text, _, space = written("deepseek-ai/DeepSeek-V3.2", workload="sharegpt", simulate=True)
    assert (space.workload.dataset, space.workload.input_len, space.workload.output_len) == ("random", 219, 197)
    assert "SIMULATED: ShareGPT is random prompts of its mean lengths" in text
    assert space.simulate is not None and space.simulate.mode == "direct"


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [({"model": "nobody/unknown-model"}, "no built-in profile"), ({"engines": ("tgi",)}, "--engine tgi"),
     ({"workload": "random:10"}, "--workload random:10"), ({"slo": ("p99_tpot=50",)}, "--slo p99_tpot=50"),
     ({"slo": ("p99_tpot_ms=fast",)}, "--slo p99_tpot_ms=fast"), ({"gpus": 1, "gpu_memory_gb": 80}, "does not fit")],
)  # fmt: skip
def test_bad_input_names_the_value_and_the_fix(changes, fragment) -> None:
    request = {"model": "deepseek-ai/DeepSeek-V3.2", "gpus": 8, "gpu_memory_gb": 141, "engines": ("vllm",)} | changes
    with pytest.raises(UsageError) as error:
        write_space(Request(**request))
    assert fragment in str(error.value) and "fix:" in str(error.value)


def test_cli_writes_a_file_that_space_show_sizes(tmp_path) -> None:
    out = tmp_path / "my.yaml"
    args = ["init", "--model", "Qwen/Qwen3-30B-A3B", "--gpus", "8", "--gpu-memory-gb", "141", "--engine", "vllm",
            "--engine", "sglang", "-o", str(out)]  # fmt: skip
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "launch configurations" in done.stderr
    shown = runner.invoke(app, ["space", "show", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.stdout)
    assert set(summary["engines"]) == {"vllm", "sglang"} and summary["engines"]["vllm"]["size"] > 1
    again = runner.invoke(app, args)  # an existing file is not overwritten without --force
    assert again.exit_code == 2 and "--force" in again.stderr
