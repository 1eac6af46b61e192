"""What a trial of a several-workload study keeps of each workload (``WorkloadRecord``), and the study's reference
measurement of each (the baseline's best feasible throughput, that the mix is relative to)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

Number = int | float


class WorkloadRecord(BaseModel):
    """One workload of a trial's mix: its chosen load (its best feasible, else its closest to feasible), whether it
    met its SLOs there, its throughput (``value``, the objective metric) and that relative to the study's reference
    of the workload, its graded SLO violations and metrics; ``skipped`` when the launch stopped before measuring it
    (the workloads left could not lift the mix above the incumbent: ``autotune.search.mix``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # lenient: another version's fields are dropped
    name: str
    weight: float = 1.0
    load: dict[str, Any] | None = None
    feasible: bool = False
    value: float | None = None
    relative: float | None = None  # value / the study's reference of this workload
    violations: dict[str, float] | None = None  # by ``slo:<metric>``
    metrics: dict[str, Number] | None = None
    failure_kind: str | None = None  # every load of it failed (the launch's failure)
    skipped: bool = False
    loads_measured: int = 0

    @property
    def measured(self) -> bool:
        return not self.skipped and self.value is not None

    def stored(self) -> dict[str, Any]:
        """The record as a trial's ``workloads`` attribute keeps it (unset fields left out)."""
        return self.model_dump(exclude_defaults=True) | {"name": self.name}
