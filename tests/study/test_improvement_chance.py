"""Issue #48 item 3: the chance that an untried configuration beats the incumbent by more than the noise. Without a
performance model it is the rule of succession over the launches since the first trial within the noise of the
best (a smaller gain is no improvement)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState, create_trial

from autotune.search.improvement import NOISE, chance_to_improve


def _study(values: list[float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for value in values:
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=[value], user_attrs={"launched": True}))
    return study


def test_gains_within_the_noise_do_not_reset_the_count() -> None:
    # trial 1 (150) is within 2% of the best (trial 2, 151): the 4 launches after trial 1 beat it by no more
    study = _study([100, 150, 151, 120, 130, 149])
    chance = chance_to_improve(study, None)
    assert NOISE == 0.02 and chance.launches_since_best == 4 and chance.chance == 1 / 6
    assert chance.text() == "chance to improve >2%: 17% (4 launches without a gain over 2%)"


def test_a_gain_over_the_noise_starts_the_count_again() -> None:
    chance = chance_to_improve(_study([100, 120, 130, 140, 160]), None)
    assert chance.launches_since_best == 0 and chance.chance == 0.5


def test_no_chance_before_a_feasible_incumbent() -> None:
    assert chance_to_improve(optuna.create_study(direction="maximize"), None) is None
