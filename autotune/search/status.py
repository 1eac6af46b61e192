"""What a study is doing now, as typed events: the study and each trial's objective emit them through one callback
(``StatusCallback``) that the command line passes down, and renders (``autotune.cli.progress``). Nothing here prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    """A step of a study, in the order a trial goes through them (a rejected or duplicate trial stops at STARTING)."""

    RANKING = "ranking the space"  # the prior predicts every launch configuration (minutes on a large space)
    STARTING = "checking the configuration"  # suggested; rules, duplicates
    WAITING_GPUS = "waiting for GPUs"  # a lease of the node's GPUs (--gpus)
    LAUNCHING = "launching"
    WAITING_READY = "waiting for readiness"
    MEASURING = "measuring"  # one load of the sweep


@dataclass(frozen=True)
class StatusEvent:
    """One step: the trial it belongs to (None: the study's), and for MEASURING the load and its place in the sweep."""

    phase: Phase
    trial: int | None = None
    load_index: int | None = None  # 0-based index of the load among the sweep's levels
    loads: int | None = None  # the sweep's levels in all
    load: dict | None = None
    workload: str | None = None  # of a several-workload study: the workload this load is of


StatusCallback = Callable[[StatusEvent], None]


def no_status(event: StatusEvent) -> None:
    """The default callback: nobody is watching (tests, benchmarks, a node's worker processes)."""
