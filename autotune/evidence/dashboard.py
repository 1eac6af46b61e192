"""The study as ``autotune dashboard`` shows it in optuna-dashboard: measurements only where a value is drawn.

In the storage a trial that was never measured (rejected by a rule, crashed, out of memory, not ready in time, or a
duplicate of an earlier trial) is COMPLETE with a pessimistic value (0 tok/s) and a violated ``launch`` constraint:
that is how the samplers learn that the region is bad (TPE and the others ignore FAIL trials, and would suggest the
configuration again). optuna-dashboard would read it as "Complete, value 0" and draw it at 0 in the history plot, and
it does not see Optuna 5's named constraints (it reads only the older list), so an SLO miss would look feasible too.

This read-only view, handed to optuna-dashboard instead of the storage, shows each trial as what it is:

- never measured: state Fail, no value (not drawn; its Note and its ``outcome`` attribute say why);
- measured: as stored, with its constraints in the list optuna-dashboard reads, so a trial that misses its SLO is
  drawn grey as "Infeasible" and left out of the best-value line;
- the best trial: the best feasible one (``autotune.search.ranking``), as ``study best`` says.

Everything else (notes, artifacts, studies) goes to the storage unchanged.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.records import optuna_private
from autotune.search.ranking import best_of, maximized

_CONSTRAINTS_LIST = "constraints"  # the system attribute optuna-dashboard reads a trial's constraints from


def never_measured(trial: FrozenTrial) -> bool:
    """A COMPLETE trial whose value is not its own measurement: a failure's pessimistic value, or a duplicate's."""
    return trial.state == TrialState.COMPLETE and bool(records.failure_kind(trial) or records.is_duplicate(trial))


def as_shown(trial: FrozenTrial) -> FrozenTrial:
    """The trial as optuna-dashboard should show it (a copy; the stored trial is untouched)."""
    constraints = list((trial.constraints or {}).values())
    system_attrs = trial.system_attrs | ({_CONSTRAINTS_LIST: constraints} if constraints else {})
    unmeasured = never_measured(trial)
    return FrozenTrial(number=trial.number, state=TrialState.FAIL if unmeasured else trial.state, value=None,
                       values=None if unmeasured else trial.values, datetime_start=trial.datetime_start,
                       datetime_complete=trial.datetime_complete, params=trial.params,
                       distributions=trial.distributions, user_attrs=trial.user_attrs, system_attrs=system_attrs,
                       intermediate_values=trial.intermediate_values,
                       trial_id=optuna_private.trial_id_of(trial))  # fmt: skip


def _delegate(name: str):
    def method(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.storage, name)(*args, **kwargs)

    method.__name__ = name
    return method


# every abstract method of a storage passes through; DashboardView overrides the reads of trials
_Delegating = type("_Delegating", (BaseStorage,), {name: _delegate(name) for name in BaseStorage.__abstractmethods__})


class DashboardView(_Delegating):
    """A storage for optuna-dashboard: the trials ``as_shown``, the best feasible trial as the best."""

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage

    def __getattr__(self, name: str) -> Any:  # what a storage has beyond the abstract ones (e.g. RDB's)
        return getattr(self.storage, name)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return as_shown(self.storage.get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:  # fmt: skip
        shown = [as_shown(t) for t in self.storage.get_all_trials(study_id, deepcopy=deepcopy)]
        return [t for t in shown if states is None or t.state in states]

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        maximize = maximized(self.get_study_directions(study_id)[0])
        trials = self.get_all_trials(study_id, deepcopy=False)
        best = best_of(trials, maximize)
        if best is not None:
            return best
        measured = [t for t in trials if t.state == TrialState.COMPLETE]
        if not measured:
            raise ValueError("no measured trial")
        return (max if maximize else min)(measured, key=lambda t: t.values[0])
