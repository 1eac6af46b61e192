"""The simulated engine's server, measured by our benchmark client, serves what its own model (the direct mode, same
requests, same scheduler in virtual time) says: every request, every token, at low and all-at-once load.

What the client measures in wall time depends on the machine's load (its reaction time and the server's lag are real
time, counted ÷ time_scale in model time), so the timing agreement (within 5%) is measured by
benchmarks/sim_server_agreement.py, not asserted here."""

from __future__ import annotations

import pytest

from autotune.bench.client import ClientOptions
from autotune.bench.datasets import build_requests
from autotune.bench.runner import run_benchmark
from autotune.config import ServerConfig
from autotune.sim.models import build_model
from autotune.space.schema import Simulation, Workload
from autotune.testing.sim import H200X8, V32, sim_server, simulated

COUNTED = ("completed", "failed", "total_input_tokens", "total_output_tokens")


@pytest.mark.parametrize(("concurrency", "prompts"), [(4, 24), (128, 128)])
def test_client_counts_what_the_model_serves(concurrency, prompts, tmp_path) -> None:
    config = ServerConfig(engine="vllm", model=V32, tp=8, served_model_name="sim")
    workload = Workload(dataset="random", input_len=200, output_len=100, range_ratio=0.5, num_prompts=prompts,
                        max_concurrency=concurrency, seed=7)  # fmt: skip
    backend = simulated(config)
    requests = build_requests(workload, backend.launcher.tokenizer(config))
    model = build_model(Simulation(mode="direct"), config, H200X8).evaluate(workload, requests, config.api_model_name)
    with sim_server(backend, config, tmp_path) as server:
        measured = run_benchmark(ClientOptions(server.base_url, "sim"), workload, None, requests=requests,
                                 include_requests=True)  # fmt: skip
    measured = server.engine_time(measured.to_vllm_json())  # labelled simulated; counts are not rescaled
    assert measured["client"]["simulated"] and model["client"]["simulated"]
    assert {key: measured[key] for key in COUNTED} == {key: model[key] for key in COUNTED}
    assert measured["completed"] == workload.num_prompts
    # one stream event per decode step (no speculative decoding): a gap between every two of a request's tokens
    assert measured["output_lens"] == [request.output_len for request in requests]
    assert [len(itl) for itl in measured["itls"]] == [request.output_len - 1 for request in requests]
