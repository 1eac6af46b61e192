"""A simulated engine's schedule, stepped once and retimed by other step-time models.

What the scheduler does in each step (what it admits, prefills and decodes; which tokens come out) depends on the
requests, the limits and the speculation, and on the steps between which each request is added, never on how long a
step takes. The prior's configurations differ mostly in what only times a step (the KV dtype, CUDA graphs, the GPUs
of a layout with as many attention ranks): ``RecordingScheduler`` steps a schedule once, ``ReplayScheduler`` replays
it under another model's step time, doing none of the scheduler's work. The replay checks each request is added
between the same steps as in the recording, and says ``Diverged`` (the caller steps it for real) where one is not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from autotune.sim.analytic import RankLoad
from autotune.sim.scheduler import Scheduler, SimRequest, StepModel, TokenEvent


class Diverged(Exception):
    """A request was added between other steps than in the recording: the replay does not describe this run."""


@dataclass(frozen=True)
class Emitted:
    """A request as a replayed token event names it: its handle, and the tokens it has emitted after the event."""

    handle: object
    emitted: int


@dataclass
class Trace:
    """A recorded schedule: each add as (steps run before it, the request's handle), each step's work per rank and
    its token events as ``simulate`` reads them (which request, whether it finished, and at its finish how many
    tokens it emitted: ``Emitted``), built once, so that a replay builds nothing per token."""

    adds: list[tuple[int, object]] = field(default_factory=list)
    loads: list[list[RankLoad]] = field(default_factory=list)
    events: list[tuple[TokenEvent, ...]] = field(default_factory=list)
    finishes: list[int] = field(default_factory=list)  # requests finished by each step
    work: dict[tuple, list[float | None]] = field(default_factory=dict)  # by StepModel.work_key, each step's

    @functools.cached_property
    def size(self) -> int:
        """What it holds once recorded, in references (its memory: roughly a tenth of a kilobyte each)."""
        return sum(len(events) for events in self.events) + sum(len(loads) for loads in self.loads)


class RecordingScheduler(Scheduler):
    """The scheduler, keeping the trace of what it did."""

    def __init__(self, model: StepModel) -> None:
        super().__init__(model)
        self.trace = Trace()
        self.work = self.trace.work.setdefault(model.work_key(), [])
        self._unfinished: dict[object, TokenEvent] = {}

    def add(self, request: SimRequest) -> None:
        super().add(request)
        self.trace.adds.append((len(self.trace.loads), request.handle))

    def step(self) -> tuple[float, list[TokenEvent]]:
        loads, events = self.schedule_step()
        trace = self.trace
        trace.loads.append(loads)
        trace.events.append(tuple(self._replayed(e) for e in events))
        trace.finishes.append(sum(e.finished for e in events))
        work = self.model.step_work(loads)
        self.work.append(work)
        return self.model.with_overhead(work), events

    def _replayed(self, event: TokenEvent) -> TokenEvent:
        """``event`` as replayed: a request's count of tokens is read only when it finishes, so the events before
        share one object per request (a schedule emits tens of thousands of tokens, kept while it is remembered)."""
        handle = event.request.handle
        if event.finished:
            return TokenEvent(Emitted(handle, event.request.emitted), event.tokens, True)
        if handle not in self._unfinished:
            self._unfinished[handle] = TokenEvent(Emitted(handle, 0), 0, False)
        return self._unfinished[handle]


class ReplayScheduler:
    """A recorded schedule under ``model``'s step time; the scheduler's interface as ``simulate`` uses it."""

    def __init__(self, model: StepModel, trace: Trace) -> None:
        self.model, self.trace = model, trace
        self.added = self.finished = self.steps_run = 0
        # each step's work under this model, computed by the first replay that reaches it: the replays that
        # differ only in the per-step overhead (CUDA graphs on or off) share it
        self.work = trace.work.setdefault(model.work_key(), [])

    def admissible(self, request: SimRequest) -> bool:
        return Scheduler.admissible(self, request)  # type: ignore[arg-type]  # it reads only the model's limits

    def add(self, request: SimRequest) -> None:
        adds = self.trace.adds
        if self.added >= len(adds) or adds[self.added] != (self.steps_run, request.handle):
            raise Diverged
        self.added += 1

    @property
    def busy(self) -> bool:
        return self.added > self.finished  # an added request waits or runs until its last token

    def step(self) -> tuple[float, tuple[TokenEvent, ...]]:
        adds, step = self.trace.adds, self.steps_run
        if step >= len(self.trace.loads) or (self.added < len(adds) and adds[self.added][0] <= step):
            raise Diverged  # a request the recording had added by now is still unsent
        self.steps_run += 1
        self.finished += self.trace.finishes[step]
        if step == len(self.work):
            self.work.append(self.model.step_work(self.trace.loads[step]))
        return self.model.with_overhead(self.work[step]), self.trace.events[step]
