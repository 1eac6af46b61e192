"""On a real NVIDIA GPU: the memory a launch took is given back before the next launch starts.

The "engine" here is a process that takes 70% of the GPU's free memory with PyTorch and holds it (what an engine's
weights and KV pool do); two of them at once would not fit, so the second launch succeeds only if the first one's
memory was released. Skipped where there is no nvidia-smi or no CUDA PyTorch (CI; run it on a GPU machine).
"""

from __future__ import annotations

import shutil
import sys
import time

import pytest

from autotune.engines.base import LaunchSpec
from autotune.engines.readiness import lists_model
from autotune.serving.process import ServerProcess, free_port, gpu_memory_used

pytestmark = pytest.mark.gpu
HOLD = ("import sys, time, torch; x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device='cuda');"
        " x.fill_(1); torch.cuda.synchronize(); print('holding', flush=True); time.sleep(600)")  # fmt: skip


@pytest.fixture
def free_gib() -> float:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("needs an NVIDIA GPU (no nvidia-smi here)")
    torch = pytest.importorskip("torch", reason="needs PyTorch with CUDA to take GPU memory")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    free, _ = torch.cuda.mem_get_info(0)
    return free / 2**30


def _wait_holding(server: ServerProcess, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.alive():
        if "holding" in server.log_path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def test_a_launchs_memory_is_released_before_the_next_launch(free_gib, tmp_path) -> None:
    gib = round(0.7 * free_gib, 1)
    gpu = next(iter(gpu_memory_used()))
    spec = LaunchSpec((sys.executable, "-c", HOLD, str(gib)), env={"CUDA_VISIBLE_DEVICES": gpu})
    for launch in range(2):
        server = ServerProcess(spec, tmp_path / str(launch), free_port(), lists_model("/health", "-"))
        with server:
            assert _wait_holding(server), server.log_tail()  # the second launch too: no out-of-memory
            held_mib = gpu_memory_used()[gpu] - server.gpus_before[gpu]
            assert held_mib >= 0.9 * gib * 1024, held_mib
        after = gpu_memory_used()[gpu]
        print(f"launch {launch}: held {held_mib} MiB; after stop {after} MiB (before {server.gpus_before[gpu]})")
        assert after <= server.gpus_before[gpu] + 1024
