"""The seed study's ShareGPT runs as simulator inputs: each run's configuration, its measured total throughput, and a
ShareGPT-like load (1000 prompts at once; input and output lengths uniform around ShareGPT's means, 219 and 197).

Used by the rank-agreement test and by benchmarks/sim_vs_seed.py (which fits TOKEN_COST_S). The simulator itself
never reads these numbers.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from autotune.bench.datasets import BenchRequest, build_requests
from autotune.config import ServerConfig
from autotune.errors import StartupFailure
from autotune.sim.analytic import analytic_profile
from autotune.sim.direct import simulate
from autotune.sim.words import word_tokenizer
from autotune.space import Workload
from tests.conftest import DATA, H200X8
from tests.test_seed_commands import SEED_CONFIGS

SEED_NODE = H200X8  # the seed study's node
SHAREGPT_LIKE = Workload(dataset="random", input_len=219, output_len=197, range_ratio=0.9, num_prompts=1000, seed=42)


@dataclass(frozen=True)
class SeedRun:
    engine: str
    experiment: str
    config: ServerConfig
    measured_total: float


def sharegpt_runs() -> list[SeedRun]:
    with (DATA / "seed-results.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row["workload"] == "sharegpt"]
    return [SeedRun(r["engine"], r["experiment"], ServerConfig(**SEED_CONFIGS[(r["engine"], r["experiment"])]),
                    float(r["total_token_throughput"])) for r in rows]  # fmt: skip


@lru_cache(maxsize=1)
def sharegpt_like_requests() -> tuple[BenchRequest, ...]:
    return tuple(build_requests(SHAREGPT_LIKE, word_tokenizer()))


def simulated_total(config: ServerConfig, token_cost_s: float | None = None) -> float:
    """Simulated total token throughput (tok/s) of ``config`` on the seed's node; 0 when it would not start."""
    try:
        profile = analytic_profile(config, SEED_NODE, token_cost_s)
    except StartupFailure:
        return 0.0
    requests = list(sharegpt_like_requests())
    records, duration = simulate(profile, requests, [0.0] * len(requests), None)
    return sum((r.prompt_len or 0) + (r.output_tokens or 0) for r in records if r.success) / duration
