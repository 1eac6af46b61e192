"""Typed trial records: what a study and its trials keep in Optuna, written and read through this module alone.

Everything autotune stores lives in Optuna's user attributes (so optuna-dashboard shows it, and every worker on the
storage sees it); this is the one module that knows their names. ``TrialRecord`` is a trial's record, with a
``LoadRecord`` for each load its sweep measured; ``StudyRecord`` is the study's description and bookkeeping;
``Outcome`` is the one word for what became of a trial.

The attribute names and values are those of the studies written before this module existed (2026-12): a study of
that layout opens as it is, and optuna-dashboard shows the same attributes. Reading is lenient (an attribute of
another version that does not fit its type is kept aside in ``extra``, never an error); writing is strict (a field
this module does not know, or a value of the wrong type, is a bug: pydantic's ``ValidationError``).
"""

from autotune.records.outcome import Outcome
from autotune.records.studies import (
    BUDGET_ATTR,
    FIRST_QUEUED_ATTR,
    RAISED_ATTR,
    REFERENCE_PREFIX,
    RULE_PREFIX,
    CalibrationError,
    InheritedOom,
    LearnedRule,
    ResidualRow,
    StudyIdentity,
    StudyRecord,
    WarmMeasurement,
    WarmWeight,
    write_study,
)
from autotune.records.trials import (
    DUPLICATED,
    FIXED_MARKS,
    RECORDED,
    LoadRecord,
    TrialRecord,
    chosen_load,
    config_key,
    duplicated,
    failure_kind,
    fixed_marks,
    is_baseline,
    is_duplicate,
    is_simulated,
    launched,
    measured_itself,
    node_minutes,
    oom_from_level,
    public_config,
    stored,
    stored_outcome,
    trial_seconds,
    workload_results,
    write,
    write_stored,
)
from autotune.records.workloads import WorkloadRecord

__all__ = ["BUDGET_ATTR", "DUPLICATED", "FIRST_QUEUED_ATTR", "FIXED_MARKS", "RAISED_ATTR", "RECORDED", "REFERENCE_PREFIX",
           "RULE_PREFIX", "CalibrationError", "InheritedOom", "LearnedRule", "LoadRecord", "Outcome", "ResidualRow", "StudyIdentity", "StudyRecord",
           "TrialRecord", "WarmMeasurement", "WarmWeight", "WorkloadRecord", "chosen_load", "config_key", "duplicated",
           "failure_kind", "fixed_marks", "is_baseline", "is_duplicate", "is_simulated", "launched", "measured_itself", "node_minutes",
           "oom_from_level", "public_config", "stored", "stored_outcome", "trial_seconds", "workload_results", "write",
           "write_stored", "write_study"]  # fmt: skip
