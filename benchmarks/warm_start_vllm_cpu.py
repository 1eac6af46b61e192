"""Real vLLM on CPU: a study warm-started from another workload's study against a cold one, same node-minutes.

    scripts/setup-vllm-cpu.sh && .venv/bin/python benchmarks/warm_start_vllm_cpu.py [--budget-min 4] [--repeats 3]

The earlier study ("chat": search_spaces/vllm-cpu-tiny.yaml, random 128 in / 64 out) runs once, to its own budget;
it learns that speculative mtp:1 fails at start-up on vLLM CPU. Then, per repeat (sampler seed = repeat), the same
space on another workload ("long": 1024 in / 32 out) runs twice on the real engine, each to --budget-min:
- cold: `autotune study run` as a first study would;
- warm: the same with `--warm-start chat` (its rules, its best configurations first, its warm prior).
Both are scored alike: the best total tok/s among the trials that finished within the budget (node-minutes summed in
trial order), so neither gains from the trial that overran it. Prints per repeat the two bests, the ratio warm / cold
(the anchor, cold, measured in the same run), whether the warm study launched the learned rule's value again, and
whether the earlier study's best was the first configuration it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _harness import require_vllm  # noqa: E402

SPACE = REPO / "search_spaces" / "vllm-cpu-tiny.yaml"
WORKLOADS = {"chat": {"input_len": 128, "output_len": 64}, "long": {"input_len": 1024, "output_len": 32}}


def space_file(tmp: Path, workload: str) -> Path:
    data = yaml.safe_load(SPACE.read_text())
    data["name"] = workload
    data["workload"] |= WORKLOADS[workload]
    path = tmp / f"{workload}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def autotune(studies: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies)}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=REPO, env=env, capture_output=True, text=True)


def study(studies: Path, space: Path, name: str, budget_min: float, seed: int, *extra: str) -> list[dict]:
    """Run a study to ``budget_min`` node-minutes and return its trials as `study show --json` gives them."""
    done = autotune(studies, "study", "run", str(space), "--study", name, "--n-trials", "60", "--seed", str(seed),
                    "--budget-node-hours", str(budget_min / 60), *extra)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"study {name} failed:\n{done.stderr[-3000:]}")
    shown = autotune(studies, "study", "show", "--study", name, "--json")
    return json.loads(shown.stdout)["trials"]


def best_within(trials: list[dict], budget_min: float) -> tuple[float, int]:
    """The best measured total tok/s among the trials finished within ``budget_min``, and how many that is."""
    spent, best, counted = 0.0, 0.0, 0
    for trial in sorted(trials, key=lambda t: t["number"]):
        spent += trial.get("node_minutes") or 0.0
        if spent > budget_min:
            break
        counted += 1
        if trial["launched"] and trial["feasible"] and trial["values"]:
            best = max(best, trial["values"][0])
    return best, counted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-min", type=float, default=4.0, help="node-minutes of each study on 'long'")
    parser.add_argument("--first-budget-min", type=float, default=5.0, help="node-minutes of the earlier study")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    require_vllm("for the real engine's studies")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path, studies = Path(tmp), Path(tmp) / "studies"
        chat, long = space_file(tmp_path, "chat"), space_file(tmp_path, "long")
        earlier = study(studies, chat, "chat", args.first_budget_min, 0)
        speculative = [t for t in earlier if t["params"].get("speculative") == "mtp:1"]
        failed = sum(1 for t in speculative if t["launched"] and not t["feasible"])
        measured = [t for t in earlier if t["launched"] and t["feasible"] and t["duplicate_of"] is None]
        first_best = max(measured, key=lambda t: t["values"][0])
        print(f"earlier study 'chat': {len(earlier)} trials, best {first_best['values'][0]:.1f} tok/s "
              f"{first_best['params']}; speculative mtp:1 launched and failed {failed}x, refused by the rule it learned "
              f"{len(speculative) - failed}x", flush=True)  # fmt: skip
        ratios = []
        for repeat in range(args.repeats):
            cold = study(studies, long, f"cold-{repeat}", args.budget_min, repeat)
            warm = study(studies, long, f"warm-{repeat}", args.budget_min, repeat, "--warm-start", "chat")
            cold_best, cold_n = best_within(cold, args.budget_min)
            warm_best, warm_n = best_within(warm, args.budget_min)
            ratios.append(warm_best / cold_best if cold_best else float("inf"))
            relaunched = sum(1 for t in warm if t["params"].get("speculative") == "mtp:1" and t["launched"])
            launched = [t for t in sorted(warm, key=lambda t: t["number"]) if t["launched"]]
            best_first = bool(launched) and launched[0]["params"] == first_best["params"]
            print(f"repeat {repeat}: cold best {cold_best:.1f} tok/s ({cold_n} trials), warm best {warm_best:.1f} tok/s "
                  f"({warm_n} trials), ratio warm/cold {ratios[-1]:.2f} within {args.budget_min} node-min; "
                  f"warm launched mtp:1 {relaunched}x; earlier best measured first: {best_first}",
                  flush=True)  # fmt: skip
        print(f"median ratio warm / cold within {args.budget_min} node-minutes: {statistics.median(ratios):.2f} "
              f"({args.repeats} repeats)")  # fmt: skip


if __name__ == "__main__":
    main()
