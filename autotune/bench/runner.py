"""One benchmark run: build the requests, warm up, send the load (in one process or sharded), compute the result."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from tokenizers import Tokenizer

from autotune.bench.client import ClientOptions, RequestRecord, arrival_offsets, run_requests
from autotune.bench.datasets import BenchRequest, build_requests
from autotune.bench.metrics import client_health, compute_metrics, per_request_lists, result_header
from autotune.bench.mix import class_metrics
from autotune.bench.results import BenchmarkResult
from autotune.bench.shards import run_sharded
from autotune.bench.steady import SteadyWindow, steady_window
from autotune.space.schema import Workload

_WARMUP_SEED_OFFSET = 1_000_003  # warm-up prompts differ from the measured ones, so they do not prime prefix caches


@dataclass(frozen=True)
class Progress:
    """Running state at a checkpoint: counts so far, the metrics of the requests finished so far (from the first
    request sent: what an SLO lost part-way is judged on) and those of the steady-state window (after the ramp-up:
    what the pruner judges, ``autotune.bench.steady``; None while it is too short)."""

    finished: int
    total: int
    elapsed_s: float
    metrics: dict
    steady: SteadyWindow | None = None


ProgressHook = Callable[[Progress], None]


class _Checkpoints:
    """Calls the hook each time another ``every`` share of the requests has finished, on a thread of its own.

    Why a thread: a study's hook writes to its storage and asks the pruner (tens of milliseconds on SQLite); run in
    the event loop, it would stall every stream while it ran and the trial would measure a slower server than the
    one there (seen as a study's throughput 6% under `autotune bench`'s on the same server). What the hook raises (a
    pruned trial, a lost SLO) is raised in the loop at the next finished request, or by ``finish``.
    """

    def __init__(self, total: int, hook: ProgressHook | None, every: float) -> None:
        self.total, self.hook = total, hook
        self.marks = sorted({max(1, math.ceil(total * every * k)) for k in range(1, int(1 / every) + 1)})
        self.done: list[RequestRecord] = []
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="bench-progress") if hook else None
        self.calls: list[Future] = []

    def __call__(self, index: int, record: RequestRecord) -> None:
        self.done.append(record)
        self._raise_failed()
        if self.worker and self.marks and len(self.done) >= self.marks[0]:
            self.marks.pop(0)
            elapsed = time.perf_counter() - min(r.start_time for r in self.done)
            self.calls.append(self.worker.submit(self._report, list(self.done), elapsed))

    def _report(self, done: list[RequestRecord], elapsed: float) -> None:
        running = compute_metrics(done, max(elapsed, 1e-9))
        self.hook(Progress(len(done), self.total, elapsed, running, steady_window(done, self.total)))

    def _raise_failed(self) -> None:
        for call in self.calls:
            if call.done() and call.exception() is not None:
                raise call.exception()

    def finish(self) -> None:
        """Wait for the hook's last calls (the final checkpoint comes with the last request); raise what it raised."""
        if self.worker:
            self.worker.shutdown(wait=True)
            self._raise_failed()


def run_benchmark(
    options: ClientOptions,
    workload: Workload,
    tokenizer: Tokenizer | None,
    *,
    seed: int | None = None,
    goodput: dict[str, float] | None = None,
    percentiles: tuple[float, ...] = (99,),
    shards: int = 1,
    on_progress: ProgressHook | None = None,
    checkpoint_every: float = 0.1,
    include_requests: bool = True,
    tokenizer_id: str | None = None,
    requests: list[BenchRequest] | None = None,
) -> BenchmarkResult:
    """Run ``workload`` against the server of ``options`` and return vllm bench's result (plus ``client``).

    Args:
        seed: overrides the workload's seed (use a new one per repeat).
        goodput: SLOs in ms (``ttft``/``tpot``/``e2el``) for request_goodput.
        shards: worker processes for the load (1: this process).
        on_progress: called at every ``checkpoint_every`` share of finished requests, with running metrics.
        include_requests: add vllm bench's per-request lists (ttfts, itls, ...).
        requests: the workload's requests, built beforehand (so that sending starts at once).
    """
    seed = workload.seed if seed is None else seed
    requests = requests if requests is not None else build_requests(workload, tokenizer, seed)
    if workload.warmup_requests:
        warm = workload.model_copy(update={"num_prompts": workload.warmup_requests})
        warmup = build_requests(warm, tokenizer, seed + _WARMUP_SEED_OFFSET, every_class=False)
        asyncio.run(run_requests(options, warmup, [0.0] * len(warmup), workload.max_concurrency))
    offsets = arrival_offsets(len(requests), workload.request_rate, workload.burstiness, seed)
    checkpoints = _Checkpoints(len(requests), on_progress, checkpoint_every)
    try:
        if shards > 1:
            records, lags, start, end = run_sharded(
                options, requests, offsets, workload.max_concurrency, shards, checkpoints
            )
        else:
            records, lags, start, end = asyncio.run(
                run_requests(options, requests, offsets, workload.max_concurrency, on_done=checkpoints)
            )
    finally:
        checkpoints.finish()
    rate = workload.request_rate
    result = result_header(options.model, tokenizer_id, len(requests), rate if rate != math.inf else "inf",
                           workload.burstiness, workload.max_concurrency)  # fmt: skip
    result |= compute_metrics(records, end - start, goodput, percentiles)
    result["client"] = client_health(lags, result["median_itl_ms"]) | {"shards": shards}
    if include_requests:
        result |= per_request_lists(records)
    result |= class_metrics(workload, requests, records, end - start, goodput, percentiles)
    return BenchmarkResult.from_vllm_json(result)
