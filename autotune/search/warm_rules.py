"""Failure knowledge an earlier study left: its learned rules and out-of-memory failures, each tagged with the engine
version it was learned on (``autotune.search.warm_start`` copies them into the new study).

- **Same version**: a rule applies as it is (no trial that breaks it is launched); an out-of-memory failure rules
  out, by dominance (``autotune.search.learning.oom_cap``), what needs at least as much memory.
- **Another version**: an upgrade may have fixed it, so a rule is re-checked once. The first trial that would break
  it claims the re-check (``rechecks:<rule>`` in the study, ``rechecks`` in the trial) and launches; while it runs,
  the rule holds for the others. If that launch fails the same way (the rule's failure kind), the rule holds again
  (a failure that names the same value is learned again, now on this version: ``learning.learn``); if it serves,
  the rule is dropped. A claim whose trial never launched (another rule or a duplicate stopped it), or failed
  another way (out of memory, say: that says nothing of the rule), passes to the next trial that would break it. An
  out-of-memory failure of another version is not applied: memory use changes between versions, and the first
  launch that needs as much memory learns it again here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import records
from autotune.config import ServerConfig
from autotune.records import LearnedRule, StudyRecord


@dataclass(frozen=True)
class RuleState:
    """Where an inherited rule stands in this study."""

    text: str  # in words, for `study show`
    dropped: bool = False  # its re-check served: no longer applied
    claimable: bool = False  # of another version, and no launch re-checks it (yet, or any more): the next may


APPLIES = RuleState("applies")


def current_version(record: StudyRecord, engine: str | None) -> str | None:
    """The version of ``engine`` this study renders for (its identity), or None where it is not known."""
    engines = record.identity.engines if record.identity else {}
    if engine is None and len(engines) == 1:
        return next(iter(engines.values()))
    return engines.get(engine or "")


def needs_recheck(record: StudyRecord, rule: LearnedRule) -> bool:
    """Whether ``rule`` was learned on another version of its engine than this study's."""
    if rule.engine_version is None:  # learned here, or in a study that did not say: as it is
        return False
    current = current_version(record, rule.engine)
    return current is not None and current != rule.engine_version


def rule_state(record: StudyRecord, name: str, rule: LearnedRule, trials: Mapping[int, FrozenTrial]) -> RuleState:
    """``rule``'s state: applies (this study's, or of the same version), to re-check, being re-checked, held again
    or dropped (its re-check's outcome)."""
    origin = f" (from {rule.inherited_from}, {rule.engine or 'engine'} {rule.engine_version})"
    if not needs_recheck(record, rule):
        return APPLIES if rule.inherited_from is None else RuleState("applies" + origin)
    number = record.rechecks.get(name)
    checker = trials.get(number) if number is not None else None
    if checker is None:
        return RuleState("to re-check on this version" + origin, claimable=True)
    if checker.state in (TrialState.RUNNING, TrialState.WAITING):
        return RuleState(f"being re-checked by trial {number}" + origin)
    if checker.state == TrialState.FAIL or not records.launched(checker):  # a bug of ours, or never launched
        return RuleState(f"to re-check (trial {number} did not launch)" + origin, claimable=True)
    failed = records.failure_kind(checker)
    if failed is None:  # it served (a pruned launch served too: it was only slow)
        return RuleState(f"dropped: trial {number} served on this version" + origin, dropped=True)
    if failed != rule.kind:  # out of memory, say, before it could show whether the rule's value serves now
        return RuleState(f"to re-check (trial {number} failed another way: {failed})" + origin, claimable=True)
    return RuleState(f"holds: trial {number} failed again ({failed})" + origin)


def claim(study: optuna.Study, trial: optuna.Trial, name: str) -> None:
    """``trial`` re-checks rule ``name``: it launches, and its outcome decides the rule."""
    records.write_study(study, rechecks={name: trial.number})
    records.write(trial, rechecks=name)


def inherited_oom_cap(record: StudyRecord, config: ServerConfig,
                      needs_at_least: Callable[[ServerConfig, ServerConfig], bool],
                      stored: Callable[[dict, ServerConfig], ServerConfig]) -> tuple[int | None, str | None]:  # fmt: skip
    """(the lightest load at which ``config`` runs out of memory by an earlier study's failure, its "study:trial"),
    from the failures of the same engine version only."""
    cap, witness = None, None
    for oom in record.inherited_oom or []:
        if oom.engine_version is not None and oom.engine_version != current_version(record, config.engine):
            continue
        if oom.config.get("engine") != config.engine:
            continue
        if (cap is None or oom.level < cap) and needs_at_least(config, stored(oom.config, config)):
            cap, witness = oom.level, oom.source
    return cap, witness
