"""What a study's trial budget counts, and when its space has nothing left to launch.

``--n-trials N`` buys N launches in all (baselines included; a launch that fails counts, it cost GPU time). A trial that
launches nothing costs no GPU time and does not count: a duplicate (the configuration of an earlier trial, which it
takes the outcome of) or a configuration a static or learned rule rejected. The budget is a number (the study's record):
a worker starts a trial only while the launches so far and the trials running (each may launch) are fewer
(``launches_taken``; ``autotune.search.trial_queue``), so workers at once never launch more than it, and a trial that turned
out to launch nothing leaves its room to the next. ``study run --n-trials N`` sets an existing study's budget to N,
lower too (never below what it has launched: a study that has more runs none); a run without it keeps the budget.

A study also stops when its space is exhausted: for a space small enough to enumerate, once every launch configuration
has been tried (launched or rejected; the configurations a static or learned rule refuses need no trial of their own);
for any space, once ``NON_LAUNCH_RUN_LIMIT`` trials in a row launched nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict

from autotune import records
from autotune.engines import get_engine
from autotune.errors import NOT_THE_CONFIGURATIONS, FailureKind, UnsupportedConfig
from autotune.search.learning import broken_learned_rule
from autotune.search.objective import config_key
from autotune.space.schema import ENGINE_PARAM, ENUMERATION_LIMIT, SearchSpace

# Non-launches in a row after which a space counts as exhausted. After a duplicate the next trial goes to an untried
# neighbour of the incumbent (autotune.search.refine), so a run this long means that neither refinement nor the sampler
# finds an untried configuration. A non-launch costs one suggestion (milliseconds, no GPU); were a tenth of a space's
# configurations still untried, the sampler at random would miss all of them 50 times in a row with probability
# 0.9^50 = 0.5%.
NON_LAUNCH_RUN_LIMIT = 50


@dataclass(frozen=True)
class BudgetCount:
    """A study's trials by what they cost: launches (which the budget counts), rejections and duplicates (which
    launched nothing)."""

    launches: int
    rejected: int
    duplicates: int

    def text(self) -> str:
        return f"{self.launches} launches, {self.rejected} rejected, {self.duplicates} duplicates"


class BudgetSummary(BaseModel):
    """``study show``'s budget line, as data: the study's budget (None while unset) and what its trials cost of it."""

    model_config = ConfigDict(frozen=True)
    budget: int | None
    launches: int
    rejected: int
    duplicates: int


def is_duplicate(trial: FrozenTrial) -> bool:
    return records.is_duplicate(trial)


def is_rejected(trial: FrozenTrial) -> bool:
    """Refused before launch by a static or learned rule (a duplicate of a rejection is a duplicate)."""
    return (not is_duplicate(trial) and not records.launched(trial)
            and records.failure_kind(trial) == FailureKind.REJECTED)  # fmt: skip


def ended_without_launch(trial: FrozenTrial) -> bool:
    """A finished trial that launched nothing: it does not count."""
    return trial.state.is_finished() and not records.launched(trial)


def _counted(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count: all but a dead worker's, which a retry replaces, and a launch that failed for a reason
    of the machine or the client (the engine not installed, the workload file unreadable: ``NOT_THE_CONFIGURATIONS``;
    its fixed configuration, if any, is queued again: ``autotune.search.trial_queue.requeue_not_installed``)."""
    trials = list(trials)
    # every trial a retry replaced: a retry of a retry keeps the first one's ``failed_trial``, its history has both
    retried = {number for t in trials for number in t.system_attrs.get("retry_history", ())}
    return [t for t in trials if not (t.state == TrialState.FAIL and (t.number in retried or
            records.stored_outcome(t) in NOT_THE_CONFIGURATIONS))]  # fmt: skip


def _launched(trial: FrozenTrial) -> bool:
    # a queued retry of a dead worker's launch carries its ``launched``: it has launched nothing yet
    return trial.state != TrialState.WAITING and records.launched(trial)


def count(trials: Iterable[FrozenTrial]) -> BudgetCount:
    """Launches (running ones included), rejections, duplicates."""
    trials = _counted(trials)
    launches = sum(map(_launched, trials))
    return BudgetCount(launches, sum(map(is_rejected, trials)), sum(map(is_duplicate, trials)))


def launches_taken(trials: Iterable[FrozenTrial]) -> int:
    """What the budget has given out: the launches so far and the trials running now (each may yet launch)."""
    return sum(1 for t in _counted(trials) if t.state == TrialState.RUNNING or _launched(t))


def study_budget(study: optuna.Study) -> int:
    """The study's budget of launches in all (0 while its creator has not set it yet)."""
    return records.StudyRecord.of(study).budget or 0


def set_budget(study: optuna.Study, n_trials: int, more_trials: int = 0, *, given: bool | None = None) -> None:
    """Make the study's budget ``n_trials`` where it has none (a new study, or one whose creator was killed before
    setting it), else raise it by ``more_trials``. Else ``given`` says whether ``n_trials`` was asked for
    (``RunOptions.n_trials_given``): True, make it ``n_trials``, lower too but no lower than the launches
    taken already (so that ``--more N`` then adds N launches); False, keep it; None (no command line: the Python API,
    a node's workers), raise it to ``n_trials``, never lower it. Under the budget lock: workers starting at once each
    add their ``--more`` once, none lost."""
    current = records.StudyRecord.of(study).budget
    if current is None:
        wanted = n_trials
    elif more_trials:
        wanted = current + more_trials
    elif given is False:
        wanted = current
    elif given and n_trials < current:  # the trials are read only to lower a budget
        wanted = max(n_trials, launches_taken(study.get_trials(deepcopy=False)))
    else:
        wanted = max(current, n_trials)
    if wanted == current:
        return
    records.write_study(study, budget=wanted)
    if current is not None and wanted > current:
        mark_raised(study)


def summary(study: optuna.Study) -> BudgetSummary:
    """``study show``'s budget line, as data: the budget, and what the study's trials cost of it."""
    counted = count(study.get_trials(deepcopy=False))
    return BudgetSummary(budget=records.StudyRecord.of(study).budget, **dataclasses.asdict(counted))


def summary_line(study: optuna.Study) -> str:
    data = summary(study)
    of = f" of a budget of {data.budget}" if data.budget is not None else ""
    return (f"trials: {data.launches} launches{of}; {data.rejected} rejected before launch and "
            f"{data.duplicates} duplicates, which launched nothing and do not count")  # fmt: skip


def mark_raised(study: optuna.Study) -> None:
    """Record that the budget was just raised: the run of non-launches before it no longer says the space is done."""
    records.write_study(study, budget_raised=datetime.datetime.now().isoformat())


class LaunchCatalogue:
    """Every launch configuration of a space small enough to enumerate that no static rule refuses (by config key,
    with its Optuna params); built on first use."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space

    @functools.cached_property
    def configurations(self) -> dict[str, dict] | None:
        """Config key → params, or None for a space too large to enumerate."""
        space = self.space
        if any(space.launch_size(engine) > ENUMERATION_LIMIT for engine in space.engines):
            return None
        found: dict[str, dict] = {}
        for engine in space.engines:
            adapter, params = get_engine(engine), space.launch_params(engine)
            for values in itertools.product(*(p.values() for p in params.values())):
                chosen = dict(zip(params, values, strict=True))
                point = space.point(engine, chosen)
                try:
                    adapter.check(point.server, space.hardware)
                except UnsupportedConfig:
                    continue
                found.setdefault(config_key(point), {ENGINE_PARAM: engine, **chosen} if len(space.engines) > 1
                                 else chosen)  # fmt: skip
        return found


def exhausted(study: optuna.Study, catalogue: LaunchCatalogue) -> str | None:
    """Why the study's space has nothing left to launch, or None while it may have."""
    trials = _counted(study.get_trials(deepcopy=False))
    configurations = catalogue.configurations
    if configurations is not None:
        tried = {records.config_key(t) for t in trials if t.state.is_finished()}
        if all(key in tried or broken_learned_rule(study, params) is not None
               for key, params in configurations.items()):  # fmt: skip
            return "every configuration was tried"
    # the budget's last raise only shortens the run: the study's record (one more storage call) is read only when
    # the run without it is long enough
    if (
        _non_launch_run(trials, None) >= NON_LAUNCH_RUN_LIMIT
        and _non_launch_run(trials, records.StudyRecord.of(study).budget_raised) >= NON_LAUNCH_RUN_LIMIT
    ):
        return (f"the last {NON_LAUNCH_RUN_LIMIT} trials in a row found no untried configuration "
                f"({_why_not_launched(trials)}){_untried_text(study, trials, catalogue)}")  # fmt: skip
    return None


def _why_not_launched(trials: list[FrozenTrial]) -> str:
    """What the trials since the last launch were instead: duplicates of measured configurations, or refused by a
    rule (by rule), e.g. '14 duplicates, 6 refused: weights-fit 4, learned:ep=8 2'."""
    since = [t for t in trials if ended_without_launch(t)][-NON_LAUNCH_RUN_LIMIT:]
    duplicates = sum(1 for t in since if records.is_duplicate(t))
    # a duplicate of a refused configuration carries its rule too (``records.DUPLICATED``): counted once, as a duplicate
    rules = collections.Counter(
        r for t in since if not records.is_duplicate(t) and (r := records.TrialRecord.of(t).rejected_by)
    )
    parts = [f"{duplicates} duplicate(s) of measured configurations"] if duplicates else []
    if rules:
        parts.append(
            f"{sum(rules.values())} refused by rules: " + ", ".join(f"{r} {n}" for r, n in rules.most_common())
        )
    other = len(since) - duplicates - sum(rules.values())
    return "; ".join(parts + ([f"{other} other"] if other else [])) or "none launched"


def _untried_text(study: optuna.Study, trials: list[FrozenTrial], catalogue: LaunchCatalogue) -> str:
    """'; 12 configurations the rules allow were never proposed' where the space is small enough to count them."""
    configurations = catalogue.configurations
    if configurations is None:
        return "; the space is too large to count what was not tried"
    tried = {records.config_key(t) for t in trials if t.state.is_finished()}
    untried = [p for key, p in configurations.items() if key not in tried and broken_learned_rule(study, p) is None]
    return f"; {len(untried)} of the {len(configurations)} configurations the rules allow were never proposed"


def _non_launch_run(trials: list[FrozenTrial], raised: str | None) -> int:
    """How many trials launched nothing since the last one that launched (or the budget's last raise), by start."""
    since = datetime.datetime.fromisoformat(raised) if raised else datetime.datetime.min
    for trial in trials:
        if records.launched(trial) and trial.datetime_start and trial.datetime_start > since:
            since = trial.datetime_start
    return sum(1 for t in trials if ended_without_launch(t) and t.datetime_start and t.datetime_start > since)


def stop_line(study: optuna.Study, catalogue: LaunchCatalogue) -> str | None:
    """The line a study whose space is exhausted stops with, or None."""
    reason = exhausted(study, catalogue)
    if reason is None:
        return None
    return f"space exhausted: {reason} ({count(study.get_trials(deepcopy=False)).text()})"
