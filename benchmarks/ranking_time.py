"""CPU time of the prior's ranking of a space: what `study run` spends before its first launch ("ranking the space").

    .venv/bin/python benchmarks/ranking_time.py SPACE [SPACE ...] [--limit N] [--source DIR] [--no-anchor]

For each space: the ranking as this checkout makes it (the simulator reusing what configurations share:
``autotune.sim.direct``), and the anchor, measured in the same run on the same machine: the straightforward
computation, every configuration simulated afresh at every load (``autotune.sim.direct.without_reuse``), which is
what the ranking cost before the reuse. ``--source DIR`` adds the ranking as another checkout makes it (e.g. an older
commit unpacked with ``git archive``), with this interpreter. Each runs in its own process (a cold cache); what is
reported is the CPU seconds of the ranking alone (``time.process_time``, not the imports), and wall seconds, which other
processes on a shared machine distort. A fingerprint of each ranking (every configuration's place, value and metrics
at every load, exactly) says whether they agree. ``--limit N`` ranks at most N configurations per engine (the
prior's sample, ``RANKED_LIMIT``; default: the prior's own). Benchmarks are not tests: it prints, it does not assert.

Spaces to try: the README's two-engine init file (``autotune init --model meta-llama/Llama-3.3-70B-Instruct --gpus 8
--gpu-memory-gb 141 --engine vllm --engine sglang --slo p99_tpot_ms=50 -o two.yaml``), and a two-workload DeepSeek-V3
SGLang one (``autotune init --model deepseek-ai/DeepSeek-V3 --engine sglang --workload random:1024:256 --workload
random:4096:1024 -o dsv3.yaml``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# run in a child process: rank the space, print {"cpu_s", "wall_s", "ranked", "fingerprint"} as one JSON line
CHILD = """
import hashlib, json, sys, time
from autotune.search import prior
from autotune.space.files import load_space

path, limit, fresh = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fresh"
if limit:
    prior.RANKED_LIMIT = limit
space = load_space(path)
model = prior.prior_model(space) or "analytic"
if fresh:
    from autotune.sim.direct import without_reuse
    context = without_reuse()
else:
    import contextlib
    context = contextlib.nullcontext()
cpu, wall = time.process_time(), time.perf_counter()
with context:
    ranked = prior.rank(space, model)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
exact = repr([(r.engine, sorted(r.params.items()), r.predicted, r.loads, sorted(r.by_workload.items())) for r in ranked])
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "ranked": len(ranked),
                  "fingerprint": hashlib.sha256(exact.encode()).hexdigest()[:12]}))
"""


def measure(space: Path, source: Path, limit: int, fresh: bool) -> dict:
    """One ranking of ``space`` in its own process, importing autotune from ``source``."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    arguments = [sys.executable, "-c", CHILD, str(space.resolve()), str(limit), "fresh" if fresh else "reuse"]
    done = subprocess.run(arguments, env=env, cwd=source, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="configurations ranked per engine (0: the prior's own)")
    parser.add_argument("--source", type=Path, help="another checkout's autotune, ranked too (e.g. the commit before)")
    parser.add_argument("--no-anchor", action="store_true", help="skip the straightforward computation (minutes)")
    options = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for space in options.spaces:
        runs = {"this checkout": measure(space, REPO, options.limit, fresh=False)}
        if not options.no_anchor:
            runs["anchor: every benchmark afresh"] = measure(space, REPO, options.limit, fresh=True)
        if options.source:
            runs[f"--source {options.source}"] = measure(space, options.source, options.limit, fresh=False)
        anchor = runs.get("anchor: every benchmark afresh")
        print(f"\n{space}: {runs['this checkout']['ranked']} configurations ranked")
        for name, run in runs.items():
            ratio = f"{run['cpu_s'] / anchor['cpu_s']:6.3f} of the anchor" if anchor else ""
            print(f"  {name:<40} {run['cpu_s']:8.2f} s CPU {run['wall_s']:8.2f} s wall  {ratio}  "
                  f"ranking {run['fingerprint']}")  # fmt: skip
        if len(runs) > 1:
            same = len({run["fingerprint"] for run in runs.values()}) == 1
            print("  the rankings are identical" if same else "  THE RANKINGS DIFFER")


if __name__ == "__main__":
    main()
