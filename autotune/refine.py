"""Local refinement: a sampler's duplicate suggestion is turned into an untried neighbour of the incumbent.

Late in a study TPE keeps proposing configurations it has measured (duplicates cost no launch, but teach nothing).
When that happens, the next empty slot of the study is given an untried configuration one parameter away from the
incumbent (the best feasible trial), so the trial budget goes to the incumbent's neighbourhood, where the last
percent usually is. The sampler still makes every other suggestion; nothing is excluded.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from autotune.learning import broken_learned_rule
from autotune.space import ENGINE_PARAM, SearchSpace


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


def fill_next_slot(study: optuna.Study, params: dict[str, Any], incumbent: int) -> bool:
    """Give the lowest empty waiting slot of the study these parameters; False when there is none.

    An empty slot is a trial enqueued with no parameters; its ``fixed_params`` (what ``enqueue_trial`` stores and
    ``ask`` applies) are set in place, so the study's trial budget stays exactly what was asked for.
    """
    storage = study._storage  # Optuna has no public way to change a waiting trial; its storage API does
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if trial.system_attrs.get("fixed_params"):
            continue
        storage.set_trial_system_attr(trial._trial_id, "fixed_params", params)
        storage.set_trial_user_attr(trial._trial_id, "neighbour_of", incumbent)
        return True
    return False
