"""The direct mode: the simulated engine and a closed-loop client in one process, in virtual time.

No server and no sockets: requests go straight into the scheduler as the benchmark client would send them (the same
arrival offsets, the same concurrency limit), and their token times become the client's records, so the result is
computed by the same code and has the same fields as a measured one. A study of thousands of trials runs this way.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from autotune.bench.client import RequestRecord, arrival_offsets
from autotune.bench.datasets import BenchRequest
from autotune.bench.metrics import compute_metrics, result_header
from autotune.bench.mix import class_metrics
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.replay import Diverged, RecordingScheduler, ReplayScheduler, Trace
from autotune.sim.scheduler import Scheduler, SimRequest, StepModel
from autotune.space.schema import Workload

_CLIENT_REACTION_S = 1e-9


def simulate(model: StepModel, requests: list[BenchRequest], offsets: list[float], max_concurrency: int | None,
             scheduler: Scheduler | ReplayScheduler | None = None):  # fmt: skip
    """Run ``requests`` (sent at ``offsets``, at most ``max_concurrency`` at once) to completion, by ``scheduler``
    (default: a new one for ``model``; a replay of a recorded schedule under ``model``'s step time).

    Returns:
        (records, duration_s): one RequestRecord per request, in order; virtual seconds from first send to last token.
    """
    scheduler = scheduler or Scheduler(model)
    records = [RequestRecord(r.prompt_len, r.output_len) for r in requests]
    pending = deque(range(len(requests)))
    limit = max_concurrency or math.inf
    now, in_flight, free_since = 0.0, 0, 0.0
    ends: list[float] = []  # each step's end
    emitting: list[list[int]] = [[] for _ in requests]  # each request's steps that emitted its tokens
    while pending or scheduler.busy:
        while pending and in_flight < limit and _send_time(offsets[pending[0]], free_since) <= now:
            index = pending.popleft()
            record, request = records[index], requests[index]
            record.start_time = _send_time(offsets[index], free_since)
            sim = SimRequest(request.prompt_len or 0, request.output_len, handle=index)
            if not scheduler.admissible(sim):
                record.error_type, record.error = "http_400", "longer than the model's context"
                continue
            scheduler.add(sim)
            in_flight += 1
        if not scheduler.busy:
            if pending:
                now = max(now, _send_time(offsets[pending[0]], free_since))
            continue
        duration, events = scheduler.step()
        if duration <= 0 and not events:
            # a real engine refuses such a request (too long for its KV cache): the configuration's failure, recorded
            raise StartupFailure(
                FailureKind.OOM, "a request fits neither the batch nor the KV cache: the simulator made no progress"
            )
        now += duration
        step = len(ends)
        ends.append(now)
        for event in events:
            handle: int = event.request.handle  # type: ignore[assignment]
            emitting[handle].append(step)
            if event.finished:
                records[handle].output_tokens, records[handle].success = event.request.emitted, True
                in_flight -= 1
                if in_flight == limit - 1:
                    free_since = now
    _record_token_times(records, emitting, ends)
    starts = [r.start_time for r in records]
    return records, max(now - min(starts, default=0.0), 1e-9)


def _send_time(offset: float, free_since: float) -> float:
    # A client sends the next request just *after* it read the last token of the one before: that request then waits
    # for the step after the one that starts at that instant, as it does against a server.
    return max(offset, free_since + _CLIENT_REACTION_S)


def _record_token_times(records: list[RequestRecord], emitting: list[list[int]], ends: list[float]) -> None:
    """Each request's token times, as the client records them: the first token's (TTFT) and each gap after it (ITL),
    from the ends of the steps that emitted them. In arrays, once: a benchmark emits tens of thousands of tokens."""
    at = np.asarray(ends)
    for record, steps in zip(records, emitting, strict=True):
        if not steps:
            continue
        elapsed = at[steps] - record.start_time
        record.ttft, record.latency = float(elapsed[0]), float(elapsed[-1])
        record.itl = np.diff(elapsed).tolist()
        record.token_events = len(steps)


def direct_benchmark(model: StepModel, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict:
    """The benchmark result (vllm bench's fields) of ``workload`` on the simulated engine, computed in-process.

    A benchmark equivalent to one already run (same step time, same ``_schedule_key``) is not run again, and one
    whose schedule was stepped under another step time is that schedule retimed (``autotune.sim.replay``): the
    prior predicts hundreds of configurations that differ only in knobs the model ignores, in limits these few
    requests never reach, or in what only times a step."""
    offsets = arrival_offsets(len(requests), workload.request_rate, workload.burstiness, workload.seed)
    if not _reusing:
        records, duration = simulate(model, requests, offsets, workload.max_concurrency)
        measured = compute_metrics(records, duration) | class_metrics(workload, requests, records, duration)
        return _result(workload, requests, model_name, measured)
    schedule = _schedule_key(model, workload, requests, offsets)
    key = (model.timing_key(), schedule, tuple((c.name, c.share) for c in workload.classes or ()))
    if key not in _MEASURED:
        try:
            records, duration = _simulate_retiming(model, requests, offsets, workload.max_concurrency, schedule)
            _MEASURED[key] = compute_metrics(records, duration) | class_metrics(workload, requests, records, duration)
        except StartupFailure as failure:  # deterministic too: an equivalent configuration fails alike
            _MEASURED[key] = failure
        _bound(_MEASURED, _MEASURED_KEPT)
    measured = _MEASURED[key]
    if isinstance(measured, StartupFailure):
        raise StartupFailure(measured.kind, str(measured))
    return _result(workload, requests, model_name, measured)


def _result(workload: Workload, requests: list[BenchRequest], model_name: str, measured: dict) -> dict:
    rate = workload.request_rate
    result = result_header(model_name, "simulated-words", len(requests), rate if rate != math.inf else "inf",
                           workload.burstiness, workload.max_concurrency)  # fmt: skip
    result |= measured
    if "classes" in measured:  # a mix's classes: lists of results, the caller's to change (the rest are numbers)
        result["classes"] = copy.deepcopy(measured["classes"])
    result["client"] = {"simulated": True, "mode": "direct", "saturated": False}
    return result


@contextmanager
def without_reuse() -> Iterator[None]:
    """Every benchmark simulated afresh inside: the straightforward computation the reuse is checked against
    (tests/study/test_ranking_speed.py, benchmarks/ranking_time.py)."""
    global _reusing
    before, _reusing = _reusing, False
    try:
        yield
    finally:
        _reusing = before


_reusing = True
_MEASURED: OrderedDict[tuple, dict | StartupFailure] = OrderedDict()  # metrics by equivalence key, oldest first
_MEASURED_KEPT = 4096  # a ranking's distinct benchmarks fit many times over; a long simulated study's stay bounded
_TRACES: OrderedDict[tuple, Trace] = OrderedDict()  # recorded schedules by ``_schedule_key``, oldest first
# a ranking's schedules fit (a two-workload DeepSeek space: 96 of 32 requests, 1.2 million); a simulated study's of
# a thousand requests each keep the last few (tens of megabytes), not all
_TRACES_KEPT_SIZE = 4_000_000


def _bound(memo: OrderedDict, kept: int, size: Callable[[Any], int] | None = None) -> None:
    """Drop the oldest entries of ``memo`` until at most ``kept`` are left, or with ``size``, until their sizes add
    up to at most ``kept``."""
    if size is None:
        while len(memo) > kept:
            memo.popitem(last=False)
        return
    total = sum(size(value) for value in memo.values())
    while total > kept:
        total -= size(memo.popitem(last=False)[1])


def _simulate_retiming(model: StepModel, requests: list[BenchRequest], offsets: list[float],
                       max_concurrency: int | None, schedule: tuple) -> tuple[list[RequestRecord], float]:  # fmt: skip
    """``simulate``, as the replay of the schedule recorded for an equal ``schedule`` key where there is one.
    Schedules are recorded only where every request is sent at once: sends spread in time would mostly fall
    between other steps under another step time, and the replay would be wasted."""
    trace = _TRACES.get(schedule)
    if trace is not None:
        try:
            return simulate(model, requests, offsets, max_concurrency, ReplayScheduler(model, trace))
        except Diverged:
            pass  # a request was sent between other steps under this step time: step it for real
    if len(set(offsets)) > 1:
        return simulate(model, requests, offsets, max_concurrency)
    recorder = RecordingScheduler(model)
    simulated = simulate(model, requests, offsets, max_concurrency, recorder)
    _TRACES[schedule] = recorder.trace
    _bound(_TRACES, _TRACES_KEPT_SIZE, lambda trace: trace.size)
    return simulated


def _schedule_key(model: StepModel, workload: Workload, requests: list[BenchRequest], offsets: list[float]) -> tuple:
    """What the scheduler's decisions depend on, besides when each request is added: two benchmarks with equal keys
    and equal step times record the same tokens at the same times. Each limit is cut to what these requests can
    reach, which changes no decision ``simulate`` makes:

    - concurrency: at most every request is in flight; a limit of all of them or more never holds one back, and the
      client's ``free_since`` only times sends of requests still pending (none, then);
    - running sequences (``max_num_seqs``): a rank runs at most what is in flight; a request waits only while fewer
      than that run;
    - KV tokens per rank: a rank holds at most every request's whole sequence; a budget of their sum or more admits
      each one as it comes, as any larger one does;
    - context (``max_model_len``): a request is refused only if longer; a limit of the longest or more refuses none.
    """
    shapes = tuple((request.prompt_len or 0, request.output_len, request.request_class) for request in requests)
    totals = [prompt + output for prompt, output, _ in shapes]
    in_flight = min(workload.max_concurrency or math.inf, len(requests))
    return (model.ranks, model.batched_tokens, model.tokens_per_decode(), min(model.max_running, in_flight),
            min(model.kv_tokens_per_rank, sum(totals)), min(model.max_model_len, max(totals, default=0)), in_flight,
            shapes, tuple(offsets))  # fmt: skip
