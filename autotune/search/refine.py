"""Local refinement: a sampler's duplicate suggestion is turned into an untried neighbour of the incumbent.

Late in a study TPE keeps proposing configurations it has measured (duplicates cost no launch, but teach nothing).
When that happens, an untried configuration one parameter away from the incumbent (the best feasible trial) is queued
for the next trial (``autotune.search.trial_queue``), so the trial budget goes to the incumbent's neighbourhood, where the
last percent usually is. The sampler still makes every other suggestion; nothing is excluded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from autotune.search.learning import broken_learned_rule
from autotune.space.schema import ENGINE_PARAM, SearchSpace


@dataclass(frozen=True)
class Neighbour:
    """An untried configuration (Optuna params) one launch parameter away from the incumbent, trial number ``of``."""

    params: dict[str, Any]
    of: int


def untried_neighbour(study: optuna.Study, space: SearchSpace, incumbent: optuna.trial.FrozenTrial,
                      tried: set[str], key) -> dict[str, Any] | None:  # fmt: skip
    """The first configuration one launch parameter away from ``incumbent`` that no trial has tried and no static
    or learned rule refuses (parameters in the space's order, values in theirs), or None."""
    engine = incumbent.params.get(ENGINE_PARAM, next(iter(space.engines)))
    adapter = get_engine(engine)
    for name, param in space.launch_params(engine).items():
        for value in param.values():
            if value == incumbent.params.get(name):
                continue
            params = incumbent.params | {name: value}
            point = space.point_from_params(params)
            if key(point) in tried or broken_learned_rule(study, params) is not None:
                continue
            try:
                adapter.check(point.server, space.hardware)
            except UnsupportedConfig:
                continue
            return params
    return None
