"""When to stop, said to the user: the chance that a configuration not measured yet beats the incumbent by more than
the noise of a measurement.

- With a performance model (a prior the space names, calibrated on this study's launches): each untried
  configuration's calibrated value is the centre of a log-normal whose spread is the calibrated model's own recent
  error (its median factor on the last launches, as ``study show`` prints it); the chance is the best one's chance
  to exceed the incumbent by ``NOISE``.
- Without one (a model the prior does not know, several workloads, a latency objective): Laplace's rule of
  succession over the launches since the first trial within ``NOISE`` of the incumbent (a smaller gain is no
  improvement): after n launches that did not beat it by more than the noise, 1 / (n + 2).

It is an estimate, printed as one: the study goes on unless ``--stop-when-unlikely P`` asks it to stop below P.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune import records
from autotune.records import StudyRecord
from autotune.search import calibration
from autotune.search.ranking import best_of, feasible, maximizes
from autotune.space.schema import SearchSpace

NOISE = 0.02  # a benchmark's run-to-run spread on a quiet node (a better value within it is no improvement)
_DEFAULT_ERROR_FACTOR = 1.5  # the model's error before any launch measured it
_MEDIAN_ABS_OF_NORMAL = 0.6745  # median |z| of a standard normal: a median error factor's log is this many sigmas


@dataclass(frozen=True)
class ImprovementChance:
    """The chance that an unmeasured configuration beats the incumbent by more than ``NOISE``, and how it was had."""

    chance: float
    method: str  # "calibrated model", or "N launches without a gain over 2%" (the rule of succession)
    launches_since_best: int

    def below(self, threshold: float) -> bool:
        """Whether it is under ``threshold`` (``--stop-when-unlikely``): the study may stop."""
        return self.chance < threshold

    def text(self) -> str:
        # a tenth of a percent under 10%: a threshold such as 0.05 is then read as it is compared
        shown = f"{self.chance:.1%}" if self.chance < 0.1 else f"{self.chance:.0%}"
        return f"chance to improve >{NOISE:.0%}: {shown} ({self.method})"


def _normal_tail(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _model_spread(study: optuna.Study) -> float:
    """The calibrated model's error as a log-normal sigma: from its median factor on the last launches."""
    errors = [e.calibrated for e in StudyRecord.of(study).calibration[-calibration.LAST :] if e.calibrated]
    factor = statistics.median(errors) if errors else _DEFAULT_ERROR_FACTOR
    return max(math.log(factor), 1e-3) / _MEDIAN_ABS_OF_NORMAL


def _by_model(
    study: optuna.Study, space: SearchSpace, trials: list[FrozenTrial], incumbent: FrozenTrial
) -> float | None:
    fitted = calibration.calibrated_model(study, space, trials)
    if fitted is None or not maximizes(study) or not incumbent.values or incumbent.values[0] <= 0:
        return None
    keyed, calibrated = fitted
    tried = {records.config_key(t) for t in trials}
    untried = [v for key, ranked in keyed.items() if key not in tried and (v := calibrated.value(space, ranked))]
    if not untried:
        return 0.0
    sigma, bar = _model_spread(study), math.log(incumbent.values[0] * (1 + NOISE))
    return _normal_tail((bar - math.log(max(untried))) / sigma)


def _within_noise_since(trials: list[FrozenTrial], incumbent: FrozenTrial, maximize: bool) -> int:
    """The number of the first trial within ``NOISE`` of the incumbent: later "improvements" smaller than a
    measurement's noise are no improvement, and the launches since that trial did not beat it."""
    best = incumbent.values[0]
    near = [t.number for t in trials if feasible(t) and t.values
            and (t.values[0] * (1 + NOISE) >= best if maximize else t.values[0] <= best * (1 + NOISE))]  # fmt: skip
    return min(near, default=incumbent.number)


def chance_to_improve(study: optuna.Study, space: SearchSpace | None) -> ImprovementChance | None:
    """The chance now, or None before the study has a feasible incumbent (``space`` None: no model is looked for)."""
    trials = study.get_trials(deepcopy=False)
    incumbent = best_of(trials, maximizes(study))
    if incumbent is None:
        return None
    since = sum(1 for t in trials if t.number > _within_noise_since(trials, incumbent, maximizes(study))
                and records.measured_itself(t))  # fmt: skip
    by_model = _by_model(study, space, trials, incumbent) if space is not None else None
    if by_model is not None:
        return ImprovementChance(by_model, "calibrated model", since)
    return ImprovementChance(1 / (since + 2), f"{since} launches without a gain over {NOISE:.0%}", since)
