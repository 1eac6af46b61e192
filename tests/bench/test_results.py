"""``BenchmarkResult`` is vllm bench's result JSON, typed: every backend's result goes through it and comes back byte
for byte (benchmark.json and ``autotune bench --save-result`` are what they were when results were dicts)."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from autotune.bench.client import RequestRecord
from autotune.bench.metrics import compute_metrics, format_block, per_request_lists, result_header
from autotune.bench.results import BenchmarkResult


def _records() -> list[RequestRecord]:
    done = [RequestRecord(10 + i, 4, start_time=0.1 * i, ttft=0.05, itl=[0.01, 0.012, 0.011], latency=0.09,
                          output_tokens=4, token_events=4, success=True) for i in range(5)]  # fmt: skip
    failed = RequestRecord(7, 4, start_time=0.2, error_type="http_503", error="busy")
    return [*done, failed]


def _measured(percentiles=(99,), requests=False) -> dict:
    records = _records()
    result = result_header("m", None, len(records), math.inf, 1.0, 4) | {"request_rate": "inf"}
    result |= compute_metrics(records, 1.5, {"ttft": 100}, percentiles)
    result["client"] = {"event_loop_lag_p50_ms": 0.1, "saturated": False, "shards": 1}
    return result | (per_request_lists(records) if requests else {})


@pytest.mark.parametrize(
    "data",
    [
        _measured(),
        _measured(percentiles=(95, 99.9), requests=True),
        # what a table of measured results gives: some metrics, in its own order
        {"output_throughput": 10.0, "mean_ttft_ms": 5.0, "p99_ttft_ms": math.nan, "median_ttft_ms": 5.0,
         "completed": 8, "failed": 0, "client": {"simulated": True, "mode": "direct", "performance_model": "table"}},
        # the simulator's server rescaled to model time: client last, labelled
        _measured() | {"request_rate": 5.0, "client": {"saturated": False, "simulated": True, "mode": "server"}},
    ],
)  # fmt: skip
def test_a_result_comes_back_byte_for_byte(data) -> None:
    result = BenchmarkResult.from_vllm_json(data)
    assert json.dumps(result.to_vllm_json(), default=str) == json.dumps(data, default=str)


def test_fields_read_typed_and_metrics_by_name() -> None:
    result = BenchmarkResult.from_vllm_json(_measured(percentiles=(95,)))
    assert (result.completed, result.failed, result.errors_by_type) == (5, 1, {"http_503": 1})
    assert result.metric("p95_ttft_ms") == pytest.approx(50.0) and result.metric("p99_tpot_ms") is not None
    assert result.metric("no_such_metric") is None and result.metric("metric") is None
    assert not result.saturated
    assert format_block(result) == format_block(_measured(percentiles=(95,)))
    with pytest.raises(ValidationError):
        result.completed = 3  # frozen


def test_a_field_vllm_bench_does_not_have_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a field of vllm bench's result: throughput"):
        BenchmarkResult.from_vllm_json({"completed": 1, "throughput": 2.0})
