"""On a GPU with transformers serve (run by benchmarks/gpu_study.sh checks): an induced CUDA out-of-memory launch is
classified `oom`, and `autotune bench` agrees with a second, independent client on the same server.

    OUT=/tmp/out benchmarks/gpu_study.sh checks

1. A second server, with a fixed KV pool, on a card whose first server's KV pool already fills it.
2. The same load (96 chat requests of 128 tokens in, 64 out, 64 at a time), after a warm-up run, measured twice
   with `autotune bench` and twice with a second client, alternately: plain httpx streaming the same requests,
   tokens counted as the content chunks it receives (the server sends no usage when streaming), time from its own
   clock. Prints each output tok/s and the ratio autotune / second client (the anchor, in the same run).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.bench.datasets import build_requests  # noqa: E402
from autotune.errors import LaunchFailed  # noqa: E402
from autotune.search.backends import anchored_paths, engine_for  # noqa: E402
from autotune.serving.seam import Launch  # noqa: E402
from autotune.space.files import load_space  # noqa: E402

SPACE = load_space("transformers-h200")
ENGINE = engine_for(SPACE, "transformers")
BASE = anchored_paths(SPACE.default_point("transformers").server)
FAST = BASE.model_copy(update={"continuous_batching": True, "cuda_graph": True})
LOAD = SPACE.workload.model_copy(update={"max_concurrency": 64})


def induced_oom(name: str, config, workdir: Path) -> str:
    """Launch ``config`` and benchmark it; the failure kind it ends with."""
    launch = Launch(ENGINE, config, workdir / name.replace(" ", "-"))
    try:
        with launch:
            launch.wait_ready(90)
            launch.measure(LOAD)
    except LaunchFailed as failed:
        gpus = launch.gpu_facts()
        print(f"{name}: {failed.kind.value} ({failed.reason[:160]}); GPU MiB before/after {gpus.get('before')} "
              f"{gpus.get('after')} released {gpus.get('released')}", flush=True)  # fmt: skip
        print("  its log ends: " + " | ".join(launch.server.log_tail().splitlines()[-12:])[-1500:], flush=True)
        return failed.kind.value
    print(f"{name}: no failure (not induced)", flush=True)
    return "none"


def autotune_bench(base_url: str, tokenizer: str) -> float:
    argv = [sys.executable, "-m", "autotune", "bench", "--base-url", base_url, "--model", FAST.api_model_name,
            "--tokenizer", tokenizer, "--endpoint", LOAD.endpoint, "--dataset", "random", "--input-len",
            str(LOAD.input_len), "--output-len", str(LOAD.output_len), "--num-prompts", str(LOAD.num_prompts),
            "--max-concurrency", "64", "--seed", str(LOAD.seed), "--engine", "transformers", "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout)["output_throughput"]


async def second_client(base_url: str, prompts: list[str]) -> float:
    """Output tokens per second over the run: content chunks received, this client's clock, 64 requests at a time."""
    limit, tokens = asyncio.Semaphore(64), []

    async def one(client: httpx.AsyncClient, prompt: str) -> None:
        body = {"model": FAST.api_model_name, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": LOAD.output_len, "stream": True}  # fmt: skip
        async with limit, client.stream("POST", "/v1/chat/completions", json=body) as answer:
            answer.raise_for_status()
            chunks = 0
            async for line in answer.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:]).get("choices", [{}])[0].get("delta", {})
                    chunks += bool(delta.get("content"))
            tokens.append(chunks)

    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=httpx.Limits(max_connections=64)) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one(client, p) for p in prompts))
        return sum(tokens) / (time.perf_counter() - started)


def agreement(workdir: Path) -> None:
    """After one unmeasured warm-up run: autotune bench and the second client alternately, twice each."""
    with Launch(ENGINE, FAST, workdir / "agreement") as launch:
        launch.wait_ready(SPACE.startup_timeout_s)
        prompts = [r.prompt for r in build_requests(LOAD, ENGINE.tokenizer(FAST))]
        warmup = autotune_bench(launch.base_url, FAST.model)
        ours, other = [], []
        for _ in range(2):
            other.append(asyncio.run(second_client(launch.base_url, prompts)))
            ours.append(autotune_bench(launch.base_url, FAST.model))
    ratio = sum(ours) / sum(other)
    print(f"warm-up {warmup:.1f}; autotune bench output tok/s: {', '.join(f'{v:.1f}' for v in ours)}; second client: "
          f"{', '.join(f'{v:.1f}' for v in other)}; ratio autotune / second client: {ratio:.3f}", flush=True)  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        full = FAST.model_copy(update={"gpu_memory_utilization": 0.9})
        with Launch(ENGINE, full, workdir / "first") as first:
            first.wait_ready(SPACE.startup_timeout_s)
            first.measure(LOAD)  # its KV pool is allocated at the first requests: now it holds the card
            # a second server whose KV pool (40,000 blocks of 32 KiB per token) cannot fit beside the first one's
            induced_oom("second server on a full card", FAST.model_copy(update={"kv_cache_blocks": 40_000}), workdir)
        if "oom-only" not in sys.argv:
            agreement(workdir)


if __name__ == "__main__":
    main()
