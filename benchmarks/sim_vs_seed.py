"""The analytic model against the seed study's ShareGPT runs: fits TOKEN_COST_S, reports leave-one-out errors and
rank agreement (Spearman ρ between simulated and measured total throughput).

For each run, the per-token cost that makes the simulation match the measurement is found from two simulations
(1/throughput is linear in the cost for a fixed load); each (engine, attention layout) group's cost is the geometric
mean of its runs'. Leave-one-out: each run is predicted with its group's cost fitted without it (a run alone in its
group takes its engine's other group, then all runs). Prints, per run, the ratio simulated / measured (the anchor).

    python benchmarks/sim_vs_seed.py
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autotune.sim.analytic import analytic_profile
from autotune.testing.seedset import SEED_NODE, sharegpt_runs, simulated_total

PROBE_COST_S = 100e-6


def matching_cost(run) -> float:
    """The per-token cost at which the simulation of ``run`` reproduces its measured throughput."""
    base, probe = simulated_total(run.config, 0.0), simulated_total(run.config, PROBE_COST_S)
    slope = (1 / probe - 1 / base) / PROBE_COST_S
    return max(1e-6, (1 / run.measured_total - 1 / base) / slope)


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def group_cost(costs: dict[int, float], groups: dict[int, tuple], group: tuple, leave_out: int | None) -> float:
    for members in (
        [i for i in costs if groups[i] == group and i != leave_out],
        [i for i in costs if groups[i][0] == group[0] and i != leave_out],
        [i for i in costs if i != leave_out],
    ):
        if members:
            return geomean([costs[i] for i in members])
    raise ValueError("no runs")


def main() -> None:
    runs = sharegpt_runs()
    groups = {i: analytic_profile(run.config, SEED_NODE).cost_group for i, run in enumerate(runs)}
    costs = {i: matching_cost(run) for i, run in enumerate(runs)}
    fitted = {group: group_cost(costs, groups, group, None) for group in sorted(set(groups.values()))}
    rows = []
    for i, run in enumerate(runs):
        fit = simulated_total(run.config, fitted[groups[i]])
        loo = simulated_total(run.config, group_cost(costs, groups, groups[i], i))
        rows.append({"engine": run.engine, "experiment": run.experiment[:38], "group": groups[i][1],
                     "measured": run.measured_total, "sim_fit": fit, "sim_loo": loo,
                     "ratio_fit": fit / run.measured_total, "ratio_loo": loo / run.measured_total})  # fmt: skip
    table = pd.DataFrame(rows)
    pd.options.display.width = 160
    print(table.round(3).to_string(index=False))
    print("\nTOKEN_COST_S = {")
    for (engine, layout), cost in fitted.items():
        print(f'    ("{engine}", "{layout}"): {cost * 1e6:.1f}e-6,')
    print("}")
    loo_error = (table.ratio_loo - 1).abs()
    print(f"leave-one-out |error|: median {loo_error.median():.1%}, max {loo_error.max():.1%}")
    for column in ("sim_fit", "sim_loo"):
        rho = table[column].rank().corr(table.measured.rank())
        print(f"Spearman rho ({column} vs measured): {rho:.3f}")


if __name__ == "__main__":
    main()
