"""A study's trials, started within its budget: the queued fixed configurations first, then the sampler's choices.

The budget is a number (``autotune.search.budget``), not a set of trials made in advance: a worker, under the study's slot
lock, starts a trial only while the launches so far and the trials running are fewer than the budget. The few
configurations a trial must launch as they are (each engine's baseline, the prior's picks, a duplicate's refinement,
the configuration of a launch whose engine was not installed, a dead worker's retry) wait as WAITING trials and are
started first, oldest first; every other trial is made when it starts, for the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import optuna_private
from autotune.search import budget


@dataclass(frozen=True)
class FixedConfiguration:
    """A configuration a trial launches as it is (not the sampler's choice), and what marks it for the dashboard
    (``baseline``, ``prior``/``prior_predicted``, ``neighbour_of``: fields of its trial's record, as stored by
    ``autotune.records.stored``)."""

    params: dict[str, Any]
    marks: dict[str, Any]


def queue_fixed(study: optuna.Study, fixed: FixedConfiguration) -> None:
    """Queue a configuration for the next trial that starts (after those queued before it)."""
    study.enqueue_trial(fixed.params, user_attrs=fixed.marks)


def queue_within_budget(study: optuna.Study, fixed: FixedConfiguration) -> bool:
    """Queue a proposer's pick (the calibrated model's, a neighbour after a duplicate) where the budget has room for
    it; False where it has none (a pick queued past the budget would stay WAITING once the study stops)."""
    if not room_for_another(study, study.get_trials(deepcopy=False)):
        return False
    queue_fixed(study, fixed)
    return True


def room_for_another(study: optuna.Study, trials: list[FrozenTrial]) -> bool:
    """Whether the budget has room for one more launch beside those taken and queued: a pick queued after the last
    trial the budget allows (the warm prior's, after every trial) would stay WAITING once the study stops."""
    waiting = sum(1 for t in trials if t.state == TrialState.WAITING)
    return budget.launches_taken(trials) + waiting < budget.study_budget(study)


def queued_params(study: optuna.Study) -> list[dict[str, Any]]:
    """The configurations of the study's queued trials and of every trial that was queued (as queued)."""
    return [queued for t in study.get_trials(deepcopy=False) if (queued := optuna_private.queued_params(t)) is not None]


def requeue_not_installed(study: optuna.Study, failed: FrozenTrial) -> None:
    """A launch whose engine was not installed costs the study no trial (``autotune.search.budget`` does not count it); a
    fixed configuration it had goes back in the queue as it was (a baseline stays the baseline), so the next
    `study run` after the fix launches it. A sampler's choice needs nothing: the sampler chooses again."""
    if queued := optuna_private.queued_params(failed):
        queue_fixed(study, FixedConfiguration(queued, records.fixed_marks(failed)))


def start_trial(study: optuna.Study, storage: optuna.storages.RDBStorage, heartbeat_s: int) -> optuna.Trial | None:
    """The study's next trial, RUNNING for this worker, or None while the launches so far and the trials running take
    the whole budget; called under the budget lock, so that workers at once never start more.

    The oldest queued trial, else a new one made WAITING: its heartbeat is recorded before it is RUNNING (a worker
    killed in between leaves a WAITING trial, which the next worker starts, never a RUNNING one that never goes
    stale). Reads through the study's cached storage: one read of the trials not finished at the last read."""
    trials = study.get_trials(deepcopy=False)
    if budget.launches_taken(trials) >= budget.study_budget(study):
        return None
    # oldest first, as ask() pops
    queued = [optuna_private.trial_id_of(t) for t in trials if t.state == TrialState.WAITING]
    for trial_id in queued:
        if _claim(storage, trial_id, heartbeat_s):  # False: started elsewhere (by a caller without the lock)
            return optuna.Trial(study, trial_id)  # as ask() makes it: the sampler's before_trial runs here
    new = optuna.trial.create_trial(state=TrialState.WAITING)
    trial_id = optuna_private.create_trial_from_template(study, new)  # Optuna has no public way
    _claim(storage, trial_id, heartbeat_s)
    return optuna.Trial(study, trial_id)


def _claim(storage: optuna.storages.RDBStorage, trial_id: int, heartbeat_s: int) -> bool:
    if heartbeat_s:
        storage.record_heartbeat(trial_id)
    return storage.set_trial_state_values(trial_id, state=TrialState.RUNNING)
