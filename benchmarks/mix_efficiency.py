"""Mix efficiency on multi-workload landscapes: node-minutes to 99% of the mix optimum, one study vs six vs the seed's.

    .venv/bin/python benchmarks/mix_efficiency.py [--landscapes NAME,...] [--seeds 10] [--trials 50] [--jobs 1]
        [--json OUT]

A landscape is a space with ``workloads:`` on the table model (``benchmarks/landscapes/mix/*.yaml``, made by
make_mix_landscapes.py: the seed study's six workloads, each with its SLO). A configuration's mix value is the space's
``objective.mix`` (there: the geometric mean over the workloads of its best SLO-feasible total throughput, over the
workload's loads, relative to the space defaults'); infeasible on one workload, it has none. The mix optimum is the
best mix value among the configurations the static rules accept. Three ways, on the same landscapes and seeds, in
this run, each autotune's own study path (prepare_study + run_trials, as ``autotune study run``; the space's defaults,
the same trial budget per study):

- ``mix``: one study of the space: each launch measured on every workload. The anchor.
- ``separate``: today's way: one single-workload study per workload (``workload:`` = that workload, its SLO, its
  loads), node-minutes added up. Two costs: (1) ``sum to own 99%``: the six studies' node-minutes each to reach 99%
  of its own workload's optimum, added up (a study that never does counts its whole budget) — what tuning the six
  separately costs before one command is chosen; (2) its mix answer: the six studies run side by side, and after
  each round (one trial of each) the answer is, among the six incumbents, the one with the best mix value (what
  ``study validate`` of each on all six would find; those validation launches are not counted, which favours this
  way); node-minutes to 99% = the six studies' costs added up at the first round whose answer reaches it.
- ``seed``: the seed study's way: the ShareGPT study of ``separate`` (the same study), its best scored on the mix.

Printed per landscape and pooled: seeds reaching 99% of the mix optimum, median node-minutes to it, the final mix
value of each way as a share of the mix optimum and as a ratio to the mix study's, and the issue's target: on how many
seeds the mix study reaches 99% with at most a third of the node-minutes of the separate studies added up (1).
Benchmarks are not tests: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _harness import fork_pool, quiet, rank_priors, single_workload_document  # noqa: E402

from autotune.engines import get_engine  # noqa: E402
from autotune.errors import StartupFailure, UnsupportedConfig  # noqa: E402
from autotune.search.ranking import feasible  # noqa: E402
from autotune.search.study import RunOptions, prepare_study  # noqa: E402
from autotune.search.workers import run_trials  # noqa: E402
from autotune.sim.models import TableModel  # noqa: E402
from autotune.space.files import load_space  # noqa: E402
from autotune.space.schema import SearchSpace, Workload  # noqa: E402

LANDSCAPES = REPO / "benchmarks" / "landscapes" / "mix"
TARGET, COST_SHARE = 0.99, 1 / 3
SEED_WORKLOAD = "sharegpt"


def config_key(server) -> str:
    return json.dumps(server.model_dump(mode="json"), sort_keys=True)


class MixLandscape:
    """A multi-workload table: each configuration's best feasible throughput per workload, mix values, optima."""

    def __init__(self, path: Path) -> None:
        self.path, self.space = path, load_space(path)
        self.engine = next(iter(self.space.engines))
        self.workloads = self.space.mix_workloads()
        per_config: dict[str, dict[str, float]] = {}
        for point in self.space.enumerate(self.engine, launches_only=True):
            try:
                get_engine(self.engine).check(point.server, self.space.hardware)
            except UnsupportedConfig:
                continue  # no strategy launches what the static rules reject
            bests = {w.name: self.best(point.server, w) for w in self.workloads}
            per_config[config_key(point.server)] = {n: v for n, v in bests.items() if v is not None}
        self.per_config = per_config
        self.baseline = per_config[config_key(self.space.default_point(self.engine).server)]
        self.mix = {k: v for k, per in per_config.items() if (v := self.mix_value(per)) is not None}
        self.optimum = max(self.mix.values())
        self.own_optimum = {w.name: max(p.get(w.name, 0.0) for p in per_config.values()) for w in self.workloads}

    def best(self, server, workload: Workload) -> float | None:
        """The best SLO-feasible throughput of ``server`` on ``workload`` over its loads, or None."""
        slo, metric = self.space.workload_slo(workload), self.space.objective.metrics[0].name
        values = []
        for load in self.space.workload_load_levels(self.engine, workload):
            measured = workload.model_copy(update=load)
            try:
                result = TableModel(self.space.simulate.table, server).evaluate(measured, [None], "m")
            except StartupFailure:
                continue
            if all(result[m] <= limit for m, limit in slo.items()):
                values.append(result[metric])
        return max(values, default=None)

    def mix_value(self, per: dict[str, float]) -> float | None:
        """The space's mix of per-workload bests relative to the defaults'; None if infeasible on a workload."""
        if any(w.name not in per or w.name not in self.baseline for w in self.workloads):
            return None
        weights = {w.name: w.weight for w in self.workloads}
        ratios = {n: per[n] / self.baseline[n] for n in weights}
        total = sum(weights.values())
        if self.space.objective.mix == "worst":
            return min(ratios.values())
        if self.space.objective.mix == "weighted_mean":
            return sum(weights[n] * r for n, r in ratios.items()) / total
        return math.exp(sum(weights[n] * math.log(r) for n, r in ratios.items()) / total)

    def share(self, key: str | None) -> float:
        """A configuration's mix value as a share of the mix optimum (0: infeasible on a workload, or none)."""
        return self.mix.get(key, 0.0) / self.optimum if key else 0.0

    def single_space(self, workload: Workload, directory: Path) -> tuple[SearchSpace, Path]:
        """Today's one-workload space for ``workload``: its own SLO and loads, the same knobs and table."""
        document = single_workload_document(yaml.safe_load(self.path.read_text()), workload.name)
        document["simulate"]["table"] = str(REPO / self.space.simulate.table)
        path = directory / f"{self.path.stem}-{workload.name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return load_space(path), path


def run_study(space: SearchSpace, path: Path, seed: int, trials: int) -> list[optuna.trial.FrozenTrial]:
    # /dev/shm: a study writes every attribute in its own transaction; on tmpfs that costs nothing
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:  # noqa: S108
        options = RunOptions(name="s", storage=f"sqlite:///{tmp}/s.db", studies_dir=Path(tmp), n_trials=trials,
                             seed=seed, heartbeat_s=0)  # fmt: skip
        study = run_trials(prepare_study(space, path, options))
        return sorted(study.trials, key=lambda t: t.number)


@dataclass
class Trajectory:
    """A study trial by trial: cumulative node-minutes, its incumbent (configuration key) and the incumbent's value."""

    costs: list[float] = field(default_factory=list)
    incumbents: list[str | None] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, space: SearchSpace, trials: list) -> Trajectory:
        run, spent, best, incumbent = cls(), 0.0, -math.inf, None
        for trial in trials:
            spent += trial.user_attrs.get("node_minutes") or 0.0
            if feasible(trial) and trial.values and trial.values[0] > best:
                best, incumbent = trial.values[0], config_key(space.point_from_params(trial.params).server)
            run.costs.append(spent)
            run.incumbents.append(incumbent)
            run.values.append(max(best, 0.0))
        return run

    def at(self, i: int) -> tuple[float, str | None, float]:
        i = min(i, len(self.costs) - 1)
        return self.costs[i], self.incumbents[i], self.values[i]

    def first(self, reached) -> float | None:
        """Node-minutes when ``reached(i)`` first holds, or None."""
        return next((self.costs[i] for i in range(len(self.costs)) if reached(i)), None)


def early_stops(land: MixLandscape, trials: list) -> dict:
    """Launches the mix study stopped measuring early, and those of them whose full mix (from the table) would have
    beaten the incumbent of the time: a stop that hid a better configuration."""
    incumbent, stops, wrong = 0.0, 0, 0
    for trial in trials:
        if trial.user_attrs.get("mix_stopped_early"):
            stops += 1
            key = config_key(land.space.point_from_params(trial.params).server)
            wrong += land.mix.get(key, 0.0) > incumbent * (1 + 1e-9)
        if feasible(trial) and trial.values:
            incumbent = max(incumbent, trial.values[0])
    return {"mix_early_stops": stops, "mix_wrong_stops": wrong}


def one_seed(land: MixLandscape, seed: int, trials: int, directory: Path) -> dict:
    """The three ways on ``land`` with ``seed``: node-minutes to 99% of the mix optimum and final mix shares."""
    mix_trials = run_study(land.space, land.path, seed, trials)
    mix = Trajectory.of(land.space, mix_trials)
    goal = TARGET * (1 - 1e-9)
    # the mix study's own values are mix values relative to its baseline, the same defaults as ours
    mismatch = max((abs(v / land.optimum - land.share(k)) for k, v in zip(mix.incumbents, mix.values, strict=True)
                    if k), default=0.0)  # fmt: skip
    out: dict = {"seed": seed, "mix_cost_99": mix.first(lambda i: mix.values[i] / land.optimum >= goal),
                 "mix_final": mix.values[-1] / land.optimum, "mix_spent": mix.costs[-1],
                 "mix_value_mismatch": mismatch, **early_stops(land, mix_trials)}  # fmt: skip
    singles: dict[str, Trajectory] = {}
    for workload in land.workloads:
        space, path = land.single_space(workload, directory)
        singles[workload.name] = Trajectory.of(space, run_study(space, path, seed, trials))
    own = {}
    for name, run in singles.items():
        cost = run.first(lambda i, r=run, n=name: r.values[i] >= TARGET * land.own_optimum[n] * (1 - 1e-9))
        own[name] = (cost if cost is not None else run.costs[-1], cost is not None)
    out["separate_sum_own_99"] = sum(c for c, _ in own.values())
    out["separate_all_own_99"] = all(ok for _, ok in own.values())
    rounds = max(len(r.costs) for r in singles.values())
    rr_cost, rr_final = None, 0.0
    for i in range(rounds):
        points = [r.at(i) for r in singles.values()]
        answer = max(land.share(key) for _, key, _ in points)
        if rr_cost is None and answer >= goal:
            rr_cost = sum(cost for cost, _, _ in points)
        rr_final = answer
    out |= {"separate_cost_99": rr_cost, "separate_final": rr_final,
            "separate_spent": sum(r.costs[-1] for r in singles.values())}  # fmt: skip
    seed_run = singles.get(SEED_WORKLOAD) or next(iter(singles.values()))
    out |= {"seed_final": land.share(seed_run.incumbents[-1]), "seed_spent": seed_run.costs[-1],
            "seed_cost_99": seed_run.first(lambda i: land.share(seed_run.incumbents[i]) >= goal)}  # fmt: skip
    mix_cost = out["mix_cost_99"]
    out["target_met"] = mix_cost is not None and mix_cost <= COST_SHARE * out["separate_sum_own_99"]
    return out


def summarize(name: str, runs: list[dict]) -> dict:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    def reached(key: str) -> int:
        return sum(r[key] is not None for r in runs)

    row = {"landscape": name, "seeds": len(runs)}
    for way in ("mix", "separate", "seed"):
        row |= {f"{way}_reached_99": reached(f"{way}_cost_99"), f"{way}_median_cost_99": median(f"{way}_cost_99"),
                f"{way}_median_final": median(f"{way}_final"), f"{way}_min_final": min(r[f"{way}_final"] for r in runs),
                f"{way}_median_spent": median(f"{way}_spent")}  # fmt: skip
    row["separate_median_sum_own_99"] = median("separate_sum_own_99")
    row["separate_seeds_all_own_99"] = sum(r["separate_all_own_99"] for r in runs)
    ratios = [r["mix_cost_99"] / r["separate_sum_own_99"] for r in runs if r["mix_cost_99"] is not None]
    row["median_cost_ratio_mix_to_separate_sum"] = statistics.median(ratios) if ratios else None
    to_answer = [r["mix_cost_99"] / r["separate_cost_99"] for r in runs if r["mix_cost_99"] and r["separate_cost_99"]]
    row["median_cost_ratio_mix_to_separate_answer"] = statistics.median(to_answer) if to_answer else None
    row["target_met"] = sum(r["target_met"] for r in runs)
    row["max_mix_value_mismatch"] = max(r["mix_value_mismatch"] for r in runs)
    row["mix_early_stops"] = sum(r["mix_early_stops"] for r in runs)
    row["mix_wrong_stops"] = sum(r["mix_wrong_stops"] for r in runs)
    return row


def _fmt(value, pattern: str = "{:.0f}") -> str:
    return "-" if value is None else pattern.format(value)


def print_row(row: dict) -> None:
    n, anchor = row["seeds"], row["mix_median_final"] or 1.0
    print(f"{row['landscape']} ({n} seeds)")
    print(f"  mix study        99%: {row['mix_reached_99']}/{n} seeds, median {_fmt(row['mix_median_cost_99'])} "
          f"node-min | final mix {row['mix_median_final']:.3f} of the optimum (min {row['mix_min_final']:.3f}) "
          f"| spent {_fmt(row['mix_median_spent'])} node-min")  # fmt: skip
    print(f"  separate (6)     99%: {row['separate_reached_99']}/{n} seeds, median "
          f"{_fmt(row['separate_median_cost_99'])} node-min (best of the six bests on the mix) | sum to own 99%: "
          f"median {_fmt(row['separate_median_sum_own_99'])} node-min (all six reached on "
          f"{row['separate_seeds_all_own_99']}/{n}) | final mix {row['separate_median_final']:.3f} "
          f"(min {row['separate_min_final']:.3f}; {row['separate_median_final'] / anchor:.3f}× the mix study's) "
          f"| spent {_fmt(row['separate_median_spent'])} node-min")  # fmt: skip
    print(f"  seed (ShareGPT)  99%: {row['seed_reached_99']}/{n} seeds | final mix {row['seed_median_final']:.3f} "
          f"(min {row['seed_min_final']:.3f}; {row['seed_median_final'] / anchor:.3f}× the mix study's) | spent "
          f"{_fmt(row['seed_median_spent'])} node-min")  # fmt: skip
    ratio = row["median_cost_ratio_mix_to_separate_sum"]
    answer = row["median_cost_ratio_mix_to_separate_answer"]
    print(f"  mix study's node-min to 99% / separate sum to own 99%: median {_fmt(ratio, '{:.2f}')}; / separate's "
          f"to its mix answer at 99%: median {_fmt(answer, '{:.2f}')}; target (99% "
          f"with ≤ 1/3 of it) met on {row['target_met']}/{n} seeds; max |study value - table value| "
          f"{row['max_mix_value_mismatch']:.2g}")  # fmt: skip
    print(f"  mix study's launches stopped early: {row['mix_early_stops']}, of which {row['mix_wrong_stops']} would "
          f"have beaten the incumbent measured in full", flush=True)  # fmt: skip


@functools.cache
def landscape(name: str) -> MixLandscape:
    return MixLandscape(LANDSCAPES / f"{name}.yaml")


def run_seed(name: str, seed: int, trials: int) -> dict:
    """One seed on one landscape, the three ways (in a worker process with ``--jobs``)."""
    quiet()
    os.chdir(REPO)  # the landscapes name their tables from the repository root
    with tempfile.TemporaryDirectory() as tmp:
        return one_seed(landscape(name), seed, trials, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--landscapes", help="comma-separated names (default: every mix landscape)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=50, help="the budget of each study (mix and each single)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in this many processes at once")
    parser.add_argument("--json", type=Path, help="also write every seed's numbers and the summaries here")
    args = parser.parse_args()
    names = args.landscapes.split(",") if args.landscapes else [p.stem for p in sorted(LANDSCAPES.glob("*.yaml"))]
    tasks = [(name, seed) for name in names for seed in range(args.seeds)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:  # each single-workload space once, to rank before the runs fork
        lands = [landscape(name) for name in names]
        rank_priors([space for land in lands for space in
                     (land.space, *(land.single_space(w, Path(tmp))[0] for w in land.workloads))], args.jobs)  # fmt: skip
    with fork_pool(args.jobs) as pool:
        futures = {task: pool.submit(run_seed, *task, args.trials) for task in tasks}
        rows, every, pooled = [], {}, []
        for name in names:
            runs = [futures[(name, seed)].result() for seed in range(args.seeds)]
            every[name], row = runs, summarize(name, runs)
            row["wall_s_since_start"] = round(time.monotonic() - started, 1)
            rows.append(row)
            pooled += runs
            print_row(row)
    if len(names) > 1:
        row = summarize("pooled", pooled)
        rows.append(row)
        print_row(row)
    print(f"wall time {time.monotonic() - started:.0f} s ({args.jobs} processes), {args.trials} trials per study")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "seeds": every}, indent=1))


if __name__ == "__main__":
    main()
