"""What benchmarks/search_efficiency.py reports: each run's cost and best so far, a strategy's summary on one
landscape, and the report of issue #48: per landscape autotune's median node-minutes to 99% of the optimum, the share
of its seeds that get there, the one-knob method's and plain TPE's medians and autotune / one-knob; pooled per half
of the design/evaluation split, with the model named and unnamed; and the issue's two bars checked."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

TARGETS = (0.95, 0.99)
EVAL_SHARE, EVAL_MEDIAN = 0.95, 100.0  # issue #48: on the evaluation half ≥ 95% of seeds reach 99% at a median ≤ 100
NO_WORSE = 1.0  # autotune's median at most the one-knob method's, on every landscape


@dataclass
class Run:
    """One strategy on one landscape with one seed: the cumulative cost and best value after each trial."""

    costs: list[float] = field(default_factory=list)
    bests: list[float] = field(default_factory=list)
    failed_launches: int = 0
    repeated_failures: int = 0

    def reached(self, target: float) -> tuple[int, float] | None:
        """(trials, node-minutes) when the best so far first reached ``target``, or None."""
        for i, best in enumerate(self.bests):
            if best >= target:
                return i + 1, self.costs[i]
        return None


def summarize(runs: list[Run], optimum: float) -> dict:
    """Seeds reaching 95% and 99% of ``optimum``, the median node-minutes and trials of those that do, failures."""
    row: dict = {"seeds": len(runs)}
    for share in TARGETS:
        hits = [hit for run in runs if (hit := run.reached(share * optimum * (1 - 1e-9))) is not None]
        pct = round(100 * share)
        row[f"reached_{pct}"] = len(hits)
        row[f"median_node_min_{pct}"] = statistics.median(h[1] for h in hits) if hits else None
        row[f"median_trials_{pct}"] = statistics.median(h[0] for h in hits) if hits else None
    row["failed_launches"] = sum(r.failed_launches for r in runs)
    row["repeated_failed_launches"] = sum(r.repeated_failures for r in runs)
    row["best_share_median"] = statistics.median(r.bests[-1] / optimum for r in runs)
    return row


def pooled(runs: list[tuple[dict, float]]) -> dict:
    """``summarize`` over runs of several landscapes, each rescaled to its own optimum = 1."""
    scaled = [Run(r["costs"], [b / optimum for b in r["bests"]], r["failed_launches"], r["repeated_failures"])
              for r, optimum in runs]  # fmt: skip
    return summarize(scaled, 1.0)


@dataclass(frozen=True)
class Report:
    text: str
    pooled: list[dict]


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def ratio(ours: dict, one_knob: dict | None) -> float | None:
    """autotune's median node-minutes to 99% over the one-knob method's, where both reach 99% on some seed."""
    if not one_knob or not one_knob["median_node_min_99"] or ours["median_node_min_99"] is None:
        return None
    return ours["median_node_min_99"] / one_knob["median_node_min_99"]


def efficiency_report(rows: list[dict], strategies: list[str], namings: list[str]) -> Report:
    """The per-landscape table, the pooled rows per (half, naming, strategy) and the issue's bars, as text."""
    by = {(r["landscape"], r["naming"], r["strategy"]): r for r in rows}
    landscapes = list(dict.fromkeys((r["landscape"], r["split"]) for r in rows))
    lines = ["", "per landscape, node-minutes to 99% of the optimum (median over the seeds that reach it; share of "
             "seeds that do):", f"{'landscape':<34} {'split':<6} {'model':<8} {'autotune':>8} {'share':>6} "
             f"{'one-knob':>8} {'share':>6} {'TPE':>6} {'share':>6} {'auto/1-knob':>11}"]  # fmt: skip
    over: list[str] = []
    for name, split in sorted(landscapes, key=lambda item: (item[1], item[0])):
        for naming in namings:
            ours = by.get((name, naming, "autotune"))
            knob, tpe = by.get((name, naming, "one_knob")), by.get((name, naming, "tpe"))
            cells = []
            for row in (ours, knob, tpe):
                cells += [_minutes(row["median_node_min_99"]), f"{row['reached_99']}/{row['seeds']}"] if row else \
                    ["-", "-"]  # fmt: skip
            value = ratio(ours, knob) if ours else None
            if value is not None and value > NO_WORSE:
                over.append(f"{name} ({naming}) {value:.2f}x")
            lines.append(f"{name:<34} {split:<6} {naming:<8} {cells[0]:>8} {cells[1]:>6} {cells[2]:>8} {cells[3]:>6} "
                         f"{cells[4]:>6} {cells[5]:>6} {'-' if value is None else f'{value:.2f}x':>11}")  # fmt: skip
    pooled_rows, bars = [], []
    lines += ["", "pooled per half (each seed's run against its own landscape's optimum):"]
    for split in sorted({s for _, s in landscapes}):
        for naming in namings:
            for strategy in strategies:
                runs = [run for r in rows if r["split"] == split and r["naming"] == naming
                        and r["strategy"] == strategy for run in r["runs"]]  # fmt: skip
                if not runs:
                    continue
                row = {"split": split, "naming": naming, "strategy": strategy, **pooled(runs)}
                pooled_rows.append(row)
                share = row["reached_99"] / row["seeds"]
                lines.append(f"  {split:<6} {naming:<8} {strategy:<9} 99%: {row['reached_99']}/{row['seeds']} seeds "
                             f"({share:.0%}), median {_minutes(row['median_node_min_99'])} node-min | 95%: "
                             f"{row['reached_95']}/{row['seeds']}, median {_minutes(row['median_node_min_95'])}")  # fmt: skip
                if split == "eval" and strategy == "autotune":
                    met = share >= EVAL_SHARE and (row["median_node_min_99"] or 1e9) <= EVAL_MEDIAN
                    bars.append(f"evaluation half, {naming}: {share:.0%} of seeds reach 99% at a pooled median of "
                                f"{_minutes(row['median_node_min_99'])} node-min (bar: >= {EVAL_SHARE:.0%} at <= "
                                f"{EVAL_MEDIAN:.0f}): {'met' if met else 'NOT met'}")  # fmt: skip
    if "one_knob" in strategies and "autotune" in strategies:
        bars.append(
            "autotune's median <= one-knob's on every landscape where one-knob reaches 99%: "
            + ("met" if not over else f"NOT met on {len(over)}: " + "; ".join(over))
        )
    lines += ["", "issue #48's bars:", *(f"  {bar}" for bar in bars)]
    return Report("\n".join(lines), pooled_rows)
