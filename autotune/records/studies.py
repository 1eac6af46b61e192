"""A study's record: its description, its budget and the rules its failures taught it (``StudyRecord``)."""

from __future__ import annotations

from typing import Any

import optuna
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from autotune.records import batch, optuna_private

BUDGET_ATTR = "autotune_n_trials"  # the study's budget of launches (baselines included)
RAISED_ATTR = "autotune_budget_raised"  # when the budget was last raised (ISO time)
FIRST_QUEUED_ATTR = "autotune_first_configurations_queued"
RULE_PREFIX = "learned_rule:"  # one attribute per learned rule: workers add rules without a race
RECHECK_PREFIX = "recheck:"  # one attribute per inherited rule re-checked on this study's version: the trial doing it
WARM_WEIGHT_PREFIX = "warm_weight:"  # one attribute per update of the warm prior's weight (by trial number)
CALIBRATION_PREFIX = "calibration:"  # one attribute per trial's calibration error (by trial number)
REFERENCE_PREFIX = "mix_reference:"  # one attribute per workload's reference: workers add them without a race


class LearnedRule(BaseModel):
    """A rule a failure taught the study: no later trial with ``param = value`` is launched."""

    model_config = ConfigDict(frozen=True)
    param: str
    value: Any
    kind: str  # the FailureKind that taught it
    reason: str
    trial: int
    # where an earlier study taught it (warm start): that study, the engine and version it was learned on. A rule of
    # another version is re-checked once here (``autotune.search.warm_rules``); None: learned by this study
    inherited_from: str | None = None
    engine: str | None = None
    engine_version: str | None = None

    def stored(self) -> dict[str, Any]:
        """As its attribute keeps it: a rule this study learned, in the layout of the studies before warm start."""
        return self.model_dump(exclude={k for k in _ORIGIN if getattr(self, k) is None})


_ORIGIN = ("inherited_from", "engine", "engine_version")


class StudyIdentity(BaseModel):
    """What a study measured on: model family, hardware and each engine's version (``--warm-start auto`` queries it)."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())  # pydantic before 2.10 warns of model_*
    model_family: str | None = None
    hardware: dict[str, Any] = Field(default_factory=dict)  # ``autotune.config.Hardware``
    engines: dict[str, str] = Field(default_factory=dict)  # engine → the version its flags are rendered for


class InheritedOom(BaseModel):
    """An out-of-memory an earlier study saw: its configuration needed too much at load ``level`` and up."""

    model_config = ConfigDict(frozen=True)
    config: dict[str, Any]  # the public configuration (``TrialRecord.config``)
    level: int
    source: str  # "study:trial"
    engine_version: str | None = None


class WarmMeasurement(BaseModel):
    """One configuration an earlier study measured, as the warm prior learns from it: its parameters and its value
    relative to that study's best (1.0 = that study's best; a failure is not a measurement and is left out)."""

    model_config = ConfigDict(frozen=True)
    params: dict[str, Any]
    relative: float
    source: str  # "study:trial"


class WarmWeight(BaseModel):
    """The warm prior's weight after a trial: how far this study's own measurements agree with its ranking."""

    model_config = ConfigDict(frozen=True)
    trial: int
    weight: float
    pairs: int  # pairs of this study's measurements compared
    concordant: int  # of them, ordered as the prior predicted


class ResidualRow(BaseModel):
    """One load an earlier study measured, as the self-calibrating prior learns from it: the configuration's and the
    load's features and ``log(measured / predicted)`` of each metric (``autotune.search.residuals``)."""

    model_config = ConfigDict(frozen=True)
    features: list[str]
    residuals: dict[str, float]
    source: str  # the study it was measured in


class CalibrationError(BaseModel):
    """The performance model's error on one trial: the median factor between the objective it predicted and what the
    trial measured at the same loads, raw and calibrated on the trials before it (``autotune.search.calibration``)."""

    model_config = ConfigDict(frozen=True)
    trial: int
    raw: float | None
    calibrated: float | None
    fitted_loads: int  # the measured loads the calibration was fitted to (0: none yet, it is the raw model)


class StudyRecord(BaseModel):
    """What a study stores besides its trials: its description (written when it is made; ``space_digest`` last, so
    its presence says the description is whole), its budget, and the rules its failures taught it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")
    space_path: str | None = None
    space_name: str | None = None
    objective: dict[str, Any] | None = None  # ``autotune.space.schema.Objective``, as the study was run
    workload: dict[str, Any] | None = None  # ``autotune.space.schema.Workload``
    workloads: list[dict[str, Any]] | None = None  # a several-workload study's ``Workload``s
    # the reference throughput of each workload (the first baseline's best feasible, else the first trial's)
    mix_reference: dict[str, float] = Field(default_factory=dict)
    space_digest: str | None = None
    first_queued: bool = Field(False, alias=FIRST_QUEUED_ATTR)
    budget: int | None = Field(None, alias=BUDGET_ATTR)
    budget_raised: str | None = Field(None, alias=RAISED_ATTR)
    learned_rules: dict[str, LearnedRule] = Field(default_factory=dict)  # by name, ``learned:<param>=<value>``
    identity: StudyIdentity | None = None  # model family, hardware, engine versions (written when it is made)
    warm_sources: list[str] | None = None  # the studies it was warm-started from ("storage-less" names)
    warm_measurements: list[WarmMeasurement] | None = None  # what they measured, copied: the warm prior's data
    inherited_oom: list[InheritedOom] | None = None  # their out-of-memory failures (OOM dominance carries over)
    warm_residuals: list[ResidualRow] | None = None  # their performance model's residuals: the calibration's start
    upgrade_of: str | None = None  # `study upgrade`: the study of the older version this one re-tunes
    rechecks: dict[str, int] = Field(default_factory=dict)  # inherited rule name → the trial re-checking it here
    warm_weights: list[WarmWeight] = Field(default_factory=list)  # the warm prior's weight, trial by trial
    calibration: list[CalibrationError] = Field(default_factory=list)  # the performance model's error, by trial

    @classmethod
    def of(cls, study: optuna.Study) -> StudyRecord:
        """The study's record (a study of any layout: an attribute that does not fit is read as absent)."""
        attrs = study.user_attrs
        rules = {"learned:" + key.removeprefix(RULE_PREFIX): rule for key, rule in attrs.items()
                 if key.startswith(RULE_PREFIX)}  # fmt: skip
        rechecks = {key.removeprefix(RECHECK_PREFIX): n for key, n in attrs.items() if key.startswith(RECHECK_PREFIX)}
        weights, calibration = _by_trial(attrs, WARM_WEIGHT_PREFIX), _by_trial(attrs, CALIBRATION_PREFIX)
        references = {key.removeprefix(REFERENCE_PREFIX): value for key, value in attrs.items()
                      if key.startswith(REFERENCE_PREFIX) and isinstance(value, int | float)}  # fmt: skip
        attrs = attrs | {"rechecks": rechecks, "warm_weights": weights, "calibration": calibration,
                         "mix_reference": references}  # fmt: skip
        try:
            return cls.model_validate(attrs | {"learned_rules": rules})
        except pydantic.ValidationError as exc:
            misfits = {str(error["loc"][0]) for error in exc.errors()}
            kept = {k: v for k, v in attrs.items() if k not in misfits}
            rules = {k: v for k, v in rules.items() if ("learned_rules" not in misfits or _fits(LearnedRule, v))}
            return cls.model_validate(kept | {"learned_rules": rules})

    @property
    def slo(self) -> dict[str, float]:
        """The study's SLO limits by metric ({} without)."""
        return (self.objective or {}).get("slo", {})


def _by_trial(attrs: dict[str, Any], prefix: str) -> list[Any]:
    """The attributes named ``prefix`` + a trial number, in trial order."""
    return sorted((value for key, value in attrs.items() if key.startswith(prefix)),
                  key=lambda value: value.get("trial", 0) if isinstance(value, dict) else 0)  # fmt: skip


def _fits(model: type[BaseModel], value: Any) -> bool:
    try:
        model.model_validate(value)
    except pydantic.ValidationError:
        return False
    return True


def write_study(study: optuna.Study, **fields: Any) -> None:
    """Store ``fields`` of the study's record (StudyRecord's names and types), in one storage call
    (``autotune.records.batch``: one transaction, all of them or none)."""
    record = StudyRecord.model_validate(fields)
    attrs: dict[str, Any] = {}
    for name in fields:
        if name == "mix_reference":
            for workload, value in record.mix_reference.items():
                study.set_user_attr(REFERENCE_PREFIX + workload, value)
            continue
        if name == "learned_rules":
            for rule_name, rule in record.learned_rules.items():
                attrs[RULE_PREFIX + rule_name.removeprefix("learned:")] = rule.stored()
            continue
        if name == "rechecks":
            for rule_name, trial in record.rechecks.items():
                attrs[RECHECK_PREFIX + rule_name] = trial
            continue
        if name in ("warm_weights", "calibration"):
            prefix = WARM_WEIGHT_PREFIX if name == "warm_weights" else CALIBRATION_PREFIX
            for entry in getattr(record, name):
                attrs[f"{prefix}{entry.trial}"] = entry.model_dump()
            continue
        value = getattr(record, name)
        if isinstance(value, BaseModel) or (isinstance(value, list) and value and isinstance(value[0], BaseModel)):
            value = record.model_dump(mode="json", include={name})[name]  # stored as JSON, read back by the model
        attrs[StudyRecord.model_fields[name].alias or name] = value
    batch.set_study_user_attrs(optuna_private.storage_of(study), optuna_private.study_id_of(study), attrs)
