"""The metric names a space may name: an objective's (throughputs, latencies) and an SLO's (latencies, in ms).

They are vllm bench serve's result fields (``autotune.bench.results.BenchmarkResult``); a space's objective, its
SLOs and a mix's per-class SLOs (``autotune.space.mix``) are checked against them when the space is read.

Each metric has one kind, and its kind alone says which way is better (``direction``): an objective that leaves the
direction out takes it from there, and one that states the other is refused (a latency maximised would search for
the slowest server).
"""

from __future__ import annotations

from typing import Literal, get_args

ThroughputMetric = Literal[
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s"
]
LatencyMetric = Literal[
    tuple(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p90", "p99"))
]
Direction = Literal["maximize", "minimize"]
MetricKind = Literal["throughput", "latency"]

# The one place a kind's better way is declared: rates (tokens, requests, goodput per second) up, times down.
KIND_DIRECTION: dict[MetricKind, Direction] = {"throughput": "maximize", "latency": "minimize"}
_KIND_OF: dict[str, MetricKind] = {
    **dict.fromkeys(get_args(ThroughputMetric), "throughput"),
    **dict.fromkeys(get_args(LatencyMetric), "latency"),
}


def metric_kind(name: str) -> MetricKind:
    """Whether ``name`` is a throughput or a latency (a name of neither ``Literal`` raises ``KeyError``)."""
    return _KIND_OF[name]


def metric_direction(name: str) -> Direction:
    """The way ``name`` gets better: ``"maximize"`` a throughput, ``"minimize"`` a latency."""
    return KIND_DIRECTION[metric_kind(name)]


def metric_unit(name: str) -> str:
    """The unit a value of ``name`` is printed with: ``tok/s``, ``req/s`` or ``ms`` ('' for a name of neither kind,
    e.g. a mix's ratio)."""
    kind = _KIND_OF.get(name)
    if kind == "latency":
        return "ms"
    if kind == "throughput":
        return "req/s" if name.startswith("request_") else "tok/s"
    return ""
