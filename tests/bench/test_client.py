"""The load generator against the scripted server over real sockets: counts, scripted timings, faults, shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.bench.client import ClientOptions, arrival_offsets
from autotune.bench.runner import run_benchmark
from autotune.space.schema import Workload


def prompts_file(tmp_path: Path, prompts: list[str], output_len: int = 8) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "output_len": output_len}) for p in prompts))
    return path


def jsonl_workload(path: Path, count: int, **extra) -> Workload:
    return Workload(dataset="jsonl", path=str(path), num_prompts=count, **extra)


@pytest.mark.parametrize("scripted_server", [{"ttft_ms": 40, "itl_ms": 10}], indirect=True)
@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_scripted_timings_are_measured(scripted_server, endpoint, tmp_path) -> None:
    path = prompts_file(tmp_path, ["one two three"] * 20, output_len=12)
    options = ClientOptions(scripted_server.base_url, "scripted", endpoint)
    result = run_benchmark(options, jsonl_workload(path, 20, max_concurrency=10), None)
    assert (result.completed, result.failed) == (20, 0)
    assert (result.total_input_tokens, result.total_output_tokens) == (60, 240)  # usage: 3 words, 12 tokens
    assert all(len(itl) == 11 for itl in result.itls)
    # no request's first token can come before the scripted 40 ms; how close to 40 ms / 10 ms the client measures
    # depends on the machine's load: benchmarks/client_fidelity.py measures that (tests/bench/test_definitions.py
    # checks every metric's arithmetic on a controlled clock)
    assert min(result.ttfts) * 1000 >= 40


def test_faults_become_typed_failures_and_the_run_finishes(scripted_server, tmp_path) -> None:
    faults = ["reset", "malformed", "500", "404", "stall", "error-event", "no-tokens"]
    path = prompts_file(tmp_path, [f"FAULT:{f} x" for f in faults] + ["fine prompt"] * 3)
    options = ClientOptions(scripted_server.base_url, "scripted", stall_timeout_s=1.0)
    result = run_benchmark(options, jsonl_workload(path, 10), None)
    assert any("(stall timeout)" in e for e in result.errors if e)  # cut by the 1 s stall timeout, not the 6 h total
    assert result.completed == 3 and result.failed == 7
    assert result.errors_by_type == {
        "connection_reset": 1, "malformed_sse": 1, "http_500": 1, "http_404": 1, "timeout": 1,
        "server_error_event": 1, "no_tokens": 1,
    }  # fmt: skip
    assert sum(1 for e in result.errors if e) == 7


def test_server_down_is_counted_not_raised(tmp_path) -> None:
    from autotune.serving.process import free_port

    path = prompts_file(tmp_path, ["a b"] * 4)
    result = run_benchmark(ClientOptions(f"http://127.0.0.1:{free_port()}", "m"), jsonl_workload(path, 4), None)
    assert result.completed == 0 and result.errors_by_type == {"connection_refused": 4}


def test_progress_hook_reports_running_metrics_at_checkpoints(scripted_server, tmp_path) -> None:
    path = prompts_file(tmp_path, ["a b c d"] * 50)
    seen = []
    run_benchmark(ClientOptions(scripted_server.base_url, "s"), jsonl_workload(path, 50, max_concurrency=5), None,
                  on_progress=seen.append)  # fmt: skip
    assert [p.finished for p in seen] == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert all(p.total == 50 and p.metrics["completed"] == p.finished for p in seen)
    assert seen[-1].metrics["output_throughput"] > 0


def test_sharded_load_returns_every_record_in_order(scripted_server, tmp_path) -> None:
    prompts = [" ".join(["w"] * (i + 1)) for i in range(30)]  # prompt i has i+1 words
    path = prompts_file(tmp_path, prompts)
    workload = Workload(dataset="jsonl", path=str(path), num_prompts=30, max_concurrency=8, seed=3)
    single = run_benchmark(ClientOptions(scripted_server.base_url, "s"), workload, None)
    sharded = run_benchmark(ClientOptions(scripted_server.base_url, "s"), workload, None, shards=2)
    assert sharded.completed == 30 and sharded.client["shards"] == 2
    assert sharded.input_lens == single.input_lens  # same requests, same order
    assert sharded.total_output_tokens == single.total_output_tokens == 240


def test_arrivals_follow_the_rate() -> None:
    assert arrival_offsets(5, float("inf"), 1.0, 0) == [0.0] * 5
    offsets = arrival_offsets(4000, 100.0, 1.0, seed=1)
    assert offsets == arrival_offsets(4000, 100.0, 1.0, seed=1)
    assert offsets[-1] / len(offsets) == pytest.approx(0.01, rel=0.1)  # mean gap 1/rate
    bursty = arrival_offsets(4000, 100.0, 0.2, seed=1)
    assert bursty[-1] / len(bursty) == pytest.approx(0.01, rel=0.2)


@pytest.mark.parametrize("scripted_server", [{"burst": 8}], indirect=True)
def test_a_client_bound_run_says_so(scripted_server, tmp_path) -> None:
    # zero delay: the server sends as fast as the client can read, so the client, not the server, is the limit
    path = prompts_file(tmp_path, ["a"] * 300, output_len=400)
    result = run_benchmark(
        ClientOptions(scripted_server.base_url, "s"), jsonl_workload(path, 300), None, include_requests=False
    )
    assert result.completed == 300
    assert result.client["saturated"], result.client
