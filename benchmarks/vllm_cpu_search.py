"""Real vLLM on CPU: autotune's study against a default-TPE study, within the same node-minutes, 3 repeats.

    scripts/setup-vllm-cpu.sh && .venv/bin/python benchmarks/vllm_cpu_search.py [--budget-min 6] [--repeats 3]

Both search search_spaces/vllm-cpu-tiny.yaml on the real engine and stop at the same budget of wall minutes:
- autotune: `autotune study run --budget-node-hours` (one launch per trial with a load sweep, learned failures);
- the anchor: a hand-written Optuna loop, plain TPESampler over every parameter (max_concurrency included), each
  suggestion launched and benchmarked through autotune's own launch path (so both measure alike).
Prints each repeat's best total tok/s and the ratio autotune / TPE (the anchor measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _harness import require_vllm  # noqa: E402

from autotune.errors import LaunchFailed  # noqa: E402
from autotune.search.backends import anchored_paths, engine_for  # noqa: E402
from autotune.serving.seam import Launch  # noqa: E402
from autotune.space.files import find_space, load_space  # noqa: E402

SPACE = find_space("vllm-cpu-tiny")


def autotune_best(budget_min: float, seed: int, studies: Path) -> float:
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies)}
    subprocess.run([sys.executable, "-m", "autotune", "study", "run", str(SPACE), "--n-trials", "40", "--seed",
                    str(seed), "--budget-node-hours", str(budget_min / 60)], cwd=REPO, env=env, check=False,
                   capture_output=True)  # fmt: skip
    best = subprocess.run([sys.executable, "-m", "autotune", "study", "best", "--study", "vllm-cpu-tiny", "--json"],
                          cwd=REPO, env=env, capture_output=True, text=True)  # fmt: skip
    return json.loads(best.stdout)["values"][0] if best.returncode == 0 else 0.0


def tpe_best(budget_min: float, seed: int, workdir: Path) -> float:
    space = load_space(SPACE)
    params = space.engine_params("vllm")
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    started, best = time.monotonic(), 0.0
    while time.monotonic() - started < budget_min * 60:
        trial = study.ask()
        point = space.point("vllm", {n: p.suggest(trial, n) for n, p in params.items()})
        config = anchored_paths(point.server)
        launch = Launch(engine_for(space, "vllm"), config, workdir / str(trial.number), space.stall_timeout_s)
        try:
            with launch:
                launch.wait_ready(space.startup_timeout_s)
                result = launch.measure(space.workload.model_copy(update=point.client))
        except LaunchFailed:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        value = result.total_token_throughput
        best = max(best, value)
        study.tell(trial, value)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-min", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    require_vllm("for the real engine's studies")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ratios = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            ours = autotune_best(args.budget_min, repeat, Path(tmp) / "studies")
            anchor = tpe_best(args.budget_min, repeat, Path(tmp) / "tpe")
        ratios.append(ours / anchor if anchor else float("inf"))
        print(f"repeat {repeat}: autotune best {ours:.1f} tok/s, default TPE best {anchor:.1f} tok/s, "
              f"ratio {ratios[-1]:.2f} (budget {args.budget_min} min each)", flush=True)  # fmt: skip
    print(f"median ratio autotune / default TPE within {args.budget_min} node-minutes: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
