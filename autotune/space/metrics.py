"""The metric names a space may name: an objective's (throughputs, latencies) and an SLO's (latencies, in ms).

They are vllm bench serve's result fields (``autotune.bench.results.BenchmarkResult``); a space's objective, its
SLOs and a mix's per-class SLOs (``autotune.space.mix``) are checked against them when the space is read.
"""

from __future__ import annotations

from typing import Literal

ThroughputMetric = Literal[
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s"
]
LatencyMetric = Literal[
    tuple(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p90", "p99"))
]
