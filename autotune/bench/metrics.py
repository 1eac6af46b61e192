"""Per-request records → vllm bench serve's metrics, result JSON (its --save-result field names) and printed block."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from autotune.bench.client import RequestRecord
from autotune.bench.results import BenchmarkResult

LATENCY_METRICS = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)",
                   "itl": "Inter-token Latency", "e2el": "End-to-end Latency"}  # fmt: skip
JSON_PERCENTILES = (50, 90, 99)
# The client's timestamps are late by the event loop's lag; when the typical lag exceeds this share of the median ITL
# (or 1 ms when there is no ITL) the measurement describes the client, not the server.
SATURATION_SHARE, SATURATION_FLOOR_MS = 0.05, 1.0


def _stats(values: list[float], percentiles: Sequence[float]) -> dict[str, float]:
    data = np.asarray(values or [0.0]) * 1000
    out = {"mean": float(np.mean(data)), "median": float(np.median(data)), "std": float(np.std(data))}
    for p in percentiles:
        out[f"p{int(p) if float(p).is_integer() else p}"] = float(np.percentile(data, p))
    return out


def _per_second_peaks(records: list[RequestRecord]) -> tuple[float, int]:
    """Most output events in one 1-second bucket, and most requests active in one bucket (vllm bench's peaks)."""
    if not records:
        return 0.0, 0
    first = min(r.start_time for r in records)
    seconds = math.ceil(max(r.start_time + r.latency for r in records) - first) + 1
    tokens, active = np.zeros(seconds), np.zeros(seconds)
    for r in records:
        times = r.start_time + r.ttft + np.concatenate(([0.0], np.cumsum(r.itl)))
        buckets = (times - first).astype(int)
        np.add.at(tokens, buckets[(buckets >= 0) & (buckets < seconds)], 1)
        active[int(r.start_time - first) : int(r.start_time + r.latency - first) + 1] += 1
    return float(tokens.max()), int(active.max())


def compute_metrics(
    records: Sequence[RequestRecord],
    duration: float,
    goodput: dict[str, float] | None = None,
    percentiles: Sequence[float] = (99,),
) -> dict:
    """vllm bench serve's metrics for ``records`` over ``duration`` seconds.

    Args:
        goodput: SLOs in ms by metric (``ttft``, ``tpot``, ``e2el``): requests meeting all of them count as good.
        percentiles: percentiles reported besides 50/90/99.
    """
    done = [r for r in records if r.success]
    output_lens = [r.output_tokens if r.output_tokens else r.token_events for r in done]
    input_total = sum(r.prompt_len or 0 for r in done)
    tpots = [(r.latency - r.ttft) / (n - 1) for r, n in zip(done, output_lens, strict=True) if n > 1]
    all_tpots = [(r.latency - r.ttft) / (n - 1) if n > 1 else 0.0 for r, n in zip(done, output_lens, strict=True)]
    values = {"ttft": [r.ttft for r in done], "tpot": tpots, "itl": [x for r in done for x in r.itl],
              "e2el": [r.latency for r in done]}  # fmt: skip
    peak_tokens, peak_active = _per_second_peaks(done)
    result: dict = {
        "duration": duration,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": input_total,
        "total_output_tokens": sum(output_lens),
        "request_throughput": len(done) / duration,
        "request_goodput": _good(done, all_tpots, goodput) / duration if goodput else None,
        "output_throughput": sum(output_lens) / duration,
        "total_token_throughput": (input_total + sum(output_lens)) / duration,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
    }
    for name, samples in values.items():
        for stat, value in _stats(samples, sorted({*JSON_PERCENTILES, *percentiles})).items():
            result[f"{stat}_{name}_ms"] = value
    result["errors_by_type"] = dict(Counter(r.error_type for r in records if not r.success))
    return result


def _good(done: list[RequestRecord], tpots: list[float], slo_ms: dict[str, float]) -> int:
    per_request = {"ttft": [r.ttft for r in done], "tpot": tpots, "e2el": [r.latency for r in done]}
    checks = [(per_request[name], limit / 1000) for name, limit in slo_ms.items()]
    return sum(all(values[i] <= limit for values, limit in checks) for i in range(len(done)))


def client_health(lags: Sequence[float], median_itl_ms: float) -> dict:
    """Whether the client kept its timing. Its timestamps are late by the event loop's lag, so the typical (median)
    lag is compared with the scale of what is measured; p99 and max are reported for the tails."""
    lag_ms = np.asarray(lags or [0.0]) * 1000
    p50, p99 = (float(v) for v in np.percentile(lag_ms, [50, 99]))
    allowed = max(SATURATION_FLOOR_MS, SATURATION_SHARE * median_itl_ms)
    return {"event_loop_lag_p50_ms": p50, "event_loop_lag_p99_ms": p99, "event_loop_lag_max_ms": float(lag_ms.max()),
            "allowed_lag_ms": allowed, "saturated": p50 > allowed}  # fmt: skip


def per_request_lists(records: Sequence[RequestRecord]) -> dict:
    """The per-request arrays vllm bench saves with its result."""
    return {
        "input_lens": [r.prompt_len for r in records],
        "output_lens": [(r.output_tokens or r.token_events) if r.success else 0 for r in records],
        "ttfts": [r.ttft for r in records],
        "itls": [r.itl for r in records],
        "latencies": [r.latency for r in records],
        "start_times": [r.start_time for r in records],
        "errors": [r.error or "" for r in records],
    }


def format_block(result: BenchmarkResult | Mapping, percentiles: Sequence[float] = (99,)) -> str:
    """The result as vllm bench serve prints it (labels left-justified to 40 characters)."""
    if isinstance(result, BenchmarkResult):
        result = result.to_vllm_json()
    rows = ["{:=^50}".format(" Serving Benchmark Result ")]

    def row(label: str, value: object, number: bool = True) -> None:
        rows.append(f"{label:<40} {value:<10.2f}" if number else f"{label:<40} {value!s:<10}")

    row("Successful requests:", result["completed"], False)
    row("Failed requests:", result["failed"], False)
    if result.get("max_concurrency") is not None:
        row("Maximum request concurrency:", result["max_concurrency"], False)
    if result.get("request_rate", "inf") != "inf":
        row("Request rate configured (RPS):", result["request_rate"])
    row("Benchmark duration (s):", result["duration"])
    row("Total input tokens:", result["total_input_tokens"], False)
    row("Total generated tokens:", result["total_output_tokens"], False)
    row("Request throughput (req/s):", result["request_throughput"])
    if result["request_goodput"] is not None:
        row("Request goodput (req/s):", result["request_goodput"])
    row("Output token throughput (tok/s):", result["output_throughput"])
    row("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"])
    row("Peak concurrent requests:", result["max_concurrent_requests"])
    row("Total token throughput (tok/s):", result["total_token_throughput"])
    for name, header in LATENCY_METRICS.items():
        if name == "e2el":
            continue  # vllm bench's default --percentile-metrics is ttft,tpot,itl
        short = name.upper()
        rows.append(f"{header:-^50}")
        row(f"Mean {short} (ms):", result[f"mean_{name}_ms"])
        row(f"Median {short} (ms):", result[f"median_{name}_ms"])
        for p in percentiles:
            word = str(int(p)) if float(p).is_integer() else str(p)
            row(f"P{word} {short} (ms):", result[f"p{word}_{name}_ms"])
    rows.append("=" * 50)
    return "\n".join(rows)


def result_header(model: str, tokenizer: str | None, num_prompts: int, rate: float, burstiness: float,
                  max_concurrency: int | None) -> dict:  # fmt: skip
    """The descriptive fields that open vllm bench's result JSON."""
    return {"date": datetime.now().strftime("%Y%m%d-%H%M%S"), "backend": "openai", "model_id": model,
            "tokenizer_id": tokenizer, "num_prompts": num_prompts, "request_rate": rate, "burstiness": burstiness,
            "max_concurrency": max_concurrency}  # fmt: skip
