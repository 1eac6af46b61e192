"""ServerProcess never measures the wrong process, and waits for the GPUs it used (nvidia-smi faked on PATH)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autotune.engines.base import LaunchSpec
from autotune.engines.readiness import lists_model
from autotune.errors import AutotuneError, ServerCrashed, ServerStartTimeout
from autotune.serving.process import (
    ServerProcess,
    free_port,
    gpu_memory_used,
    group_alive,
    wait_gpus_released,
)
from autotune.testing import scripted

SLEEPER = LaunchSpec((sys.executable, "-c", "import time; time.sleep(120)"))


def test_a_port_in_use_is_refused_before_launch(tmp_path) -> None:
    with scripted.serving(tmp_path / "orphan") as orphan:
        server = ServerProcess(SLEEPER, tmp_path / "ours", orphan.port, lists_model("/health", "scripted"))
        with pytest.raises(AutotuneError, match="already in use"):
            server.__enter__()
        assert server.process is None  # nothing was launched


def test_an_orphan_answering_on_our_port_is_not_taken_for_ours(tmp_path) -> None:
    # ours starts (alive, never listens); then another process takes the port and answers every health check
    port = free_port()
    with ServerProcess(SLEEPER, tmp_path / "ours", port, lists_model("/health", "scripted")) as ours:
        with scripted.serving(tmp_path / "orphan", port=port) as orphan, pytest.raises(ServerStartTimeout):
            ours.wait_ready(3)
        assert group_alive(ours.pgid) and not group_alive(orphan.pgid)
    assert not group_alive(ours.pgid)


def test_our_engine_failing_to_bind_while_an_orphan_answers_is_a_crash(tmp_path) -> None:
    port = free_port()
    # the port is taken between our check and the engine's bind: the engine exits while the orphan answers
    late = LaunchSpec(("sh", "-c", f"sleep 2; exec {sys.executable} -m autotune.testing.scripted --port {port}"))
    with (
        ServerProcess(late, tmp_path / "ours", port, lists_model("/health", "scripted")) as ours,
        scripted.serving(tmp_path / "orphan", port=port),
        pytest.raises(ServerCrashed, match="exited with code 1"),
    ):
        ours.wait_ready(30)


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch) -> Path:
    """An nvidia-smi on PATH that reports the lines of ``state`` (``index, MiB``)."""
    state = tmp_path / "gpus.csv"
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat {state}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    return state


def test_gpu_memory_is_read_by_index(fake_gpus) -> None:
    fake_gpus.write_text("0, 512\n1, 80000\n")
    assert gpu_memory_used() == {"0": 512, "1": 80000}


def test_waits_until_the_launchs_memory_is_released(fake_gpus) -> None:
    # GPU 1 is another tenant's (held before the launch too): not ours to wait for; GPU 0 is freed at the 4th reading
    readings = ["0, 130000\n1, 50000\n"] * 3 + ["0, 600\n1, 50000\n"]
    calls = fake_gpus.parent / "calls"
    for number, reading in enumerate(readings, 1):
        Path(f"{fake_gpus}.{number}").write_text(reading)
    tool = fake_gpus.parent / "bin" / "nvidia-smi"  # the n-th call reports reading n (the last one from then on)
    tool.write_text(f"#!/bin/sh\necho x >> {calls}\nn=$(wc -l < {calls})\n"
                    f"[ $n -gt {len(readings)} ] && n={len(readings)}\ncat {fake_gpus}.$n\n")  # fmt: skip
    assert wait_gpus_released({"0": 400, "1": 50000}, timeout_s=300)
    assert len(calls.read_text().splitlines()) == 4  # it waited through the 3 readings with GPU 0 held, no longer


def test_memory_never_released_is_reported_not_waited_forever(fake_gpus, caplog) -> None:
    fake_gpus.write_text("0, 130000\n")
    assert not wait_gpus_released({"0": 0}, timeout_s=1)
    assert "still held" in caplog.text
