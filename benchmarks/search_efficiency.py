"""Search efficiency on performance landscapes: GPU time (node-minutes) to reach 95% and 99% of the optimum.

    .venv/bin/python benchmarks/search_efficiency.py [LANDSCAPE.yaml ...] [--split design|eval|all]
        [--names named,unnamed] [--seeds 10] [--trials 200] [--one-knob-trials 200] [--json OUT] [--jobs N]
        [--runs RUNS.jsonl]

``--split``: the landscapes of one half of the design/evaluation split (benchmarks/landscape_catalog.py's
``split_of``: a rule on the name; the design half is what the search may be tuned on, the evaluation half what no
change is tuned on). ``--names``: autotune runs on each landscape with its model named (its hub id) and unnamed (the
same space with the model renamed to a local path, ``/models/finetune-XXXXXX``, that the prior and the model-specific
rules know nothing of, as a user's own fine-tune); the other strategies never read the model's name, so they run once
and stand beside both. The report gives, per landscape and naming, autotune's median node-minutes to 99% of the
optimum, the share of its seeds that get there, the one-knob method's and plain TPE's medians and autotune / one-knob;
then each half pooled, and issue #48's bars checked.

``--jobs N`` runs the (landscape, strategy, seed) runs in N processes: each run is seeded and has its own storage, so
the rows are the same as one process gives (only ``wall_s`` differs). ``--runs FILE`` appends each run to FILE as it
ends (one line printed per run as well) and takes the runs already there instead of running them again: a benchmark
cut off by a time limit goes on where it stopped.

A landscape is a search space whose engine is the simulator's table model in direct mode (``simulate:
{performance_model: table, mode: direct, table: X.csv}``): every (launch configuration, load) of the space has a
row measured or modelled beforehand (default: every ``benchmarks/landscapes/*.yaml``). The optimum is the best
SLO-feasible row. Strategies, all in this run, on the same landscapes and seeds:

- ``autotune``: `autotune study run`'s own path (prepare_study + run_trials, the space's defaults: one launch per
  trial with a load sweep, learned failures, the prior), costs as the study records them (``node_minutes``).
- ``tpe``: the anchor: a hand-written Optuna loop, plain ``TPESampler``, every suggestion (launch knobs and load
  alike) launched; SLOs and failures as Optuna 5 constraints.
- ``random``: the same loop with ``RandomSampler``.
- ``one_knob``: the seed study's method: from the defaults, each knob in turn over its values, the others at the
  best so far, repeated until a pass changes nothing (at most ``--one-knob-trials`` launches).

Default strategies: autotune, tpe, one_knob (``--strategies`` adds random).

Cost model (node-minutes) for the anchors, as the space's ``simulate.cost``: a launch measured = launch + one
benchmark (8 + 2), a failed launch 6, nothing for a configuration ``one_knob`` already measured. A "repeated failed
launch" is a launch that fails although an earlier failure already ruled it out: the same configuration, or one that
needs at least the memory of a configuration that ran out at its lightest load (autotune.search.learning.needs_at_least),
or, for autotune, one that breaks a rule learned before it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import optuna

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _efficiency_report import Run, efficiency_report, summarize  # noqa: E402
from _harness import Landscape, RunLog, fork_pool, quiet, rank_priors  # noqa: E402
from landscape_catalog import landscape_paths, split_of, unnamed_copy  # noqa: E402

from autotune.search.learning import needs_at_least  # noqa: E402
from autotune.search.ranking import feasible  # noqa: E402
from autotune.search.study import RunOptions, prepare_study  # noqa: E402
from autotune.search.workers import run_trials  # noqa: E402

STRATEGIES = ("autotune", "tpe", "random", "one_knob")
DEFAULT_STRATEGIES = ("autotune", "tpe", "one_knob")
NAMINGS = ("named", "unnamed")
UNNAMED_FOLDER = Path(tempfile.gettempdir()) / "autotune-unnamed-landscapes"  # the renamed copies of the spaces


def run_autotune(landscape: Landscape, seed: int, trials: int) -> Run:
    # /dev/shm: a study writes every attribute in its own transaction; on tmpfs that costs nothing
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:  # noqa: S108
        options = RunOptions(name="s", storage=f"sqlite:///{tmp}/s.db", studies_dir=Path(tmp), n_trials=trials,
                             seed=seed, heartbeat_s=0)  # fmt: skip
        study = run_trials(prepare_study(landscape.space, landscape.path, options))
        run, spent, best = Run(), 0.0, 0.0
        failed_configs: list = []
        for trial in sorted(study.trials, key=lambda t: t.number):
            attrs = trial.user_attrs
            spent += attrs.get("node_minutes") or 0.0
            if attrs.get("load") and feasible(trial):
                best = max(best, trial.values[0])
            failed = attrs.get("launched") and attrs.get("failure_kind")
            if failed:
                run.failed_launches += 1
                config = landscape.space.point_from_params(trial.params).server
                run.repeated_failures += _ruled_out(config, failed_configs)
                failed_configs.append((config, attrs["failure_kind"]))
            run.costs.append(spent)
            run.bests.append(best)
        return run


def _ruled_out(config, failures: list) -> bool:
    return any(config == seen or (kind == "oom" and needs_at_least(config, seen)) for seen, kind in failures)


def run_sampler(landscape: Landscape, seed: int, trials: int, sampler: optuna.samplers.BaseSampler) -> Run:
    """The hand-written loop: every suggestion launched and benchmarked at the suggested load."""
    space, cost = landscape.space, landscape.cost
    study = optuna.create_study(direction="maximize", sampler=sampler)
    run, spent, best = Run(), 0.0, 0.0
    failures: list = []
    for _ in range(trials):
        trial = study.ask()
        point = space.point(landscape.engine, {n: p.suggest(trial, n) for n, p in landscape.params.items()})
        result = landscape.outcome(point)
        if isinstance(result, str):
            spent += cost.failed_launch_min
            run.failed_launches += 1
            run.repeated_failures += _ruled_out(point.server, [(c, k) for c, k, load in failures
                                                                if k == "oom" or load == point.client])  # fmt: skip
            failures.append((point.server, result, point.client))
            trial.set_constraint("launch", 1.0)
            for metric in space.objective.slo:
                trial.set_constraint(metric, 1.0)
            study.tell(trial, 0.0)
        else:
            spent += cost.launch_min + cost.benchmark_min
            violations = {m: (result[m] - limit) / limit for m, limit in space.objective.slo.items()}
            trial.set_constraint("launch", 0.0)
            for metric, violation in violations.items():
                trial.set_constraint(metric, violation)
            value = result[space.objective.metrics[0].name]
            if all(v <= 0 for v in violations.values()):
                best = max(best, value)
            study.tell(trial, value)
        run.costs.append(spent)
        run.bests.append(best)
    return run


def run_one_knob(landscape: Landscape, seed: int, trials: int) -> Run:
    """The seed study's method: one knob at a time from the defaults (knob order shuffled by the seed)."""
    import random

    space, cost = landscape.space, landscape.cost
    names = list(landscape.params)
    random.Random(seed).shuffle(names)
    current = {n: p.default_value() for n, p in landscape.params.items()}
    run, spent, best, seen = Run(), 0.0, 0.0, set()
    current_value = -math.inf
    changed = True
    while changed and len(run.costs) < trials:
        changed = False
        for name in names:
            for value in landscape.params[name].values():
                candidate = current | {name: value}
                key = json.dumps(candidate, sort_keys=True, default=str)
                if key in seen or len(run.costs) >= trials:
                    continue
                seen.add(key)
                point = space.point(landscape.engine, candidate)
                result = landscape.outcome(point)
                if isinstance(result, str):
                    spent += cost.failed_launch_min
                    run.failed_launches += 1
                else:
                    spent += cost.launch_min + cost.benchmark_min
                measured = landscape.value(point)
                if measured is not None and measured > current_value:
                    current, current_value, changed = candidate, measured, True
                    best = max(best, measured)
                run.costs.append(spent)
                run.bests.append(best)
    return run


def run_strategy(name: str, landscape: Landscape, seed: int, trials: int) -> Run:
    if name == "autotune":
        return run_autotune(landscape, seed, trials)
    if name == "tpe":
        return run_sampler(landscape, seed, trials, optuna.samplers.TPESampler(seed=seed))
    if name == "random":
        return run_sampler(landscape, seed, trials, optuna.samplers.RandomSampler(seed=seed))
    return run_one_knob(landscape, seed, trials)


class Task(NamedTuple):
    """One run: a strategy on a landscape (its model named, or renamed to one the prior does not know) with a seed."""

    path: Path
    strategy: str
    seed: int
    trials: int
    naming: str = "named"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("landscapes", nargs="*", type=Path)
    parser.add_argument(
        "--split",
        choices=("design", "eval", "all"),
        default="all",
        help="the landscapes of this half (landscape_catalog.split_of; default: all)",
    )
    parser.add_argument(
        "--names",
        default=",".join(NAMINGS),
        help="run autotune with the model named, renamed to a path the prior does not know, or both",
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=200, help="each run's trials (autotune, tpe, random)")
    parser.add_argument("--one-knob-trials", type=int, default=200, help="one_knob's launches (it stops itself)")
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES), help=f"of {', '.join(STRATEGIES)}")
    parser.add_argument("--json", type=Path, help="also write every summary row here")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run the seeds in (the rows do not change)")
    parser.add_argument("--runs", type=Path, help="append each finished run here; take the runs already here")
    args = parser.parse_args()
    quiet()
    paths = args.landscapes or landscape_paths(REPO / "benchmarks" / "landscapes", args.split)
    strategies, namings = args.strategies.split(","), args.names.split(",")
    started_all = time.monotonic()
    log = RunLog(args.runs)
    tasks = [Task(path, strategy, seed, args.one_knob_trials if strategy == "one_knob" else args.trials, naming)
             for path in paths for strategy in strategies for naming in _namings(strategy, namings)
             for seed in range(args.seeds)]  # fmt: skip
    _run_missing(tasks, log, args.jobs)
    rows = []
    for path in paths:
        for naming in namings:
            landscape = _landscape(path, naming)
            for strategy in strategies:
                trials = args.one_knob_trials if strategy == "one_knob" else args.trials
                ran_as = naming if strategy == "autotune" else "named"  # the others never read the model's name
                runs = [Run(**log.get(_key(Task(path, strategy, seed, trials, ran_as)))) for seed in range(args.seeds)]
                row = {"landscape": path.stem, "split": split_of(path.stem), "naming": naming, "strategy": strategy,
                       **summarize(runs, landscape.optimum)}  # fmt: skip
                row["runs"] = [(asdict(run), landscape.optimum) for run in runs]
                rows.append(row)
                print(_line(row), flush=True)
    report = efficiency_report(rows, strategies, namings)
    print(report.text)
    print(f"wall time: {time.monotonic() - started_all:.0f} s with {args.jobs} process(es)")
    if args.json:
        summary = [{k: v for k, v in row.items() if k != "runs"} for row in rows]
        args.json.write_text(json.dumps({"rows": summary, "pooled": report.pooled}, indent=1))


def _namings(strategy: str, namings: list[str]) -> list[str]:
    """Only autotune reads the model's name (its prior, its rules); the others run once, as named."""
    return namings if strategy == "autotune" else ["named"]


@functools.cache
def _landscape(path: Path, naming: str = "named") -> Landscape:
    if naming == "unnamed":
        path = unnamed_copy(path, REPO, UNNAMED_FOLDER)
    return Landscape(path)


def _one_run(task: Task) -> dict:
    quiet()
    return asdict(run_strategy(task.strategy, _landscape(task.path, task.naming), task.seed, task.trials))


def _key(task: Task) -> str:
    """A run's key in the --runs log (a named landscape's keys are those of the benchmark before --names)."""
    suffix = "" if task.naming == "named" else f"@{task.naming}"
    return f"{task.path.stem}{suffix}/{task.strategy}/seed={task.seed}/trials={task.trials}"


def _run_missing(tasks: list[Task], log: RunLog, jobs: int) -> None:
    """Run every task ``log`` does not hold yet (in ``jobs`` processes), each logged and printed as it ends."""
    missing = [task for task in tasks if log.get(_key(task)) is None]
    ranked = sorted({(t.path, t.naming) for t in missing if t.strategy == "autotune"})
    rank_priors([_landscape(path, naming).space for path, naming in ranked], jobs)
    if jobs == 1:
        finished = ((task, _one_run(task)) for task in missing)
    else:
        pool = fork_pool(jobs)
        futures = {pool.submit(_one_run, task): task for task in missing}
        finished = ((futures[f], f.result()) for f in concurrent.futures.as_completed(futures))
    for task, run in finished:
        log.add(_key(task), run)
        hit = Run(**run).reached(0.99 * _landscape(task.path, task.naming).optimum * (1 - 1e-9))
        print(f"  run {_key(task)}: 99% " + (f"at {hit[1]:.0f} node-min / {hit[0]} trials" if hit else "never"),
              flush=True)  # fmt: skip
    if jobs > 1:
        pool.shutdown()


def _line(row: dict) -> str:
    def fmt(value):
        return "-" if value is None else (f"{value:.0f}" if isinstance(value, float) else str(value))

    name = row["landscape"] + ("" if row.get("naming", "named") == "named" else f"@{row['naming']}")
    return (f"{name:<36} {row['strategy']:<9} 95%: {row['reached_95']}/{row['seeds']} seeds, "
            f"median {fmt(row['median_node_min_95'])} node-min / {fmt(row['median_trials_95'])} trials | "
            f"99%: {row['reached_99']}/{row['seeds']}, median {fmt(row['median_node_min_99'])} node-min / "
            f"{fmt(row['median_trials_99'])} trials | failed launches {row['failed_launches']}, repeated "
            f"{row['repeated_failed_launches']} | final best {row['best_share_median']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
