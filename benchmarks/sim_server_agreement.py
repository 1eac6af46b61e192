"""The simulated engine's server, measured by our benchmark client in wall time, against its own model (the direct
mode: the same requests through the same scheduler in virtual time), at three load levels. Prints, per load and
metric, measured / model − 1 (the model is the anchor) and whether every metric is within 5%.

Timing, so a benchmark, not a test (tests/sim/test_server_agreement.py checks what does not depend on the machine):
on a loaded machine the client's reaction time and the server's lag are real time, and they count ÷ time_scale in
model time. The time scale is chosen per load so that a step lasts several wall milliseconds: the client's own
reaction time (~0.5 ms to read a stream's end and send the next request; ~50 ms to send a burst of 160) at a 10×
speed-up would count as 5 ms (500 ms) of model time, a whole decode step at low concurrency; the all-at-once load
runs at real time for that reason. TTFT is compared as a mean: in a closed loop it is bimodal (a request waits for a
step boundary, or behind a wave of prefills), and the median falls in the gap between the modes.

    python benchmarks/sim_server_agreement.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autotune.bench.client import ClientOptions
from autotune.bench.datasets import build_requests
from autotune.bench.runner import run_benchmark
from autotune.config import ServerConfig
from autotune.sim.models import build_model
from autotune.space.schema import Simulation, Workload
from autotune.testing.sim import H200X8, V32, sim_server, simulated

COMPARED = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "mean_e2el_ms")
LOADS = ((4, 24, 0.5), (32, 96, 0.5), (128, 128, 1.0))  # (max concurrency, prompts, time scale)
LIMIT = 0.05


def measure(concurrency: int, prompts: int, time_scale: float) -> dict[str, float]:
    """measured / model − 1 for each compared metric, at one load."""
    config = ServerConfig(engine="vllm", model=V32, tp=8, served_model_name="sim")
    workload = Workload(dataset="random", input_len=200, output_len=100, range_ratio=0.5, num_prompts=prompts,
                        max_concurrency=concurrency, seed=7)  # fmt: skip
    backend = simulated(config, time_scale=time_scale)
    requests = build_requests(workload, backend.launcher.tokenizer(config))
    model = build_model(Simulation(mode="direct"), config, H200X8).evaluate(workload, requests, config.api_model_name)
    with tempfile.TemporaryDirectory() as tmp, sim_server(backend, config, Path(tmp)) as server:
        measured = run_benchmark(ClientOptions(server.base_url, "sim"), workload, None, requests=requests,
                                 include_requests=False)  # fmt: skip
        measured = server.engine_time(measured.to_vllm_json())
    return {key: measured[key] / model[key] - 1 for key in COMPARED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"{'concurrency':>11} {'prompts':>7} {'scale':>5} " + " ".join(f"{key:>22}" for key in COMPARED))
    worst = 0.0
    for concurrency, prompts, time_scale in LOADS:
        for _ in range(args.repeats):
            off = measure(concurrency, prompts, time_scale)
            worst = max(worst, *(abs(v) for v in off.values()))
            print(f"{concurrency:>11} {prompts:>7} {time_scale:>5} " + " ".join(f"{off[k]:>+22.2%}" for k in COMPARED))
    verdict = "within" if worst <= LIMIT else "OUTSIDE"
    print(f"largest |measured / model - 1|: {worst:.2%} (limit {LIMIT:.0%}): {verdict}")


if __name__ == "__main__":
    main()
