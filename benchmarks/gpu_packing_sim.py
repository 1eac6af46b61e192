"""GPU lease policies on a simulated node: how much of the one-at-a-time wall time a node's workers need.

A discrete-event model of `autotune.serving.gpus` (no processes, no tuner overhead): 8 GPUs, 8 or 12 workers (as many as
1-GPU trials fit, and half as many again: what `study.concurrent_trials` gives), trials of 1/2/4/8 GPUs drawn uniformly, all about one trial length long (±10%). A trial too large for the free
GPUs waits; until its patience runs out smaller ones may take free GPUs, then it holds the queue (no one starts
before it). Policies: ``poll`` (whichever waiting trial looks first gets the GPUs) and ``largest`` (the largest
waiting trial that fits gets them: what `GpuPool` does). Prints the mean ratio (node wall time / the same trials one
after another) over many seeds, against the packing bound (GPU-time / 8 GPUs), per policy and patience.

    .venv/bin/python benchmarks/gpu_packing_sim.py [--trials 32] [--seeds 200]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics

GPUS, SIZES, JITTER = 8, (1, 2, 4, 8), 0.1
PATIENCES = (0, 1, 2, 4, 8, float("inf"))


def simulate(trials: int, workers: int, patience: float, policy: str, seed: int) -> tuple[float, float]:
    """(wall time, packing bound), both over the serial time, trial length 1."""
    rng = random.Random(seed)
    now, free, asked, done, gpu_time = 0.0, GPUS, 0, 0, 0.0
    running: list[tuple[float, int]] = []  # (end, size)
    waiting: list[tuple[float, int]] = []  # (since, size)
    idle_workers = workers

    def start(entry: tuple[float, int]) -> None:
        nonlocal free, gpu_time
        waiting.remove(entry)
        length = 1 + rng.uniform(-JITTER, JITTER)
        free -= entry[1]
        gpu_time += entry[1] * length
        heapq.heappush(running, (now + length, entry[1]))

    while done < trials:
        while idle_workers and asked < trials:  # a free worker asks for its next trial at once
            idle_workers, asked = idle_workers - 1, asked + 1
            waiting.append((now, rng.choice(SIZES)))
        while True:
            expired = [w for w in waiting if now - w[0] >= patience - 1e-9]
            if expired:  # the oldest impatient trial holds the queue: it alone may start
                head = min(expired)
                if head[1] > free:
                    break
                start(head)
                continue
            order = (
                sorted(waiting, key=lambda w: (-w[1], w[0]))
                if policy == "largest"
                else rng.sample(waiting, len(waiting))
            )
            fits = [w for w in order if w[1] <= free]
            if not fits:
                break
            start(fits[0])
        expiries = [w[0] + patience for w in waiting if now - w[0] < patience - 1e-9]
        if expiries and (not running or min(expiries) < running[0][0]):
            now = min(expiries)
            continue
        now, size = heapq.heappop(running)
        free, done, idle_workers = free + size, done + 1, idle_workers + 1
    return now / trials, gpu_time / GPUS / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    print(f"{GPUS} GPUs, {args.trials} trials of {'/'.join(map(str, SIZES))} GPUs, {args.seeds} seeds; "
          "ratio = node wall time / one at a time (mean)")  # fmt: skip
    print(f"{'workers, policy / patience (trial lengths)':>42} " + " ".join(f"{p:>6g}" for p in PATIENCES) + "  bound")
    for workers, policy in itertools.product((8, 12), ("poll", "largest")):
        cells, bounds = [], []
        for patience in PATIENCES:
            runs = [simulate(args.trials, workers, patience, policy, seed) for seed in range(args.seeds)]
            cells.append(statistics.mean(r[0] for r in runs))
            bounds += [r[1] for r in runs]
        print(
            f"{f'{workers}, {policy}':>42} " + " ".join(f"{c:6.3f}" for c in cells) + f"  {statistics.mean(bounds):.3f}"
        )


if __name__ == "__main__":
    main()
