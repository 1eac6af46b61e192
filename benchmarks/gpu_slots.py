"""GPU slots: the same study one trial at a time, and with `--gpus` on 8 (fake) GPUs, trials at once on disjoint GPUs.

The engine is the scripted one (it sleeps a known start-up time, then serves a small benchmark); configurations need
1, 2, 4 or 8 GPUs (tp), sampled at random with one seed, so both runs try the same configurations. nvidia-smi is
faked on PATH (8 idle GPUs). Prints the wall time of each run and the ratio (slots / one at a time), and checks from
the engines' own records that no two concurrent engines shared a GPU.

    .venv/bin/python benchmarks/gpu_slots.py [--trials 16] [--startup-s 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
GPUS = 8


def space(root: Path, startup_s: float, record: Path) -> Path:
    spec = yaml.safe_load((REPO / "tests" / "study" / "scripted.yaml").read_text())
    spec["engines"]["vllm"]["fixed"]["env"] |= {"SCRIPTED_STARTUP_S": str(startup_s), "SCRIPTED_RECORD": str(record)}
    spec["hardware"] = {"gpus": GPUS}
    spec["startup_timeout_s"] = startup_s + 60
    spec["search"] = {"sampler": "random", "prior": "none"}
    spec["params"] = {"tp": {"choices": [1, 2, 4, 8], "default": 1}, "max_num_seqs": {"choices": [2, 8, 32], "default": 2},
                      "dtype": {"choices": ["float32", "bfloat16"], "default": "bfloat16"}}  # fmt: skip
    spec["workload"] |= {"path": str(REPO / "tests" / "study" / "prompts.jsonl"), "num_prompts": 8}
    path = root / "space.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run(root: Path, name: str, trials: int, startup_s: float, gpus: str | None) -> tuple[float, Path]:
    record = root / f"{name}.launches"
    tool = root / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text("#!/bin/sh\n" + "".join(f"echo '{i}, 300'\n" for i in range(GPUS)))
    tool.chmod(0o755)
    env = os.environ | {
        "AUTOTUNE_STUDIES_DIR": str(root / name),
        "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}",
    }
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space(root, startup_s, record)), "--study", name,
            "--n-trials", str(trials), "--seed", "7", "--executable", f"{sys.executable} -m autotune.bench.scripted",
            *(["--gpus", gpus] if gpus else [])]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: study run failed: {done.stderr}")
    return time.monotonic() - started, record


def spans(record: Path) -> list[dict]:
    """Each engine's GPUs and the interval it held them (from its start/stop records)."""
    runs: dict[str, dict] = {}
    for line in record.read_text().splitlines():
        kind, pid, at, *rest = line.split()
        entry = runs.setdefault(pid, {})
        entry |= {"start": float(at), "gpus": set(rest[0].split(","))} if kind == "start" else {"stop": float(at)}
    return list(runs.values())


def shared_gpu(record: Path) -> int:
    """Pairs of engines that ran at once on a common GPU."""
    spans_ = [r for r in spans(record) if "stop" in r]
    return sum(1 for i, a in enumerate(spans_) for b in spans_[i + 1 :]
               if a["start"] < b["stop"] and b["start"] < a["stop"] and a["gpus"] & b["gpus"])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--startup-s", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        alone_s, alone = run(root, "one-at-a-time", args.trials, args.startup_s, None)
        slots_s, slots = run(root, "slots", args.trials, args.startup_s, "auto")
        alone_runs, slots_runs = spans(alone), spans(slots)
        print(
            f"{args.trials} trials, engines start in {args.startup_s:g} s, configurations need 1/2/4/8 of {GPUS} GPUs"
        )
        for label, wall, runs in (("one at a time", alone_s, alone_runs), ("--gpus auto", slots_s, slots_runs)):
            print(f"{label:>13}: {wall:6.1f} s, {len(runs)} launches ({wall / len(runs):.2f} s per launch), GPUs per "
                  f"launch {sorted(len(r['gpus']) for r in runs)}")  # fmt: skip
        print(f"engines of the slots run that shared a GPU while running: {shared_gpu(slots)}")
        print(f"ratio of wall times (slots / one at a time): {slots_s / alone_s:.2f}")
        # the runs sample different configurations (one seed per worker; duplicates are not launched): per launch
        print(f"ratio per launch: {(slots_s / len(slots_runs)) / (alone_s / len(alone_runs)):.2f}")
        # the best any packing could do with the slots run's launches: their GPU-seconds spread over every GPU,
        # against the same launches one after another
        busy = sum(len(r["gpus"]) * (r["stop"] - r["start"]) for r in slots_runs) / GPUS
        serial = sum(r["stop"] - r["start"] for r in slots_runs)
        print(
            f"packing bound of the slots run's launches (GPU-seconds / {GPUS} over engine-seconds): {busy / serial:.2f}"
        )


if __name__ == "__main__":
    main()
