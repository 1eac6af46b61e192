"""`autotune command`, `space show` and the not-yet study command, end to end through the CLI."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.conftest import SPACES, provide_first_launch_needs

runner = CliRunner()
DEEPSEEK = str(SPACES / "deepseek-v32-h200x8.yaml")
TINY = str(SPACES / "vllm-cpu-tiny.yaml")


def run(*args: str):
    return runner.invoke(app, list(args))


def test_command_from_nothing_as_json() -> None:
    result = run("command", "--set", "engine=vllm", "--set", "model=deepseek-ai/DeepSeek-V3.2", "--set", "tp=8",
                 "--set", "cuda_graph=false", "--gpus", "8", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "argv": ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "8", "--enforce-eager"],
        "env": {},
        "files": {},
    }


def test_command_from_a_space_uses_its_baseline_and_version() -> None:
    result = run("command", DEEPSEEK, "--set", "engine=sglang", "--set", "dp=8", "--set", "dp_attention=true")
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3.2"]
    assert "--enable-dp-attention" in argv  # 0.5.6.post2 spelling, from the space's version
    assert argv[argv.index("--reasoning-parser") + 1] == "deepseek-v3"


def test_command_refuses_with_the_rule() -> None:
    result = run("command", DEEPSEEK, "--set", "engine=vllm", "--set", "layout=x")
    assert result.exit_code == 2  # layout is a group name in the space, not a knob
    result = run("command", DEEPSEEK, "--set", "engine=vllm", "--set", "dcp=8")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "sparse-dcp" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_command_gpus_option_overrides_the_space() -> None:
    result = run("command", DEEPSEEK, "--set", "engine=vllm", "--gpus", "4")
    assert result.exit_code == 1
    assert "gpu-count" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--set", "engine=vllm", "--set", "model=m", "--set", "tp=zero"], "tp=zero"),
        (["--set", "engine=vllm", "--set", "model=m", "--set", "tensor_parallel=2"], "unknown knob"),
        (["--set", "engine=vllm", "--set", "model=m", "--set", "tp"], "key=value"),
        (["--set", "engine=tgi", "--set", "model=m"], "engine"),
        (["--set", "engine=vllm"], "model"),
        ([DEEPSEEK], "pick one with --set engine"),
        ([DEEPSEEK, "--set", "engine=trtllm", "--set", "env=[1, 2]"], "env"),
        ([DEEPSEEK, "--set", "engine=vllm", "--set", "chat_template=--evil"], "chat_template"),
    ],
)
def test_command_usage_errors(args: list[str], fragment: str) -> None:
    result = run("command", *args)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.output
    assert line.startswith("autotune: error:") and "fix:" in line and fragment in line


def test_unknown_model_is_said() -> None:
    result = run("command", "--set", "engine=vllm", "--set", "model=my-org/secret-model")
    assert result.exit_code == 0
    assert "no model-specific rules" in result.stderr


NASTY = './tmpl dir/it\'s "quoted"; rm -rf x $(touch pwned) `id`'


def test_values_never_reach_a_shell(tmp_path) -> None:
    printer = f"{sys.executable} -c 'import json,sys; print(json.dumps(sys.argv[1:]))'"
    args = ["command", "--set", "engine=trtllm", "--set", "model=/models/m", "--set", f"chat_template={NASTY}",
            "--set", "cuda_graph=false", "--set", "env={A: \"x; echo pwned\"}", "--executable", printer]  # fmt: skip
    as_json = json.loads(run(*args, "--json").stdout)
    assert NASTY in as_json["argv"]  # one argv element, verbatim
    script = run(*args).stdout
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == as_json["argv"][3:]  # the shell script runs exactly that argv
    assert not (tmp_path / "pwned").exists()
    assert (tmp_path / "extra_llm_api_options.yaml").read_text() == as_json["files"]["extra_llm_api_options.yaml"]


def test_space_show_json() -> None:
    result = run("space", "show", TINY, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    vllm = summary["engines"]["vllm"]
    assert vllm["size"] == 96 and vllm["loads"] == 2 and vllm["rejected_by_rules"]["exact"]
    assert vllm["version"] == "0.32.0"
    assert "batched-tokens-cover-seqs" in vllm["rules"]
    assert vllm["params"]["max_num_seqs"] == "choices [4, 16, 64, 128] (default 4)"


def test_space_show_estimates_large_spaces() -> None:
    result = run("space", "show", DEEPSEEK, "--json")
    summary = json.loads(result.stdout)
    vllm = summary["engines"]["vllm"]
    assert not vllm["rejected_by_rules"]["exact"] and vllm["rejected_by_rules"]["rejected"] > 0
    assert summary["engines"]["trtllm"]["rejected_by_rules"]["exact"]


def test_space_show_prints_tables() -> None:
    result = run("space", "show", DEEPSEEK)
    assert result.exit_code == 0
    assert (
        "sparse-attention-backend" in result.stdout and "size: 270000 launch configurations × 1 loads" in result.stdout
    )


def test_debug_shows_the_traceback(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DEBUG", "1")
    result = run("command", "--set", "engine=tgi", "--set", "model=m")
    assert result.exit_code != 0 and result.exception is not None and not isinstance(result.exception, SystemExit)


def test_console_script_runs(tmp_path, monkeypatch) -> None:
    provide_first_launch_needs(tmp_path, monkeypatch, Path(TINY))  # its model directory and tokenizer, from here
    done = subprocess.run([sys.executable, "-m", "autotune", "space", "validate", TINY], capture_output=True, text=True)
    assert done.returncode == 0 and "valid" in done.stdout
