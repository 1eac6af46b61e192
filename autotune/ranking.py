"""Ranking trials: which are feasible, which is best. One helper, so the study, its CLI, the report and validate
agree (the study's direction respected, infeasible trials never best)."""

from __future__ import annotations

from collections.abc import Iterable

import optuna
from optuna.trial import TrialState


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """Completed, and every constraint (launch, SLOs) met."""
    return trial.state == TrialState.COMPLETE and all(v <= 0 for v in (trial.constraints or {}).values())


def maximizes(study: optuna.Study, objective: int = 0) -> bool:
    """Whether the study maximises its objective number ``objective`` (the first is the one trials are ranked by)."""
    return study.directions[objective] == optuna.study.StudyDirection.MAXIMIZE


def ranked(trials: Iterable[optuna.trial.FrozenTrial], maximize: bool) -> list[optuna.trial.FrozenTrial]:
    """The feasible trials, best first by the first objective (ties: the earlier trial)."""
    sign = 1 if maximize else -1
    return sorted((t for t in trials if feasible(t) and t.values), key=lambda t: (-sign * t.values[0], t.number))


def best_of(trials: Iterable[optuna.trial.FrozenTrial], maximize: bool) -> optuna.trial.FrozenTrial | None:
    """The best feasible trial by the first objective (ties: the earlier trial), or None."""
    return next(iter(ranked(trials, maximize)), None)


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The study's best feasible trial by its first objective, in its direction."""
    return best_of(study.get_trials(deepcopy=False), maximizes(study))
