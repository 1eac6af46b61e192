"""How alike an earlier study is to the one being made: what ``--warm-start auto`` ranks its sources by.

Every source's best is 1.0 relative to itself, so the sources' order decides whose best is measured first
(``autotune.search.warm_start.first_configurations``) and whose rule wins a tie: the likeliest to transfer comes
first. From the most alike:

1. **the same space**: the same space file, or a space of the same content (a sibling study of the very space);
2. **the same workload shape**: the requests' sizes and kind (dataset, lengths, prefix, endpoint), what moves an
   optimum most; the number of prompts, the seed and the load are not part of it;
3. **the same engine versions** (an upgrade's rules must be re-checked, the same version's apply as they are);
4. then the most recently finished, then by name (a listing's order is no reason).

A study of several workloads (a mix, whose values are relative to its baselines' measurements) and a one-workload
study measure different things: neither is a source for the other.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict

from autotune.records import StudyIdentity, StudyRecord
from autotune.search.setup import digest
from autotune.space.schema import SearchSpace, Workload

# a workload's fields that shape its requests (what the engine is tuned for); the rest say how many are sent, when
_SHAPE_FIELDS = ("dataset", "path", "classes", "endpoint", "input_len", "output_len", "range_ratio", "prefix_len")


class WorkloadShape(BaseModel):
    """The requests a workload sends, as far as an optimum depends on them (one per workload of a mix)."""

    model_config = ConfigDict(frozen=True)
    workloads: tuple[tuple[tuple[str, str], ...], ...]


class Similarity(BaseModel):
    """How alike an earlier study is to this one (see the module docstring); sorts most alike first."""

    model_config = ConfigDict(frozen=True)
    same_space: bool
    same_workload_shape: bool
    same_versions: bool
    finished_at: datetime.datetime | None  # its last trial's end (None: not known)
    name: str

    def order(self) -> tuple[Any, ...]:
        newest_first = -self.finished_at.timestamp() if self.finished_at else 0.0
        return (not self.same_space, not self.same_workload_shape, not self.same_versions, newest_first, self.name)


def shape_of_space(space: SearchSpace) -> WorkloadShape:
    return WorkloadShape(workloads=tuple(_shape(w) for w in space.mix_workloads()))


def shape_of_record(record: StudyRecord) -> WorkloadShape | None:
    """The shape of the workloads a study was run with (None: its record does not say, or in a layout not read)."""
    stored = record.workloads or ([record.workload] if record.workload else [])
    try:
        return WorkloadShape(workloads=tuple(_shape(Workload.model_validate(w)) for w in stored)) if stored else None
    except pydantic.ValidationError:
        return None


def _shape(workload: Workload) -> tuple[tuple[str, str], ...]:
    dumped = workload.model_dump(mode="json", include=set(_SHAPE_FIELDS))
    return tuple((name, repr(dumped.get(name))) for name in _SHAPE_FIELDS)


def measures_alike(record: StudyRecord, space: SearchSpace) -> bool:
    """Whether the earlier study's values mean what this one's will: both of one workload, or both mixes."""
    return bool(record.workloads and len(record.workloads) > 1) == space.is_mix


def similarity(record: StudyRecord, name: str, finished_at: datetime.datetime | None, identity: StudyIdentity,
               space: SearchSpace | None, space_path: Path | None) -> Similarity:  # fmt: skip
    """How alike the earlier study ``name`` (its ``record``) is to a study of ``space`` (from ``space_path``)."""
    same_file = space_path is not None and record.space_path == str(Path(space_path).resolve())
    same_content = space is not None and record.space_digest == digest(space)
    same_versions = record.identity is not None and record.identity.engines == identity.engines
    same_shape = space is not None and shape_of_record(record) == shape_of_space(space)
    return Similarity(same_space=same_file or same_content, same_workload_shape=same_shape,
                      same_versions=same_versions, finished_at=finished_at, name=name)  # fmt: skip
