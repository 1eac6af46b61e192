"""benchmarks/workers_stress.py's record of one run (``Run``), its checks from the storage and its report lines
(the module docstring there says what each figure means)."""

from __future__ import annotations

import datetime
import itertools
import math
import os
import signal
import statistics
from dataclasses import dataclass, field

import optuna

from autotune.search.budget import count, study_budget

FINISHED = ("COMPLETE", "PRUNED")
PARTS = ("cycle", "objective", "overhead", "lock_wait", "lock_held", "ask", "tell", "storage", "cpu")


@dataclass
class Run:
    """One study run by ``workers`` processes: what happened, from the storage and the workers' timings."""

    name: str
    workers: int
    budget: int
    kills: list[dict] = field(default_factory=list)  # {"worker": host:pid, "at": datetime}
    exits: list[int] = field(default_factory=list)
    stalled: bool = False
    setup_s: float = 0.0  # from the workers' start to the first trial's (the study's set-up)
    check: dict = field(default_factory=dict)
    timings: list[dict] = field(default_factory=list)


# -- the checks ------------------------------------------------------------------------------------------------------
def check(study: optuna.Study, trials: list, kills: list[dict]) -> dict:
    by_state = {s: [t for t in trials if t.state.name == s] for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING",
                                                                      "WAITING")}  # fmt: skip
    finished = by_state["COMPLETE"] + by_state["PRUNED"]
    stale = [t for t in by_state["FAIL"] if "error" not in t.user_attrs]
    killed_at = {k["worker"]: k["at"] for k in kills}
    return {
        "budget": study_budget(study),
        "launches": count(trials).launches,
        "finished": len(finished),
        "fail_stale": len(stale),
        "fail_error": len(by_state["FAIL"]) - len(stale),
        "left": len(by_state["RUNNING"]),
        "queued_left": len(by_state["WAITING"]),
        "left_running": [t.number for t in by_state["RUNNING"]],
        "kills_with_trial": sum(any(t.user_attrs.get("worker") == k for t in stale) for k in killed_at),
        "retried": sum(_retried(t, finished) for t in stale),
        "lost": sum(1 for t in by_state["COMPLETE"] if t.values is None),
        "duplicates_measured": _duplicates_measured(finished),
        "duplicates_copied": sum(1 for t in finished if "duplicate_of" in t.user_attrs),
        "overlaps": _overlaps(trials, killed_at),
    }


def _retried(failed, finished: list) -> bool:
    """A later trial retried ``failed`` (its retry history says so), with its parameters, and finished."""
    return any(failed.number in t.system_attrs.get("retry_history", []) and t.number > failed.number
               and failed.params.items() <= t.params.items() for t in finished)  # fmt: skip


def _duplicates_measured(finished: list) -> int:
    keys = [t.user_attrs.get("config_key") for t in finished if "duplicate_of" not in t.user_attrs]
    return len(keys) - len(set(keys))


def _overlaps(trials: list, killed_at: dict) -> int:
    """Pairs of trials of one configuration measuring at the same time."""
    intervals: dict[str, list] = {}
    now = datetime.datetime.now()
    for t in trials:
        if not t.user_attrs.get("launched") or "duplicate_of" in t.user_attrs:
            continue
        if t.state.name in FINISHED and "trial_s" in t.user_attrs:
            end = t.datetime_complete
            start = end - datetime.timedelta(seconds=t.user_attrs["trial_s"])
        else:  # killed part-way (or still running): from its start until its worker died
            start = t.datetime_start
            end = min(filter(None, (t.datetime_complete, killed_at.get(t.user_attrs.get("worker")), now)))
        intervals.setdefault(t.user_attrs["config_key"], []).append((start, end))
    count = 0
    for spans in intervals.values():
        latest = None  # the latest end among the spans that started before this one
        for start, end in sorted(spans):
            count += latest is not None and start < latest
            latest = end if latest is None else max(latest, end)
    return count


# -- the summary -----------------------------------------------------------------------------------------------------
def throughput(run: Run, storage: str) -> float:
    study = optuna.load_study(study_name=run.name, storage=storage)
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name in FINISHED]
    span = max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)
    return len(done) / span.total_seconds()


def per_trial(records: list[dict]) -> dict:
    """Means per trial: milliseconds of each part (overhead = cycle − objective), and storage calls."""
    rows = [r | {"overhead": r["cycle"] - r["objective"]} for r in records]
    if not rows:
        return dict.fromkeys((*PARTS, "calls", "sql"), math.nan) | {"methods": {}}
    means = {part: 1000 * statistics.fmean(r[part] for r in rows) for part in PARTS}
    methods = sorted({name for r in rows for name in r.get("methods", {})})
    by_method = {name: sum(r.get("methods", {}).get(name, 0) for r in rows) / len(rows) for name in methods}
    return means | {"calls": statistics.fmean(r["calls"] for r in rows),
                    "sql": statistics.fmean(r.get("sql", 0) for r in rows), "methods": by_method}  # fmt: skip


HEADER = (f"{'run':<22} {'workers':>7} {'trials/s':>8} {'vs 1':>6} {'cycle':>6} {'objective':>9} {'overhead':>8} "
          f"{'vs 1':>6} {'lock wait':>9} {'held':>5} {'busy':>5} {'ask':>5} {'tell':>5} {'storage':>7} {'calls':>5} "
          f"{'SQL':>5} {'CPU':>5}")  # fmt: skip


def row_line(label: str, run: Run, rate: float, anchor: tuple[float, dict]) -> str:
    ms = per_trial(run.timings)
    return (f"{label:<22} {run.workers:>7} {rate:>8.2f} {rate / anchor[0]:>5.2f}x {ms['cycle']:>6.0f} "
            f"{ms['objective']:>9.0f} {ms['overhead']:>8.0f} {ms['overhead'] / anchor[1]['overhead']:>5.1f}x "
            f"{ms['lock_wait']:>9.0f} {ms['lock_held']:>5.0f} {rate * ms['lock_held'] / 1000:>5.2f} {ms['ask']:>5.0f} {ms['tell']:>5.0f} {ms['storage']:>7.0f} "
            f"{ms['calls']:>5.1f} {ms['sql']:>5.0f} {ms['cpu']:>5.0f}")  # fmt: skip


def stress_lines(run: Run, rate: float, stall_s: float) -> list[str]:
    c = run.check
    exact = c["launches"] == c["budget"] and c["fail_error"] == 0 and c["left"] == 0
    bad_exits = [e for e in run.exits if e not in (0, -signal.SIGKILL)]
    early = per_trial([r for r in run.timings if r["trial"] < run.budget // 10])
    late = per_trial([r for r in run.timings if r["trial"] >= run.budget - run.budget // 10])
    return [
        f"stress: {run.workers} workers, budget {run.budget} trials, {len(run.kills)} SIGKILLs (each restarted)"
        + (f" -- STALLED (no trial finished for {stall_s:.0f} s)" if run.stalled else ""),
        f"  launches {c['launches']} = budget {c['budget']}: {'yes' if exact else 'NO'} (finished {c['finished']}); "
        f"FAIL as stale {c['fail_stale']} (kills that left a trial: {c['kills_with_trial']}), retried "
        f"{c['retried']}/{c['fail_stale']}; FAIL as error {c['fail_error']}; left RUNNING {c['left']}, WAITING "
        f"{c['queued_left']}" + (f" (running: {c['left_running'][:10]})" if c["left_running"] else ""),
        f"  lost {c['lost']}; duplicates measured {c['duplicates_measured']} (recognised as duplicate_of, not "
        f"measured: {c['duplicates_copied']}); overlapping measurements of one configuration {c['overlaps']}",
        f"  {rate:.2f} trials/s; setup {run.setup_s:.1f} s (the workers' start to the first trial's); worker exits "
        f"other than 0/SIGKILL: {bad_exits or 'none'}",
        f"  first 10% of trials: cycle {early['cycle']:.0f} ms, storage {early['storage']:.0f} ms; last 10%: cycle "
        f"{late['cycle']:.0f} ms, storage {late['storage']:.0f} ms (each read of the trials re-reads every unfinished "
        "one)",
    ]


def scaling_line(rates: dict[int, float]) -> str:
    """Throughput by worker count, and the first count after which more workers add less than 10%."""
    counts = sorted(rates)
    stop = next((a for a, b in itertools.pairwise(counts) if rates[b] < 1.1 * rates[a]), counts[-1])
    listed = ", ".join(f"{n}: {rates[n]:.2f}" for n in counts)
    return f"throughput (trials/s) by workers: {listed}; more workers than {stop} add less than 10% ({cores()})"


def cores() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cores: {os.cpu_count()} ({usable} usable by this process)"


def calls_line(rows: list) -> str:
    """Storage calls per trial by worker count, and the methods that make most of them (the first run's)."""
    listed = ", ".join(f"{'stress ' if run.kills else ''}{run.workers} w: {ms['calls']:.1f}" for run, _, ms in rows)
    top = sorted(rows[0][2]["methods"].items(), key=lambda item: -item[1])[:6]
    return f"storage calls per trial: {listed}; most: " + ", ".join(f"{name} {n:.1f}" for name, n in top)
