"""Continuous batching, as the engines do it, over a performance model's step time.

Each attention rank keeps a waiting queue and a running set. A step runs every running decode plus chunked prefill
up to the token budget (``max_num_batched_tokens``); a waiting request is admitted while fewer than
``max_num_seqs`` run and its whole sequence fits in the rank's free KV cache. The first token is sampled at the end
of the step that finishes its prefill; with speculative decoding a step gains the expected accepted tokens.

The same scheduler runs in virtual time (``simulate``: the direct mode, thousands of trials a minute) and behind the
simulated server in real time (autotune.sim.server), so the two agree by construction up to the client's timing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from autotune.sim.analytic import RankLoad


class StepModel(Protocol):
    ranks: int
    max_running: int
    batched_tokens: int
    kv_tokens_per_rank: int
    max_model_len: int

    def step_time(self, loads: list[RankLoad]) -> float: ...

    def tokens_per_decode(self) -> tuple[int, float]: ...

    # for the direct mode's reuse of benchmarks and schedules (autotune.sim.direct, autotune.sim.replay):
    def timing_key(self) -> tuple: ...  # what step_time reads (equal keys: equal step times)

    def work_key(self) -> tuple: ...  # what step_work reads (equal keys: equal work)

    def step_work(self, loads: list[RankLoad]) -> float | None: ...  # step_time = with_overhead(step_work)

    def with_overhead(self, work: float | None) -> float: ...


@dataclass(eq=False)
class SimRequest:
    """One request inside the simulated engine; ``handle`` is whatever the caller wants back with its tokens."""

    prompt_len: int
    output_len: int
    handle: object = None
    prefilled: int = 0
    credit: float = 0.0  # fractional tokens gained (speculative decoding)
    emitted: int = 0

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.prompt_len


@dataclass
class _Rank:
    waiting: deque[SimRequest] = field(default_factory=deque)
    running: list[SimRequest] = field(default_factory=list)
    kv_used: int = 0


@dataclass(frozen=True)
class TokenEvent:
    request: SimRequest
    tokens: int
    finished: bool


class Scheduler:
    """The engine's step loop, without a clock: ``step()`` says how long the step took and which tokens came out."""

    def __init__(self, model: StepModel) -> None:
        self.model = model
        self.ranks = [_Rank() for _ in range(model.ranks)]
        self.verified, self.accepted = model.tokens_per_decode()

    def admissible(self, request: SimRequest) -> bool:
        """False when the request can never run (longer than the context or the KV cache): the engine answers 400."""
        total = request.prompt_len + request.output_len
        return total <= self.model.max_model_len and total <= self.model.kv_tokens_per_rank

    def add(self, request: SimRequest) -> None:
        rank = min(self.ranks, key=lambda r: len(r.running) + len(r.waiting))
        rank.waiting.append(request)

    @property
    def busy(self) -> bool:
        return any(rank.running or rank.waiting for rank in self.ranks)

    def step(self) -> tuple[float, list[TokenEvent]]:
        loads, events = self.schedule_step()
        return self.model.step_time(loads), events

    def schedule_step(self) -> tuple[list[RankLoad], list[TokenEvent]]:
        """One step's work on each rank and the tokens it emits: what the step does, not how long it takes."""
        loads, prefilling = [], []
        for rank in self.ranks:
            self._admit(rank)
            load, chunks = self._plan(rank)
            loads.append(load)
            prefilling.append(chunks)
        events = []
        for rank, chunks in zip(self.ranks, prefilling, strict=True):
            events += self._advance(rank, chunks)
        return loads, events

    def _admit(self, rank: _Rank) -> None:
        while rank.waiting and len(rank.running) < self.model.max_running:
            request = rank.waiting[0]
            need = request.prompt_len + request.output_len
            if rank.kv_used + need > self.model.kv_tokens_per_rank:
                break
            rank.waiting.popleft()
            rank.kv_used += need
            rank.running.append(request)

    def _plan(self, rank: _Rank) -> tuple[RankLoad, dict[SimRequest, int]]:
        decoding = [r for r in rank.running if r.decoding]
        budget = self.model.batched_tokens - len(decoding) * self.verified
        chunks: dict[SimRequest, int] = {}
        prefill_context = 0
        for request in rank.running:
            if budget <= 0:
                break
            if not request.decoding:
                chunk = min(budget, request.prompt_len - request.prefilled)
                chunks[request] = chunk
                prefill_context += chunk * (request.prefilled + chunk // 2)
                budget -= chunk
        context = sum(r.prompt_len + r.emitted for r in decoding)
        return RankLoad(len(decoding), context, sum(chunks.values()), prefill_context), chunks

    def _advance(self, rank: _Rank, chunks: dict[SimRequest, int]) -> list[TokenEvent]:
        events = []
        for request in list(rank.running):
            if request.decoding:
                request.credit += self.accepted
            elif request in chunks:
                request.prefilled += chunks[request]
                if not request.decoding:
                    continue
                request.credit += 1  # the first token is sampled by the step that completes the prefill
            else:
                continue
            tokens = min(int(request.credit), request.output_len - request.emitted)
            if tokens <= 0:
                continue
            request.credit -= tokens
            request.emitted += tokens
            finished = request.emitted >= request.output_len
            if finished:
                rank.running.remove(request)
                rank.kv_used -= request.prompt_len + request.output_len
            events.append(TokenEvent(request, tokens, finished))
        return events
