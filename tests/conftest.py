from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config import Hardware

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"
DATA = Path(__file__).resolve().parent / "data"
H200X8 = Hardware(gpus=8, gpu_memory_gb=141, gpu="H200")


@pytest.fixture
def h200x8() -> Hardware:
    return H200X8
