"""The pruner's share: how many launched trials a study's pruner stops, and what the study found.

    .venv/bin/python benchmarks/pruned_share.py SPACE [--n-trials 10] [--seeds 5] [--timeout-s S] [--repo CHECKOUT]

Runs `autotune study run SPACE --n-trials N --seed S` (of the checkout ``--repo``, default this one: a worktree of an
older commit measures the code before a change) in a fresh studies directory per seed, then reads the study: trials
launched (a study stopped by ``--timeout-s`` counts those that ran), pruned (with where each was stopped), failed
loads, whether every baseline was measured, the best value. Real engines are slow: keep N and the seeds small
(``search_spaces/vllm-cpu-tiny.yaml``, 10 trials: 15-45 minutes on a busy 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parent.parent


def run_study(repo: Path, space: Path, n_trials: int, seed: int, studies: Path,
              timeout_s: float | None) -> tuple[optuna.Study, float]:  # fmt: skip
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "PYTHONPATH": str(repo)}
    started = time.monotonic()
    timeout = ["--timeout", str(timeout_s)] if timeout_s else []
    done = subprocess.run([sys.executable, "-m", "autotune", "study", "run", str(space), "--study", "s",
                           "--n-trials", str(n_trials), "--seed", str(seed), *timeout], cwd=repo, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if not (studies / "s.db").exists():
        sys.exit(f"the study did not start: {done.stderr[-2000:]}")
    return optuna.load_study(study_name="s", storage=f"sqlite:///{studies / 's.db'}"), time.monotonic() - started


def summary(study: optuna.Study) -> dict:
    trials = study.get_trials(deepcopy=False)
    launched = [t for t in trials if t.user_attrs.get("launched")]
    pruned = [t for t in launched if t.state == optuna.trial.TrialState.PRUNED]
    failed_loads = sum(1 for t in launched for b in t.user_attrs.get("benchmarks", []) if b.get("failure_kind"))
    baselines = [t for t in trials if t.user_attrs.get("baseline")]
    # a trial that served has a load ({} where the space sweeps none)
    measured = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and "load" in t.user_attrs]
    best = max((t.values[0] for t in measured if all(v <= 0 for v in (t.constraints or {}).values())), default=0.0)
    return {"trials": len(trials), "launched": len(launched), "pruned": len(pruned),
            "pruned_at": [f"#{t.number} {t.user_attrs.get('pruned_at')}" for t in pruned],
            "failed_loads": failed_loads, "baseline_measured": all(t in measured for t in baselines),
            "best": best}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("space", type=Path)
    parser.add_argument("--n-trials", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, help="no new trial starts after this (`study run --timeout`)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose autotune runs the studies")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    totals = {"launched": 0, "pruned": 0}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            study, wall_s = run_study(args.repo.resolve(), args.space.resolve(), args.n_trials, seed, Path(tmp),
                                       args.timeout_s)  # fmt: skip
            row = summary(study)
        totals = {k: totals[k] + row[k] for k in totals}
        print(f"seed {seed}: {row['launched']} launched of {row['trials']}, pruned {row['pruned']} "
              f"{row['pruned_at']}, failed loads {row['failed_loads']}, baselines measured {row['baseline_measured']}, "
              f"best {row['best']:.1f} ({wall_s:.0f} s)", flush=True)  # fmt: skip
    share = totals["pruned"] / totals["launched"] if totals["launched"] else 0.0
    print(f"pruned share: {totals['pruned']}/{totals['launched']} launched trials = {share:.0%}")


if __name__ == "__main__":
    main()
