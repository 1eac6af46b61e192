"""GPU slots: the same study one trial at a time, and with `--gpus` on 8 (fake) GPUs, trials at once on disjoint GPUs.

The engine is the scripted one (it sleeps a known start-up time, then serves a small benchmark); configurations need
1, 2, 4 or 8 GPUs (tp): every configuration of tp 1/2/4/8 x max_num_seqs 2/4/8/16 x dtype float32/bfloat16, in an
order shuffled with the seed, enqueued as the slots of both studies, so both runs launch the same 32 configurations
in the same order (a sampler's choices would differ between one worker and eight). nvidia-smi is faked on PATH
(8 idle GPUs). Prints the wall time of each run and the ratio (slots / one at a time), checks from the engines' own
records that no two concurrent engines shared a GPU, and says where the slots run's time went.

    .venv/bin/python benchmarks/gpu_slots.py [--startup-s 15] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

from autotune.search.study import RunOptions, create_or_load, default_storage, open_storage
from autotune.search.trial_queue import FixedConfiguration, queue_fixed
from autotune.space.files import load_space

REPO = Path(__file__).resolve().parents[1]
GPUS = 8
TP, MAX_NUM_SEQS, DTYPES = [1, 2, 4, 8], [2, 4, 8, 16], ["float32", "bfloat16"]


def configurations(seed: int) -> list[dict]:
    every = [dict(zip(("tp", "max_num_seqs", "dtype"), values, strict=True))
             for values in itertools.product(TP, MAX_NUM_SEQS, DTYPES)]  # fmt: skip
    random.Random(seed).shuffle(every)
    return every


def make_study(space_path: Path, name: str, studies_dir: Path, seed: int) -> int:
    """The study, made before `study run` with the configurations queued: how many trials it has (its budget)."""
    studies_dir.mkdir(
        parents=True, exist_ok=True
    )  # a storage directory must exist (only $AUTOTUNE_STUDIES_DIR is made)
    options = RunOptions(name, default_storage(name, studies_dir), studies_dir, n_trials=0)
    study = create_or_load(load_space(space_path), space_path, options, open_storage(options.storage))
    for params in configurations(seed):
        queue_fixed(study, FixedConfiguration(params, {}))
    return len(study.trials)


def space(root: Path, startup_s: float, record: Path) -> Path:
    spec = yaml.safe_load((REPO / "tests" / "study" / "scripted.yaml").read_text())
    spec["engines"]["vllm"]["fixed"]["env"] |= {"SCRIPTED_STARTUP_S": str(startup_s), "SCRIPTED_RECORD": str(record)}
    spec["hardware"] = {"gpus": GPUS}
    spec["startup_timeout_s"] = startup_s + 60
    spec["search"] = {"sampler": "random", "prior": "none"}
    spec["params"] = {"tp": {"choices": TP, "default": 1}, "max_num_seqs": {"choices": MAX_NUM_SEQS, "default": 2},
                      "dtype": {"choices": DTYPES, "default": "bfloat16"}}  # fmt: skip
    spec["workload"] |= {"path": str(REPO / "tests" / "study" / "prompts.jsonl"), "num_prompts": 8}
    path = root / "space.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run(root: Path, name: str, seed: int, startup_s: float, gpus: str | None) -> tuple[float, float, Path]:
    """The run's wall time, the clock time it started at, and its engines' record."""
    record = root / f"{name}.launches"
    tool = root / "bin" / "nvidia-smi"
    tool.parent.mkdir(exist_ok=True)
    tool.write_text("#!/bin/sh\n" + "".join(f"echo '{i}, 300'\n" for i in range(GPUS)))
    tool.chmod(0o755)
    env = os.environ | {
        "AUTOTUNE_STUDIES_DIR": str(root / name),
        "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}",
    }
    space_path = space(root, startup_s, record)
    trials = make_study(space_path, name, root / name, seed)
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space_path), "--study", name,
            "--n-trials", str(trials), "--executable", f"{sys.executable} -m autotune.testing.scripted",
            *(["--gpus", gpus] if gpus else [])]  # fmt: skip
    started, clock = time.monotonic(), time.time()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: study run failed: {done.stderr}")
    return time.monotonic() - started, clock, record


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
    parser.add_argument("--startup-s", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0, help="the order of the configurations")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        alone_s, _, alone = run(root, "one-at-a-time", args.seed, args.startup_s, None)
        slots_s, slots_clock, slots = run(root, "slots", args.seed, args.startup_s, "auto")
        alone_runs, slots_runs = spans(alone), spans(slots)
        print(f"the same {len(configurations(args.seed))} configurations in both runs (order seed {args.seed}), engines "
              f"start in {args.startup_s:g} s, they need 1/2/4/8 of {GPUS} GPUs")  # fmt: skip
        for label, wall, runs in (("one at a time", alone_s, alone_runs), ("--gpus auto", slots_s, slots_runs)):
            print(f"{label:>13}: {wall:6.1f} s, {len(runs)} launches ({wall / len(runs):.2f} s per launch)")
        print(f"GPUs per launch of the slots run: {sorted(len(r['gpus']) for r in slots_runs)}")
        print(f"engines of the slots run that shared a GPU while running: {shared_gpu(slots)}")
        print(f"ratio of wall times (slots / one at a time): {slots_s / alone_s:.2f}")
        # the best any packing could do with the slots run's launches: their GPU-seconds spread over every GPU,
        # against the same launches one after another
        busy = sum(len(r["gpus"]) * (r["stop"] - r["start"]) for r in slots_runs) / GPUS
        serial = sum(r["stop"] - r["start"] for r in slots_runs)
        print(
            f"packing bound of the slots run's launches (GPU-seconds / {GPUS} over engine-seconds): {busy / serial:.2f}"
        )
        # where the rest of the slots run's wall time went: before its first engine, after its last, and GPUs idle
        # in between (waiting for a large trial's GPUs to drain, or for the tuner)
        first = min(r["start"] for r in slots_runs) - slots_clock
        last = slots_clock + slots_s - max(r["stop"] for r in slots_runs)
        print(f"slots run: first engine after {first:.1f} s, {last:.1f} s after the last one stopped; GPUs busy "
              f"{busy / (slots_s - first - last):.0%} of the time in between")  # fmt: skip


if __name__ == "__main__":
    main()
