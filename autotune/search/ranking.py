"""Ranking trials: which are feasible, which is best, and which way is better. One helper, so the study, its CLI, the
report, the sweep, the prior and validate agree (the study's direction respected, infeasible trials never best)."""

from __future__ import annotations

from collections.abc import Iterable

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState


def maximized(direction: str | StudyDirection) -> bool:
    """Whether ``direction`` asks for larger values: a space's ``"maximize"``/``"minimize"`` (``Metric.direction``)
    or Optuna's ``StudyDirection``. The one place a direction is compared."""
    if isinstance(direction, StudyDirection):
        return direction == StudyDirection.MAXIMIZE
    return direction == "maximize"


def sign(direction: str | StudyDirection) -> int:
    """+1 where larger is better, -1 where smaller is: ``sign * value`` is larger for the better value."""
    return 1 if maximized(direction) else -1


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """Completed, and every constraint (launch, SLOs) met."""
    return trial.state == TrialState.COMPLETE and all(v <= 0 for v in (trial.constraints or {}).values())


def maximizes(study: optuna.Study, objective: int = 0) -> bool:
    """Whether the study maximises its objective number ``objective`` (the first is the one trials are ranked by)."""
    return maximized(study.directions[objective])


def ranked(trials: Iterable[optuna.trial.FrozenTrial], maximize: bool) -> list[optuna.trial.FrozenTrial]:
    """The feasible trials, best first by the first objective (ties: the earlier trial)."""
    better = 1 if maximize else -1
    return sorted((t for t in trials if feasible(t) and t.values), key=lambda t: (-better * t.values[0], t.number))


def best_of(trials: Iterable[optuna.trial.FrozenTrial], maximize: bool) -> optuna.trial.FrozenTrial | None:
    """The best feasible trial by the first objective (ties: the earlier trial), or None."""
    return next(iter(ranked(trials, maximize)), None)


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The study's best feasible trial by its first objective, in its direction."""
    return best_of(study.get_trials(deepcopy=False), maximizes(study))
