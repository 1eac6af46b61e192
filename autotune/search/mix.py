"""The mix of several workloads: one value per launch, the bound that stops measuring it, and which workload first.

Each workload's result is its best feasible throughput divided by the study's reference of that workload (the first
baseline's), so that workloads of different sizes count alike; the mix of those relatives is

- ``geomean`` (default): the weighted geometric mean, exp(Σ wᵢ ln rᵢ / Σ wᵢ): a 10% loss on one workload costs as much
  as a 10% gain on another of the same weight buys;
- ``weighted_mean``: Σ wᵢ rᵢ / Σ wᵢ;
- ``worst``: min rᵢ (the weights do not count).

The bound (as the load sweep bounds loads, ``autotune.search.sweep``): a launch stops once the workloads left cannot
lift the mix above the incumbent, whatever they measure. Only what was measured bounds: a workload not measured yet
can reach anything (a configuration may be 8x better on long prompts than any before it: a guessed ceiling of 1.5x
the study's best skipped exactly that optimum on a DeepSeek landscape). So a launch stops early when it is infeasible
on a workload (infeasible for the mix, whatever the rest), and, for ``worst``, once a measured workload is at or
below the incumbent (the mix is at most that); a ``geomean`` or ``weighted_mean`` launch that serves every workload
within its SLOs is measured on all of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """One workload's part of a mix: its weight and its relative throughput (measured, or, for a workload not
    measured yet, the most it could reach: in a study ``math.inf``, as nothing measured bounds it)."""

    weight: float
    relative: float


def mix_value(kind: str, shares: Sequence[Share]) -> float:
    """The mix of ``shares`` (``kind``: geomean, weighted_mean or worst); 0 for no share. A relative of 0 (nothing
    served) makes the geometric mean 0."""
    if not shares:
        return 0.0
    if kind == "worst":
        return min(s.relative for s in shares)
    total = sum(s.weight for s in shares)
    if kind == "weighted_mean":
        return sum(s.weight * s.relative for s in shares) / total
    if any(s.relative <= 0 for s in shares):
        return 0.0
    if any(math.isinf(s.relative) for s in shares):
        return math.inf
    return math.exp(sum(s.weight * math.log(s.relative) for s in shares) / total)


def upper_bound(kind: str, measured: Sequence[Share], left: Sequence[Share]) -> float:
    """The most the mix can reach: the workloads measured at their relatives, those ``left`` at the most each could
    reach (a study passes ``math.inf``: a workload not measured is unbounded)."""
    return mix_value(kind, [*measured, *left])


def cannot_lift(kind: str, measured: Sequence[Share], left: Sequence[Share], incumbent: float | None) -> bool:
    """Whether the workloads ``left`` (each at the most it could reach) cannot lift the mix above ``incumbent``:
    measuring them could not change the study's best. False without an incumbent, or with nothing left to measure
    (the mix is then known)."""
    if incumbent is None or not left:
        return False
    return upper_bound(kind, measured, left) <= incumbent


def spread(relatives: Sequence[float]) -> float:
    """How much a workload's results differ between configurations: the standard deviation of ln(relative) over the
    study's trials (0 with fewer than two)."""
    logs = [math.log(r) for r in relatives if r > 0]
    return statistics.pstdev(logs) if len(logs) >= 2 else 0.0


def discriminating_order(names: Sequence[str], history: dict[str, list[float]],
                         incumbent: dict[str, float]) -> list[str]:  # fmt: skip
    """The workloads in the order a launch measures them: those whose results vary most across the study's trials
    first (they tell configurations apart, and make the bound bite soonest), then where the incumbent is weakest
    (a configuration beats it there first), then the space's order."""
    position = {name: i for i, name in enumerate(names)}
    return sorted(names, key=lambda n: (-spread(history.get(n, [])), incumbent.get(n, math.inf), position[n]))
