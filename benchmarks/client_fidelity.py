"""Client timing fidelity under load: every stream paced at a known interval (default 1000 streams × one event per
20 ms = 50k events/s); how far each client's median ITL and TPOT are from the truth, `vllm bench serve` (the anchor)
measured in the same run against the same server. Also prints whether our client flagged itself saturated.

    python benchmarks/client_fidelity.py [--repeats 3] [--streams 1000] [--itl-ms 20] [--output-len 100]
"""

from __future__ import annotations

import argparse

from _harness import median_of, require_vllm, run_client, scripted_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--output-len", type=int, default=100)
    args = parser.parse_args()
    require_vllm()
    truth = args.itl_ms
    print(f"{args.streams} streams paced at {truth} ms = {args.streams * 1000 / truth:,.0f} events/s")
    print(f"{'client':<16} {'median ITL':>11} {'error':>7} {'median TPOT':>12} {'error':>7} {'saturated':>10}")
    errors = {}
    with scripted_server(ttft_ms=truth, itl_ms=truth) as server:
        runs = {c: [] for c in ("vllm", "autotune")}
        for _ in range(args.repeats):
            for client in runs:
                runs[client].append(run_client(client, server, args.streams, args.output_len))
        for client, results in runs.items():
            itl, tpot = median_of(results, "median_itl_ms"), median_of(results, "median_tpot_ms")
            errors[client] = abs(itl - truth) / truth
            saturated = [r["client"]["saturated"] for r in results] if client == "autotune" else "(not reported)"
            name = "vllm bench serve" if client == "vllm" else "autotune bench"
            print(
                f"{name:<16} {itl:>9.2f}ms {itl / truth - 1:>+7.1%} {tpot:>10.2f}ms {tpot / truth - 1:>+7.1%} {saturated!s:>10}"
            )
    print(f"ITL error ratio (autotune / vllm bench): {errors['autotune'] / max(errors['vllm'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
