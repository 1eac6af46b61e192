"""A mix's result per request class (``dataset: mix``): the metrics of each class's requests, and their lines.

The requests of a mix name their class (``BenchRequest.request_class``) and the client keeps its records in request
order, so a class's records are picked by position after the run: nothing is added to the client's hot path. A
class's rates are over the whole benchmark's duration (the classes shared it), so they add up to the overall.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.bench.client import RequestRecord
from autotune.bench.datasets import BenchRequest
from autotune.bench.metrics import compute_metrics
from autotune.bench.results import BenchmarkResult
from autotune.space.schema import Workload


def class_metrics(workload: Workload, requests: Sequence[BenchRequest], records: Sequence[RequestRecord],
                  duration: float, goodput: dict[str, float] | None = None,
                  percentiles: Sequence[float] = (99,)) -> dict:  # fmt: skip
    """``{"classes": [...]}``, one entry per class of a mix (name, share, requests sent, metrics), for a result's
    JSON; ``{}`` for a workload that is not a mix. ``records[i]`` is the record of ``requests[i]``."""
    if workload.classes is None:
        return {}
    weight = sum(c.share for c in workload.classes)
    classes = []
    for request_class in workload.classes:
        own = [record for request, record in zip(requests, records, strict=True)
               if request.request_class == request_class.name]  # fmt: skip
        entry = {"name": request_class.name, "share": request_class.share / weight, "num_prompts": len(own)}
        classes.append(entry | compute_metrics(own, duration, goodput, percentiles))
    return {"classes": classes}


def format_classes(result: BenchmarkResult, workload: Workload | None = None,
                   slo: dict[str, float] | None = None) -> str:  # fmt: skip
    """The classes of a mix's result, one block each after vllm bench's (``metrics.format_block``); with
    ``workload``, each class's own SLO, met or missed. ``''`` when the result has no classes."""
    rows: list[str] = []

    def row(label: str, value: object) -> None:
        rows.append(f"{label:<40} {value:<10.2f}" if isinstance(value, float) else f"{label:<40} {value!s:<10}")

    total = sum(c.num_prompts or 0 for c in result.classes or [])
    for entry in result.classes or []:
        rows.append(f"{f' Class {entry.name} ':-^50}")
        row("Requests sent (share):", f"{entry.num_prompts} of {total} ({entry.share:.1%})")
        row("Successful requests:", entry.completed)
        row("Failed requests:", entry.failed)
        row("Request throughput (req/s):", entry.request_throughput)
        row("Output token throughput (tok/s):", entry.output_throughput)
        row("Total token throughput (tok/s):", entry.total_token_throughput)
        for name in ("ttft", "tpot", "itl", "e2el"):
            row(f"Mean / P99 {name.upper()} (ms):", f"{entry.metric(f'mean_{name}_ms'):.2f} / "
                                                  f"{entry.metric(f'p99_{name}_ms'):.2f}")  # fmt: skip
    if workload is not None:
        for check in result.slo_checks(workload, slo or {}):
            row(f"SLO {check.key[4:]}:", f"{'missed' if check.missed else 'met'} ({check.text()})")
    if rows:
        rows.append("=" * 50)
    return "\n".join(rows)
