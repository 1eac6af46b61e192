"""Spread one benchmark's load over worker processes when one event loop cannot keep up.

Request i goes to shard i mod n with its own send time; every shard starts at the same ``perf_counter`` instant
(CLOCK_MONOTONIC is system-wide on Linux, so the processes' clocks agree) and sends each finished record back.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Sequence

from autotune.bench.client import ClientOptions, RequestRecord, run_requests
from autotune.bench.datasets import BenchRequest

_START_DELAY_S = 2.0  # time for spawned shards to import before the common start
_CTX = multiprocessing.get_context("spawn")  # not fork: the parent may hold threads (the progress bar)


def _shard_main(options, requests, offsets, indexes, concurrency, start_at, results) -> None:
    def done(local: int, record: RequestRecord) -> None:
        results.put(("done", indexes[local], record))

    _, lags, start, end = asyncio.run(run_requests(options, requests, offsets, concurrency, start_at, done))
    results.put(("end", lags, start, end))


def _split(total: int | None, shards: int, shard: int) -> int | None:
    return None if total is None else max(1, total // shards + (1 if shard < total % shards else 0))


def run_sharded(
    options: ClientOptions,
    requests: Sequence[BenchRequest],
    offsets: Sequence[float],
    max_concurrency: int | None,
    shards: int,
    on_done: Callable[[int, RequestRecord], None] | None = None,
) -> tuple[list[RequestRecord], list[float], float, float]:
    """``client.run_requests`` over ``shards`` processes (concurrency split between them); records in request order."""
    results = _CTX.Queue()
    start_at = time.perf_counter() + _START_DELAY_S
    workers = []
    for shard in range(shards):
        indexes = list(range(shard, len(requests), shards))
        args = (options, [requests[i] for i in indexes], [offsets[i] for i in indexes], indexes,
                _split(max_concurrency, shards, shard), start_at, results)  # fmt: skip
        workers.append(_CTX.Process(target=_shard_main, args=args, daemon=True))
    for worker in workers:
        worker.start()
    records: list[RequestRecord | None] = [None] * len(requests)
    lags: list[float] = []
    ends: list[float] = []
    try:
        while len(ends) < shards:
            message = results.get(timeout=options.request_timeout_s + 60)
            if message[0] == "done":
                _, index, record = message
                records[index] = record
                if on_done:
                    on_done(index, record)
            else:
                lags += message[1]
                ends.append(message[3])
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
    return [r for r in records if r is not None], lags, start_at, max(ends)
