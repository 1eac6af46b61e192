"""A study's record: its description, its budget and the rules its failures taught it (``StudyRecord``)."""

from __future__ import annotations

from typing import Any

import optuna
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from autotune.records import batch

BUDGET_ATTR = "autotune_n_trials"  # the study's budget of launches (baselines included)
RAISED_ATTR = "autotune_budget_raised"  # when the budget was last raised (ISO time)
FIRST_QUEUED_ATTR = "autotune_first_configurations_queued"
RULE_PREFIX = "learned_rule:"  # one attribute per learned rule: workers add rules without a race


class LearnedRule(BaseModel):
    """A rule a failure taught the study: no later trial with ``param = value`` is launched."""

    model_config = ConfigDict(frozen=True)
    param: str
    value: Any
    kind: str  # the FailureKind that taught it
    reason: str
    trial: int


class StudyRecord(BaseModel):
    """What a study stores besides its trials: its description (written when it is made; ``space_digest`` last, so
    its presence says the description is whole), its budget, and the rules its failures taught it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")
    space_path: str | None = None
    space_name: str | None = None
    objective: dict[str, Any] | None = None  # ``autotune.space.schema.Objective``, as the study was run
    workload: dict[str, Any] | None = None  # ``autotune.space.schema.Workload``
    space_digest: str | None = None
    first_queued: bool = Field(False, alias=FIRST_QUEUED_ATTR)
    budget: int | None = Field(None, alias=BUDGET_ATTR)
    budget_raised: str | None = Field(None, alias=RAISED_ATTR)
    learned_rules: dict[str, LearnedRule] = Field(default_factory=dict)  # by name, ``learned:<param>=<value>``

    @classmethod
    def of(cls, study: optuna.Study) -> StudyRecord:
        """The study's record (a study of any layout: an attribute that does not fit is read as absent)."""
        attrs = study.user_attrs
        rules = {"learned:" + key.removeprefix(RULE_PREFIX): rule for key, rule in attrs.items()
                 if key.startswith(RULE_PREFIX)}  # fmt: skip
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
        if name == "learned_rules":
            for rule_name, rule in record.learned_rules.items():
                attrs[RULE_PREFIX + rule_name.removeprefix("learned:")] = rule.model_dump()
            continue
        attrs[StudyRecord.model_fields[name].alias or name] = getattr(record, name)
    batch.set_study_user_attrs(study._storage, study._study_id, attrs)
