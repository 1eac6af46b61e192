"""The simulated engine's metrics, measured by our benchmark client against its server, agree with its own model (the
direct mode, same requests, same scheduler in virtual time) within 5%, at three load levels.

The time scale is chosen per load so that a step lasts several wall milliseconds: the client's own reaction time
(~0.5 ms to read a stream's end and send the next request; ~50 ms to send a burst of 160) is real time, and at a 10×
speed-up it would count as 5 ms (500 ms) of model time: a whole decode step at low concurrency. The all-at-once load
runs at real time for that reason.

TTFT is compared as a mean: in a closed loop it is bimodal (a request waits for a step boundary, or behind a wave of
prefills), and the median falls in the gap between the modes, where one request more or less moves it by a step."""

from __future__ import annotations

import pytest

from autotune.bench.client import ClientOptions
from autotune.bench.datasets import build_requests
from autotune.bench.runner import run_benchmark
from autotune.config import ServerConfig
from autotune.space import Workload
from tests.sim.conftest import V32, sim_server, simulated

COMPARED = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "mean_e2el_ms")


@pytest.mark.parametrize(("concurrency", "prompts", "time_scale"), [(4, 24, 0.5), (32, 96, 0.5), (128, 128, 1.0)])
def test_client_measures_what_the_model_says(concurrency, prompts, time_scale, tmp_path) -> None:
    config = ServerConfig(engine="vllm", model=V32, tp=8, served_model_name="sim")
    workload = Workload(dataset="random", input_len=200, output_len=100, range_ratio=0.5, num_prompts=prompts,
                        max_concurrency=concurrency, seed=7)  # fmt: skip
    engine = simulated(config, time_scale=time_scale)
    requests = build_requests(workload, engine.tokenizer(config))
    model = simulated(config, mode="direct").evaluate(config, workload, requests)
    with sim_server(engine, config, tmp_path) as server:
        measured = run_benchmark(ClientOptions(server.base_url, "sim"), workload, None, requests=requests,
                                 include_requests=False)  # fmt: skip
    measured = engine.model_time(measured)
    assert measured["completed"] == model["completed"] == workload.num_prompts
    assert measured["client"]["simulated"] and model["client"]["simulated"]
    off = {key: measured[key] / model[key] - 1 for key in COMPARED}
    print(concurrency, {k: (round(v, 4), round(model[k], 1)) for k, v in off.items()}, model["duration"])
    assert all(abs(v) <= 0.05 for v in off.values()), {k: (round(v, 4), round(model[k], 1)) for k, v in off.items()}
