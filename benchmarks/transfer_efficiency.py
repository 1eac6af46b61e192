"""Transfer efficiency on landscape pairs: node-minutes to 99% of the second landscape's optimum, cold vs warm-started.

    .venv/bin/python benchmarks/transfer_efficiency.py [--pairs NAME,...] [--seeds 10] [--trials 50] [--jobs 1]
        [--json OUT] [--runs RUNS.jsonl]

``--jobs N`` runs the (pair, seed) runs in N processes: each is seeded and has its own storages, so the numbers are
the same as one process gives. ``--runs FILE`` appends each (pair, seed) to FILE as it ends and takes those already
there instead of running them again: a benchmark cut off by a time limit goes on where it stopped.

A pair (``benchmarks/landscapes/transfer/pairs.yaml``, made with its landscapes by make_transfer_landscapes.py, whose
README has the pairs' table) is two landscapes of one tuning problem with one thing changed: the workload, the engine
release (aiconfigurator's two trtllm databases), or the model (a sibling). For each pair and seed, in this run,
three studies, each autotune's own path (prepare_study + run_trials, as ``autotune study run``; the space's defaults,
the same trial budget ``--trials``, the same seed):

- ``A``: a study on the first landscape, run to its whole budget (a finished study, as ``--warm-start`` takes one:
  what a user has after tuning the old setting).
- ``cold``: a study on the second landscape B, from nothing. The anchor.
- ``warm``: a study on B warm-started from A (``RunOptions.warm_start = (WarmSource(A's storage, A's name),)``, as
  ``study run --warm-start A``): A's rules, out-of-memory failures and measurements copied in, its best three
  re-measured first (the best before the baselines), the warm prior queueing while B's measurements agree with it.

Node-minutes are the studies' own ``node_minutes`` records (launches, benchmarks, failures) of B's trials only: A's
are a sunk cost (the old tuning was done anyway), so they are counted in neither study B; A's own are printed apart.
Printed per pair and pooled: seeds on which each B study reaches 99% of B's optimum (the best SLO-feasible value among
the configurations the static rules accept), the median node-minutes to it over all seeds (a seed that never reaches
it counts as never, so a median of "never" means half the seeds or more never did), the ratio warm / cold of those
medians, the median of each seed's own ratio (seeds where both reached), trials to 99%, the final best as a share of
B's optimum, the warm prior's last weight, whether B's optimum is another launch configuration than A's (moved) and
what A's optimum gives on B. Then the issue's targets as lines: warm reaches 99% on ≥ 90% of seeds (pooled, and per
pair); the warm median ≤ 1/3 of the cold one (pooled, and per pair); on no pair warm more than 10% worse than cold
(median node-minutes over 1.1× the cold's, or fewer seeds reaching 99%). Benchmarks are not tests: it prints, it
does not assert.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _harness import Landscape, RunLog, fork_pool, quiet, rank_priors  # noqa: E402

from autotune import records  # noqa: E402
from autotune.search.ranking import feasible  # noqa: E402
from autotune.search.study import RunOptions, prepare_study  # noqa: E402
from autotune.search.warm_start import WarmSource  # noqa: E402
from autotune.search.workers import run_trials  # noqa: E402

PAIRS = REPO / "benchmarks" / "landscapes" / "transfer" / "pairs.yaml"
TARGET, COST_SHARE, REACH_SHARE, WORSE = 0.99, 1 / 3, 0.9, 1.10


def run_study(land: Landscape, directory: Path, name: str, seed: int, trials: int,
              warm: tuple[WarmSource, ...] = ()) -> optuna.Study:  # fmt: skip
    options = RunOptions(name=name, storage=f"sqlite:///{directory}/{name}.db", studies_dir=directory,
                         n_trials=trials, seed=seed, heartbeat_s=0, warm_start=warm)  # fmt: skip
    return run_trials(prepare_study(land.space, land.path, options))


def trajectory(study: optuna.Study, optimum: float) -> dict:
    """Node-minutes and trials when the study's best first reached 99% of ``optimum`` (None: never), what it spent,
    its final best as a share of ``optimum``, and its trials marked by the warm start."""
    spent, best, hit = 0.0, 0.0, None
    marks = {"warm_of": 0, "warm_predicted": 0}
    for count, trial in enumerate(sorted(study.trials, key=lambda t: t.number), start=1):
        spent += trial.user_attrs.get("node_minutes") or 0.0
        if trial.user_attrs.get("load") and feasible(trial):
            best = max(best, trial.values[0])
        if hit is None and best >= TARGET * optimum * (1 - 1e-9):
            hit = (spent, count)
        record = records.TrialRecord.of(trial)
        marks["warm_of"] += record.warm_of is not None
        marks["warm_predicted"] += record.warm_predicted is not None
    weights = records.StudyRecord.of(study).warm_weights
    return {"cost_99": hit[0] if hit else None, "trials_99": hit[1] if hit else None, "spent": spent,
            "final": best / optimum, "last_weight": weights[-1].weight if weights else None, **marks}  # fmt: skip


def one_seed(pair: dict, seed: int, trials: int) -> dict:
    """A, then B cold and B warm-started from A, with ``seed``."""
    a, b = landscape(pair["a"]), landscape(pair["b"])
    # /dev/shm: a study writes every attribute in its own transaction; on tmpfs that costs nothing
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:  # noqa: S108
        directory = Path(tmp)
        first = run_study(a, directory, "a", seed, trials)
        cold = run_study(b, directory, "cold", seed, trials)
        warm = run_study(b, directory, "warm", seed, trials, (WarmSource(storage=f"sqlite:///{tmp}/a.db", study="a"),))
        return {"seed": seed, "a": trajectory(first, a.optimum), "cold": trajectory(cold, b.optimum),
                "warm": trajectory(warm, b.optimum)}  # fmt: skip


def _never(value: float | None) -> float:
    return math.inf if value is None else value


def summarize(name: str, runs: list[dict], moved: bool | None, a_on_b: float | None) -> dict:
    row: dict = {"pair": name, "seeds": len(runs), "moved": moved, "a_on_b": a_on_b}
    for way in ("a", "cold", "warm"):
        costs = [_never(r[way]["cost_99"]) for r in runs]
        reached = [r[way]["trials_99"] for r in runs if r[way]["trials_99"] is not None]
        row |= {f"{way}_reached_99": len(reached), f"{way}_median_cost_99": statistics.median(costs),
                f"{way}_median_trials_99": statistics.median(reached) if reached else None,
                f"{way}_median_final": statistics.median(r[way]["final"] for r in runs),
                f"{way}_median_spent": statistics.median(r[way]["spent"] for r in runs)}  # fmt: skip
    cold, warm = row["cold_median_cost_99"], row["warm_median_cost_99"]
    row["ratio_warm_to_cold"] = warm / cold if math.isfinite(cold) and math.isfinite(warm) and cold else None
    paired = [
        r["warm"]["cost_99"] / r["cold"]["cost_99"] for r in runs if r["warm"]["cost_99"] and r["cold"]["cost_99"]
    ]
    row["median_seed_ratio"] = statistics.median(paired) if paired else None
    weights = [r["warm"]["last_weight"] for r in runs if r["warm"]["last_weight"] is not None]
    row["warm_median_last_weight"] = statistics.median(weights) if weights else None
    row["warm_median_re_measured"] = statistics.median(r["warm"]["warm_of"] for r in runs)
    row["warm_median_predicted"] = statistics.median(r["warm"]["warm_predicted"] for r in runs)
    row["warm_worse"] = row["warm_reached_99"] < row["cold_reached_99"] or (
        math.isfinite(cold) and warm > WORSE * cold
    ) or (not math.isfinite(warm) and math.isfinite(cold))  # fmt: skip
    return row


def _fmt(value, pattern: str = "{:.0f}") -> str:
    if value is None:
        return "-"
    return "never" if value == math.inf else pattern.format(value)


def print_row(row: dict, change: str = "") -> None:
    n = row["seeds"]
    moved = "" if row["moved"] is None else (" — OPTIMUM MOVED" if row["moved"] else " — optimum not moved")
    on_b = "" if row["a_on_b"] is None else f"; A's optimum gives {row['a_on_b']:.1%} of B's"
    print(f"{row['pair']} ({n} seeds){': ' + change if change else ''}{moved}{on_b}")
    for way, label in (("cold", "B cold"), ("warm", "B warm")):
        print(f"  {label:<7} 99%: {row[f'{way}_reached_99']}/{n} seeds, median {_fmt(row[f'{way}_median_cost_99'])} "
              f"node-min / {_fmt(row[f'{way}_median_trials_99'])} trials | final best "
              f"{row[f'{way}_median_final']:.3f} of B's optimum | spent {_fmt(row[f'{way}_median_spent'])} "
              "node-min")  # fmt: skip
    print(f"  warm / cold, median node-min to 99%: {_fmt(row['ratio_warm_to_cold'], '{:.2f}')} (median of each "
          f"seed's ratio {_fmt(row['median_seed_ratio'], '{:.2f}')}) | warm: {_fmt(row['warm_median_re_measured'])} "
          f"of A's best re-measured, {_fmt(row['warm_median_predicted'])} queued by the warm prior, its last weight "
          f"{_fmt(row['warm_median_last_weight'], '{:.2f}')} (medians) | A itself (sunk): 99% of A's optimum on "
          f"{row['a_reached_99']}/{n}, spent {_fmt(row['a_median_spent'])} node-min"
          f"{' | WARM WORSE THAN COLD (>10%)' if row['warm_worse'] else ''}", flush=True)  # fmt: skip


def print_targets(rows: list[dict], pooled: dict) -> None:
    n = pooled["seeds"]
    share = pooled["warm_reached_99"] / n
    print(f"target: warm reaches 99% on ≥ {REACH_SHARE:.0%} of seeds: pooled {pooled['warm_reached_99']}/{n} = "
          f"{share:.0%} ({'met' if share >= REACH_SHARE else 'NOT met'}); per pair: "
          + ", ".join(f"{r['pair']} {r['warm_reached_99']}/{r['seeds']}" for r in rows))  # fmt: skip
    ratio = pooled["ratio_warm_to_cold"]
    met = ratio is not None and ratio <= COST_SHARE
    print(f"target: warm median node-min to 99% ≤ 1/3 of cold's: pooled {_fmt(ratio, '{:.2f}')} "
          f"({'met' if met else 'NOT met'}); per pair: "
          + ", ".join(f"{r['pair']} {_fmt(r['ratio_warm_to_cold'], '{:.2f}')}" for r in rows))  # fmt: skip
    worse = [r["pair"] for r in rows if r["warm_worse"]]
    print(f"target: on no pair warm > 10% worse than cold: {'met' if not worse else 'NOT met: ' + ', '.join(worse)}")


def pairs() -> list[dict]:
    return yaml.safe_load(PAIRS.read_text())


@functools.cache
def landscape(path: str) -> Landscape:
    return Landscape(REPO / path)


def run_seed(pair: dict, seed: int, trials: int) -> dict:
    """One seed of one pair (in a worker process)."""
    quiet()
    os.chdir(REPO)  # the landscapes name their tables from the repository root
    return one_seed(pair, seed, trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", help="comma-separated pair names (default: every pair of pairs.yaml)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=50, help="the budget of each study (A, B cold, B warm)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in this many processes at once")
    parser.add_argument("--json", type=Path, help="also write every seed's numbers and the summaries here")
    parser.add_argument("--runs", type=Path, help="append each finished seed here; take the seeds already here")
    args = parser.parse_args()
    chosen = [p for p in pairs() if not args.pairs or p["pair"] in args.pairs.split(",")]
    os.chdir(REPO)
    started = time.monotonic()
    print("aiconfigurator 0.12 ships, for h200_sxm: trtllm databases 1.3.0rc20 and 1.3.0rc23, sglang 0.5.14 and "
          "0.5.16, vllm 0.24.0; the newer ones differ only where kernels were recollected (for TRT-LLM: Nemotron-3 "
          "MoE), so the upgrade pair is Nemotron-3 Ultra on 1.3.0rc20 → 1.3.0rc23 (benchmarks/landscapes/transfer/"
          "README.md). Node-minutes count study B's own trials: A's are a sunk cost.\n")  # fmt: skip
    log = RunLog(args.runs)
    todo = [(p, s, key) for p in chosen for s in range(args.seeds)
            if log.get(key := f"{p['pair']}/seed={s}/trials={args.trials}") is None]  # fmt: skip
    rank_priors([landscape(p[side]).space for p in {t[0]["pair"]: t[0] for t in todo}.values() for side in "ab"],
                args.jobs)  # fmt: skip
    with fork_pool(args.jobs) as pool:
        futures = {pool.submit(run_seed, p, s, args.trials): key for p, s, key in todo}
        for future in concurrent.futures.as_completed(futures):
            log.add(futures[future], future.result())
            print(f"  finished {futures[future]}", flush=True)
    rows, every, pooled = [], {}, []
    for pair in chosen:
        runs = [log.get(f"{pair['pair']}/seed={seed}/trials={args.trials}") for seed in range(args.seeds)]
        a, b = landscape(pair["a"]), landscape(pair["b"])
        row = summarize(pair["pair"], runs, a.optimum_key != b.optimum_key, b.best_of(a.optimum_key) / b.optimum)
        every[pair["pair"]], pooled = runs, pooled + runs
        rows.append(row)
        print_row(row, pair["change"])
    total = summarize("pooled", pooled, None, None)
    print_row(total)
    print()
    print_targets(rows, total)
    print(f"wall time {time.monotonic() - started:.0f} s ({args.jobs} processes), {args.trials} trials per study")
    if args.json:
        args.json.write_text(json.dumps({"rows": [*rows, total], "seeds": every}, indent=1))


if __name__ == "__main__":
    main()
