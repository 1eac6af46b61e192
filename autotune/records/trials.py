"""A trial's record: ``TrialRecord`` (one field per user attribute), ``LoadRecord`` (one load its sweep measured),
the writers, and cheap reads for loops over every trial of a study."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import optuna
import pydantic
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import FailureKind
from autotune.records import batch, optuna_private
from autotune.records.outcome import Outcome
from autotune.records.workloads import WorkloadRecord
from autotune.text import shorten

RECORDED = ("output_throughput", "total_token_throughput", "median_ttft_ms", "p99_ttft_ms", "mean_ttft_ms",
            "median_tpot_ms", "p99_tpot_ms", "mean_tpot_ms", "completed", "failed")  # fmt: skip
LOAD_REASON_LIMIT = 300  # characters of a failed load's reason kept in its record
Number = int | float  # a count stays an int, a rate a float: stored as measured


def _word() -> Any:
    """A failure kind or outcome: a known word reads as its enum, another version's as its text (left to right)."""
    return Field(default=None, union_mode="left_to_right")


class LoadRecord(BaseModel):
    """One load a trial's sweep measured: the load (``max_concurrency``, ``request_rate``), whether it met the SLOs,
    its value (the first objective metric), and the benchmark's metrics, or why it measured nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    load: dict[str, Any] = Field(default_factory=dict)
    feasible: bool = False
    value: float | None = None
    failure_kind: FailureKind | str | None = _word()
    failure_reason: str | None = None
    metrics: dict[str, Number] | None = None  # None: the load failed and measured nothing
    violations: dict[str, float] | None = None  # graded SLO constraints by name (``slo:<metric>``)
    stopped_early: bool = False  # the SLO was clearly lost part-way: the metrics so far
    workload: str | None = None  # which workload of a several-workload study (``TrialRecord.workloads``)

    @classmethod
    def from_benchmark(cls, result: Mapping[str, Any] | BaseModel | None, load: Mapping[str, Any],
                       **fields: Any) -> LoadRecord:  # fmt: skip
        """The record of a load from its benchmark result (a ``BenchmarkResult`` or today's dict of vllm bench's
        keys; None for a load that failed), keeping ``RECORDED`` metrics; ``fields`` are the rest (feasible, value,
        failure_kind, failure_reason, violations, stopped_early)."""
        if isinstance(result, BaseModel):
            result = result.model_dump()
        metrics = None if result is None else {k: result[k] for k in RECORDED if k in result}
        if fields.get("failure_reason") is not None:
            fields["failure_reason"] = shorten(fields["failure_reason"], LOAD_REASON_LIMIT)
        return cls(load=dict(load), metrics=metrics, **fields)

    @property
    def measured(self) -> bool:
        """Whether the load produced metrics (a failed load produced none)."""
        return self.metrics is not None

    def stored(self) -> dict[str, Any]:
        """The record as its trial's ``benchmarks`` attribute keeps it (the keys of today's layout, in its order)."""
        row: dict[str, Any] = {"load": self.load, "feasible": self.feasible, "value": self.value}
        if self.failure_kind:
            row |= {"failure_kind": str(self.failure_kind), "failure_reason": self.failure_reason or ""}
        if self.metrics is not None:
            row["metrics"] = dict(self.metrics)
        if self.violations:
            row["violations"] = dict(self.violations)
        if self.stopped_early:
            row["stopped_early"] = True
        if self.workload is not None:
            row["workload"] = self.workload
        return row


class TrialRecord(BaseModel):
    """Everything a trial stores, one field per user attribute of the same name (``metrics`` and ``extra`` aside).

    Its field names are the attribute names: ``write(trial, outcome=..., load=...)`` stores them, ``of(trial)``
    reads them back. A field that was never stored reads as its default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    # what was tried
    config_key: str | None = None  # a digest of the launch configuration: finds exact duplicates
    engine: str | None = None
    config: dict[str, Any] | None = None  # the public configuration (secrets dropped; ``autotune.evidence.export``)
    baseline: bool = False  # the engine's default configuration, queued first
    prior: int | None = None  # its rank among the prior's picks, queued after the baselines
    prior_predicted: float | None = None
    neighbour_of: int | None = None  # queued as an untried neighbour of this trial (``autotune.search.refine``)
    warm_of: str | None = None  # queued to re-measure an earlier study's trial ("study:trial"; warm start)
    warm_predicted: float | None = None  # queued by the warm prior: its predicted value relative to the best
    calibrated_predicted: float | None = None  # queued by the self-calibrating prior: its predicted value
    simulated: dict[str, Any] | None = None  # the simulator's settings, for a trial it measured
    # what became of it
    outcome: Outcome | str | None = _word()
    failure_kind: FailureKind | str | None = _word()
    failure_reason: str | None = None
    rejected_by: str | None = None  # the rule that refused it before launch
    duplicate_of: int | None = None  # the earlier trial of the same configuration, whose outcome it took
    pruned_at: str | None = None  # "finished/total requests" of its first benchmark
    error: str | None = None  # the tuner's error, for an ``error`` outcome
    taught_rule: str | None = None  # the learned rule its failure taught the study
    rechecks: str | None = None  # the inherited rule (of another engine version) this launch re-checks
    oom_from_level: int | None = None  # the lightest load index at which it ran out of memory
    # its launch
    launched: bool = False
    launch: dict[str, Any] | None = None  # the (redacted) launch command: argv, env, secret_env, files
    served_by: dict[str, Any] | None = None  # what actually served it, where that is not ``launch`` (the simulator)
    engine_version: str | None = None
    gpus: list[str] | None = None  # the GPUs it leased (--gpus)
    engine_process: dict[str, Any] | None = None  # ``autotune.search.orphans.EngineProcess``
    worker: str | None = None  # host:pid of the tuner running it
    worker_process: dict[str, Any] | None = None  # ``autotune.search.orphans.TunerProcess``
    server_log: str | None = None
    gpu_memory_mib: dict[str, Any] | None = None  # before, ready, after, released
    # what it measured
    load: dict[str, Any] | None = None  # the chosen load (its best feasible, else its closest)
    benchmarks: list[LoadRecord] = Field(default_factory=list)  # every load measured, lightest first
    metrics: dict[str, Number] = Field(default_factory=dict)  # the chosen load's metrics: attributes of their name
    client_saturated: bool | None = None
    # a several-workload study: each workload's result, the mix that made the value, and whether the launch stopped
    # before measuring them all (those left could not lift the mix above the incumbent)
    workloads: list[WorkloadRecord] = Field(default_factory=list)
    mix: str | None = None
    mix_stopped_early: bool = False
    mix_bound: float | None = None  # after an early stop: the most the mix could have reached (below the incumbent)
    # what it cost
    node_minutes: float | None = None
    launch_s: float | None = None
    benchmark_s: float | None = None
    trial_s: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)  # attributes this version does not know, kept as they are

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        """The record ``trial`` stores (any layout: see the module docstring)."""
        return cls.from_attrs(trial.user_attrs)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> TrialRecord:
        """The record of a trial's user attributes: known names are fields, other numbers its metrics, the rest
        ``extra``; a value that does not fit its field's type (another version's) is kept in ``extra``."""
        fields: dict[str, Any] = {"metrics": {}, "extra": {}}
        for name, value in attrs.items():
            if name in _FIELDS:
                fields[name] = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                fields["metrics"][name] = value
            else:
                fields["extra"][name] = value
        try:
            return cls.model_validate(fields)
        except pydantic.ValidationError as exc:
            misfits = {str(error["loc"][0]) for error in exc.errors()} - {"metrics", "extra"}
            fields["extra"] |= {name: fields.pop(name) for name in misfits if name in fields}
            return cls.model_validate(fields)

    def stored(self) -> dict[str, Any]:
        """The record as user attributes (the fields that were set; what ``write`` stores)."""
        return _stored(self, [name for name in type(self).model_fields if name in self.model_fields_set])

    @property
    def failed(self) -> bool:
        """Whether it produced no measurement (a failure of some kind, its own or the trial it duplicates)."""
        return bool(self.failure_kind)

    @property
    def duplicate(self) -> bool:
        return self.duplicate_of is not None

    @property
    def measured_loads(self) -> list[LoadRecord]:
        """The loads that produced metrics (a failed load produced none)."""
        return [level for level in self.benchmarks if level.measured]


_FIELDS = frozenset(TrialRecord.model_fields) - {"metrics", "extra"}
# What marks a fixed configuration: the only attributes a configuration queued again keeps (a dead worker's retry,
# a launch whose engine was not installed), not the dead attempt's results, log or failure.
FIXED_MARKS = ("baseline", "prior", "prior_predicted", "neighbour_of", "warm_of", "warm_predicted",
               "calibrated_predicted")  # fmt: skip
# What a duplicate takes of the trial it repeats (its chosen load's throughputs with it).
DUPLICATED = ("failure_kind", "failure_reason", "rejected_by", "launch", "load", "output_throughput",
              "total_token_throughput", "workloads", "mix")  # fmt: skip


def _stored(record: TrialRecord, names) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        if name in ("metrics", "extra"):
            attrs |= value
        elif name in ("benchmarks", "workloads"):
            attrs[name] = [item.stored() for item in value]
        elif isinstance(value, StrEnum):
            attrs[name] = value.value
        else:
            attrs[name] = value
    return attrs


def stored(**fields: Any) -> dict[str, Any]:
    """``fields`` (TrialRecord's names and types) as the user attributes that store them, in the order given: for
    ``enqueue_trial(user_attrs=...)``, or a storage written to directly."""
    return _stored(TrialRecord.model_validate(fields), fields)


def write(trial: optuna.Trial, **fields: Any) -> None:
    """Store ``fields`` of the trial's record (TrialRecord's names and types) as its user attributes, in one storage
    call (``autotune.records.batch``: one transaction, all of them or none; a trial stopped part-way keeps what
    earlier writes stored)."""
    attrs = stored(**fields)
    if not isinstance(trial, optuna.Trial):  # a FrozenTrial being built (tests, an import): no storage
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        return
    batch.set_trial_user_attrs(trial.storage, optuna_private.trial_id_of(trial), attrs)
    optuna_private.keep_user_attrs_view(trial, attrs)  # as ``Trial.set_user_attr`` keeps the trial's own view


def write_stored(storage: optuna.storages.BaseStorage, trial_id: int, **fields: Any) -> None:
    """``write`` through a storage, for a trial this process does not run (a dead worker's)."""
    batch.set_trial_user_attrs(storage, trial_id, stored(**fields))


def fixed_marks(trial: FrozenTrial) -> dict[str, Any]:
    """The attributes that mark ``trial``'s configuration as a fixed one, as stored (for queueing it again)."""
    return {name: value for name, value in trial.user_attrs.items() if name in FIXED_MARKS}


def duplicated(previous: FrozenTrial) -> dict[str, Any]:
    """What a duplicate takes of the trial it repeats, as fields of its record (for ``write``)."""
    attrs = previous.user_attrs
    fields = {name: attrs[name] for name in DUPLICATED if name in attrs and name in _FIELDS}
    metrics = {name: attrs[name] for name in DUPLICATED if name in attrs and name not in _FIELDS}
    return fields | ({"metrics": metrics} if metrics else {})


# -- cheap reads for loops over every trial of a study (no validation: they run once per trial per decision) ------
def config_key(trial: FrozenTrial) -> str | None:
    """The trial's configuration digest (``TrialRecord.config_key``)."""
    return trial.user_attrs.get("config_key")


def launched(trial: FrozenTrial) -> bool:
    """Whether the trial launched its engine (``TrialRecord.launched``)."""
    return bool(trial.user_attrs.get("launched"))


def is_duplicate(trial: FrozenTrial) -> bool:
    """Whether the trial repeated an earlier trial's configuration (``TrialRecord.duplicate_of``)."""
    return "duplicate_of" in trial.user_attrs


def measured_itself(trial: FrozenTrial) -> bool:
    """Whether the trial measured its own configuration: launched, not a duplicate's copy, with a value (feasible or
    not: a launch that met no SLO or failed has its pessimistic value). A pruned trial did not: Optuna gives it its
    last intermediate value, a part of a benchmark, which must never stand as a measurement."""
    pruned = trial.state == optuna.trial.TrialState.PRUNED
    return launched(trial) and not is_duplicate(trial) and bool(trial.values) and not pruned


def failure_kind(trial: FrozenTrial) -> str | None:
    """The trial's failure kind as stored (``TrialRecord.failure_kind``), or None."""
    return trial.user_attrs.get("failure_kind")


def stored_outcome(trial: FrozenTrial) -> str | None:
    """The trial's stored outcome (``TrialRecord.outcome``), or None."""
    return trial.user_attrs.get("outcome")


def node_minutes(trial: FrozenTrial) -> float:
    """What the trial cost (``TrialRecord.node_minutes``; 0 where none is stored)."""
    return trial.user_attrs.get("node_minutes") or 0.0


def trial_seconds(trial: FrozenTrial) -> float | None:
    """The trial's wall time (``TrialRecord.trial_s``), or None."""
    return trial.user_attrs.get("trial_s")


def is_simulated(trial: FrozenTrial) -> bool:
    """Whether the simulator measured the trial (``TrialRecord.simulated``)."""
    return "simulated" in trial.user_attrs


def is_baseline(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get("baseline"))


def chosen_load(trial: FrozenTrial) -> dict[str, Any] | None:
    """The load the trial's value was measured at (``TrialRecord.load``), or None."""
    return trial.user_attrs.get("load")


def workload_results(trial: FrozenTrial) -> list[WorkloadRecord]:
    """Each workload's result of a several-workload trial ([] for a one-workload trial, or a misfit)."""
    try:
        return [WorkloadRecord.model_validate(row) for row in trial.user_attrs.get("workloads") or []]
    except pydantic.ValidationError:
        return []


def oom_from_level(trial: FrozenTrial) -> int | None:
    return trial.user_attrs.get("oom_from_level")


def public_config(trial: FrozenTrial) -> dict[str, Any] | None:
    """The trial's stored (public) configuration (``TrialRecord.config``), or None."""
    return trial.user_attrs.get("config")
