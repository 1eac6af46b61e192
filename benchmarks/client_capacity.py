"""Client capacity: events/s our client sustains on one core against a zero-delay streaming server, with
`vllm bench serve` (the anchor) measured in the same run against the same server.

The server (autotune.testing.scripted, one token per SSE event, `--burst` events per write) runs on CPU 1, each client
on CPU 0. The server's CPU share during each run is printed: below ~90% it was not the limit.

    python benchmarks/client_capacity.py [--repeats 3] [--streams 100,1000] [--output-len 200] [--burst 4]
"""

from __future__ import annotations

import argparse

from _harness import median_of, require_vllm, run_client, scripted_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--streams", default="100,1000")
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--burst", type=int, default=4)
    args = parser.parse_args()
    require_vllm()
    print(f"{'streams':>7} {'client':<16} {'events/s (median)':>18} {'server CPU':>11} {'ratio vs vllm bench':>20}")
    with scripted_server(burst=args.burst) as server:
        for streams in (int(s) for s in args.streams.split(",")):
            runs = {c: [] for c in ("vllm", "autotune")}
            for _ in range(args.repeats):  # interleaved, so drift on the shared machine hits both alike
                for client in runs:
                    runs[client].append(run_client(client, server, streams, args.output_len))
            anchor = median_of(runs["vllm"], "events_per_s")
            for client, results in runs.items():
                rate = median_of(results, "events_per_s")
                name = "vllm bench serve" if client == "vllm" else "autotune bench"
                print(f"{streams:>7} {name:<16} {rate:>18,.0f} {median_of(results, 'server_cpu_share'):>10.0%} "
                      f"{rate / anchor:>19.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
