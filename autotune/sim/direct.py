"""The direct mode: the simulated engine and a closed-loop client in one process, in virtual time.

No server and no sockets: requests go straight into the scheduler as the benchmark client would send them (the same
arrival offsets, the same concurrency limit), and their token times become the client's records, so the result is
computed by the same code and has the same fields as a measured one. A study of thousands of trials runs this way.
"""

from __future__ import annotations

import math
from collections import deque

from autotune.bench.client import RequestRecord, arrival_offsets
from autotune.bench.datasets import BenchRequest
from autotune.bench.metrics import compute_metrics, result_header
from autotune.bench.mix import class_metrics
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.scheduler import Scheduler, SimRequest, StepModel
from autotune.space.schema import Workload

_CLIENT_REACTION_S = 1e-9


def simulate(model: StepModel, requests: list[BenchRequest], offsets: list[float], max_concurrency: int | None):
    """Run ``requests`` (sent at ``offsets``, at most ``max_concurrency`` at once) to completion.

    Returns:
        (records, duration_s): one RequestRecord per request, in order; virtual seconds from first send to last token.
    """
    scheduler = Scheduler(model)
    records = [RequestRecord(r.prompt_len, r.output_len) for r in requests]
    pending = deque(range(len(requests)))
    limit = max_concurrency or math.inf
    now, in_flight, free_since = 0.0, 0, 0.0
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
        for event in events:
            record = records[event.request.handle]  # type: ignore[index]
            _record_tokens(record, event.tokens, now)
            if event.finished:
                record.output_tokens, record.success = event.request.emitted, True
                in_flight -= 1
                if in_flight == limit - 1:
                    free_since = now
    starts = [r.start_time for r in records]
    return records, max(now - min(starts, default=0.0), 1e-9)


def _send_time(offset: float, free_since: float) -> float:
    # A client sends the next request just *after* it read the last token of the one before: that request then waits
    # for the step after the one that starts at that instant, as it does against a server.
    return max(offset, free_since + _CLIENT_REACTION_S)


def _record_tokens(record: RequestRecord, tokens: int, now: float) -> None:
    elapsed = now - record.start_time
    if record.token_events == 0:
        record.ttft = elapsed
    else:
        record.itl.append(elapsed - record.latency)
    record.latency = elapsed
    record.token_events += 1


def direct_benchmark(model: StepModel, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict:
    """The benchmark result (vllm bench's fields) of ``workload`` on the simulated engine, computed in-process."""
    offsets = arrival_offsets(len(requests), workload.request_rate, workload.burstiness, workload.seed)
    records, duration = simulate(model, requests, offsets, workload.max_concurrency)
    rate = workload.request_rate
    result = result_header(model_name, "simulated-words", len(requests), rate if rate != math.inf else "inf",
                           workload.burstiness, workload.max_concurrency)  # fmt: skip
    result |= compute_metrics(records, duration)
    result |= class_metrics(workload, requests, records, duration)
    result["client"] = {"simulated": True, "mode": "direct", "saturated": False}
    return result
