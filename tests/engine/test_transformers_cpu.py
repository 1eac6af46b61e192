"""The transformers adapter against the real `transformers serve` (transformers 5.19 in the vLLM-CPU venv, on CPU,
the tiny model): its commands parse with transformers' own CLI, a launch is ready and measured through autotune's
launch path (no /v1/models naming the model, no ignore_eos), and flash_attention_2 fails as `unsupported`."""

from __future__ import annotations

import json
import subprocess

import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, LaunchFailed
from autotune.serving.process import group_alive
from autotune.serving.seam import Launch
from autotune.space.schema import Workload
from tests.engine.conftest import VLLM_CPU

pytestmark = pytest.mark.engine
TRANSFORMERS = VLLM_CPU / "venv" / "bin" / "transformers"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
# what transformers' own parser makes of the argv (its CLI is a Typer app: click parses it, nothing runs)
PARSE = """
import json, sys
from transformers.cli.transformers import app
out = []
for argv in json.loads(sys.argv[1]):
    try:
        out.append({"ok": True, "params": app.commands["serve"].make_context("serve", argv).params})
    except Exception as exc:
        out.append({"ok": False, "error": str(exc)})
print(json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def transformers_cli(vllm_cpu_python):
    done = subprocess.run([str(vllm_cpu_python), "-c", "import accelerate, fastapi, uvicorn"], capture_output=True)
    if done.returncode != 0 or not TRANSFORMERS.exists():
        pytest.skip("transformers serve needs accelerate, fastapi and uvicorn in the vLLM-CPU venv "
                    "(re-run scripts/setup-vllm-cpu.sh)")  # fmt: skip
    return TRANSFORMERS


def tiny(**knobs) -> ServerConfig:
    return ServerConfig(engine="transformers", model=str(VLLM_CPU / "tiny"), extra_args=("--device", "cpu"), env=ENV,
                        **knobs)  # fmt: skip


def test_commands_parse_with_transformers_own_cli(transformers_cli, vllm_cpu_python) -> None:
    engine = get_engine("transformers")
    configs = [tiny(), tiny(continuous_batching=True, cuda_graph=True, attention_backend="sdpa", dtype="bfloat16",
                            max_num_batched_tokens=512, kv_cache_blocks=256, gpu_memory_utilization=0.5),
               tiny(continuous_batching=True, cuda_graph=False, torch_compile=True)]  # fmt: skip
    argvs = [list(engine.launch_spec(c, port=8000).argv[2:]) for c in configs] + [["m", "--no-such-flag"]]
    done = subprocess.run([str(vllm_cpu_python), "-c", PARSE, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=300, check=True)  # fmt: skip
    plain, full, compiled, wrong = json.loads(done.stdout.strip().splitlines()[-1])
    assert not wrong["ok"]  # the parser can refuse: the check can fail
    assert plain["ok"] and not plain["params"]["continuous_batching"] and plain["params"]["port"] == 8000
    params = full["params"]
    assert (params["continuous_batching"], params["cb_use_cuda_graph"], params["attn_implementation"]) == (
        True, True, "sdpa")  # fmt: skip
    assert (params["cb_max_batch_tokens"], params["cb_num_blocks"], params["cb_max_memory_percent"]) == (512, 256, 0.5)
    assert (params["dtype"], params["force_model"], params["device"]) == ("bfloat16", str(VLLM_CPU / "tiny"), "cpu")
    assert compiled["params"]["compile"] and compiled["params"]["cb_use_cuda_graph"] is False


def test_a_real_launch_is_ready_and_measured_then_flash_attention_2_is_unsupported(transformers_cli, tmp_path) -> None:
    engine = get_engine("transformers", [str(transformers_cli)])
    workload = Workload(dataset="random", input_len=32, output_len=8, num_prompts=8, max_concurrency=4,
                        endpoint="/v1/chat/completions")  # fmt: skip
    # a bounded KV pool: on CPU the default share of "device memory" is a share of the host's RAM (20 GB here)
    cb = tiny(continuous_batching=True, kv_cache_blocks=64, max_num_batched_tokens=256)
    with Launch(engine, cb, tmp_path / "cb") as launch:
        launch.wait_ready(240)  # /health, then a one-token completion (its /v1/models lists the hub cache)
        result = launch.measure(workload)
    assert result.completed == 8 and result.failed == 0 and result.output_throughput > 0
    assert not group_alive(launch.pgid)
    with Launch(engine, tiny(attention_backend="flash_attention_2"), tmp_path / "fa2") as launch, \
            pytest.raises(LaunchFailed) as failed:  # fmt: skip
        launch.wait_ready(240)
    assert failed.value.kind is FailureKind.UNSUPPORTED, failed.value.evidence[-500:]


def test_doctor_reads_the_installed_version(transformers_cli) -> None:
    from autotune.cli.doctor import _engine_check

    check = _engine_check("transformers", [str(transformers_cli)], simulated=False)
    assert check["ok"] and check["detail"].split()[-2:][0] == "version" and check["detail"].split()[-1][0] == "5"
