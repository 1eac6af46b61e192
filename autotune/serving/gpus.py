"""A node's GPUs shared by the trials of its workers: each trial leases as many as its configuration uses, disjoint
from every other trial's, and its engine sees only those (``CUDA_VISIBLE_DEVICES``).

Leases are ``flock`` locks on one file per GPU in a directory of the node, so they work across the worker processes
of a node and are released by the kernel when a worker dies, even by SIGKILL: a dead worker's GPUs are never lost.

Who gets free GPUs: the largest waiting trial that fits them, or will as soon as leases about a typical trial long
end (a smaller one steps aside for it: the node packs its trials like bins, large first, and a small trial does not
take a GPU of a node that is about to be empty for a large one). A trial too large for the free GPUs lets smaller
ones take them for its patience (a few of the study's typical trial lengths, so the node is not left idle behind
it); then it holds the node's queue lock, so that no later trial takes the GPUs it waits for one by one: it starts
as soon as the running ones end, and cannot starve. An 8-GPU trial never starts beside another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from autotune.errors import UsageError
from autotune.serving.process import gpu_memory_used

_WAIT_POLL_S = 0.2
# How long a trial waiting for GPUs lets smaller trials take free ones before it holds the node's queue, in the
# study's typical trial lengths (at least _MIN_PATIENCE_S): holding the queue idles the GPUs that free up while the
# running trials drain, so the longer large trials let others pass, the fewer drains (large trials gather and run
# when the node empties). On a simulated node (benchmarks/gpu_packing_sim.py: 8 GPUs, 12 workers, 32 trials of
# 1/2/4/8 GPUs, equal lengths) the wall time is 0.56 of one at a time when the queue is held at once, 0.52 after 4
# lengths and 0.48 after 8 (the packing bound is 0.47).
_PATIENCE_TRIALS = 8
_MIN_PATIENCE_S = 60.0
_ENDING_FRACTION = 0.1


class Clock(Protocol):
    """What a lease reads the time from and waits with: the ``time`` module itself, or a test's controlled clock."""

    def time(self) -> float: ...
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float, /) -> None: ...


def parse_gpus(spec: str) -> tuple[str, ...]:
    """``auto`` (every GPU nvidia-smi lists), ``0,1,2,3`` (those), or ``N`` (the first N) → GPU indexes."""
    spec = spec.strip()
    if spec == "auto":
        found = tuple(sorted(gpu_memory_used(), key=int))
        if not found:
            raise UsageError("--gpus auto: nvidia-smi lists no GPU here; fix: give the GPUs, e.g. --gpus 0,1")
        return found
    if spec.isdigit():
        if int(spec) < 1:
            raise UsageError("--gpus 0: a worker needs at least one GPU; fix: leave --gpus out on a CPU host")
        return tuple(str(i) for i in range(int(spec)))
    indexes = tuple(part.strip() for part in spec.split(","))
    if not all(index.isdigit() for index in indexes) or len(set(indexes)) != len(indexes):
        raise UsageError(f"--gpus {spec!r}: expected auto, a count, or distinct indexes like 0,1,2,3")
    return indexes


class GpuPool:
    """The GPUs a worker may use, leased per trial. ``lock_dir`` is shared by every worker of the node; ``clock``
    times the patience and the leases' ages and waits between polls (a test controls it)."""

    def __init__(self, gpus: tuple[str, ...], lock_dir: Path, clock: Clock = time) -> None:
        self.gpus, self.lock_dir, self.clock = gpus, lock_dir, clock
        self.queue_lock = lock_dir / "queue.lock"  # held to take GPUs: one trial at a time looks and takes
        lock_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def lease(self, count: int, typical_trial_s: float | None = None) -> Iterator[tuple[str, ...]]:
        """Hold ``count`` of the pool's GPUs (waiting until that many are free) for the duration of the block.
        ``typical_trial_s``: how long the study's trials take, for how long a waiting one lets smaller ones pass."""
        if count > len(self.gpus):
            raise UsageError(
                f"this launch needs {count} GPUs, the worker has {len(self.gpus)} ({','.join(self.gpus)}); "
                "fix: give the worker more GPUs (--gpus) or bound the space's parallel sizes"
            )
        patience_s = max(_MIN_PATIENCE_S, _PATIENCE_TRIALS * (typical_trial_s or 0.0))
        held, waiting_since = None, self.clock.monotonic()
        with self._waiting(count):
            while held is None and self.clock.monotonic() - waiting_since < patience_s:  # smaller trials may pass
                with _locked(self.queue_lock):
                    held = self._take(count, typical_trial_s, step_aside=True)
                if held is None:
                    self.clock.sleep(_WAIT_POLL_S)
            if held is None:
                with _locked(self.queue_lock):  # then no trial starts before this one: it cannot starve
                    held = self._take(count)
                    while held is None:
                        self.clock.sleep(_WAIT_POLL_S)
                        held = self._take(count)
        try:
            yield tuple(gpu for gpu, _ in held)
        finally:
            for _, handle in held:
                handle.close()  # closing the file releases its lock

    def _take(self, count: int, typical_trial_s: float | None = None,
              step_aside: bool = False) -> list[tuple[str, object]] | None:  # fmt: skip
        """``count`` free GPUs, locked, or None (and nothing held) when fewer are free, or, with ``step_aside``,
        when taking them would keep a larger waiting trial from GPUs that are free or about to be (it takes them at
        its next poll). About to be: held by a lease as old as a typical trial, give or take _ENDING_FRACTION of
        one (a small trial that took a GPU as the node drains would idle the rest for a whole trial)."""
        held, ending = [], 0
        for gpu in self.gpus:
            handle = (self.lock_dir / f"gpu-{gpu}.lock").open("a+")  # not "w": the holder's start time stays
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if step_aside and _about_to_end(handle, typical_trial_s, self.clock.time()):
                    ending += 1
                handle.close()
                continue
            held.append((gpu, handle))
            if len(held) == count and not step_aside:
                break
        free = len(held)
        if free >= count and not (step_aside and self._keeps_a_larger_one_waiting(count, free + ending)):
            for _, handle in held[count:]:
                handle.close()
            for _, handle in held[:count]:
                handle.truncate(0)
                handle.write(f"{self.clock.time():.3f}")  # when this lease started, for the others' estimate above
                handle.flush()
            return held[:count]
        for _, handle in held:
            handle.close()
        return None

    def _keeps_a_larger_one_waiting(self, count: int, soon_free: int) -> bool:
        """Whether taking ``count`` of the ``soon_free`` GPUs (free or about to be) would leave too few for a larger
        waiting trial that they would fit."""
        return any(count < size <= soon_free < size + count for size in self._waiting_sizes())

    @contextlib.contextmanager
    def _waiting(self, count: int) -> Iterator[None]:
        """This trial is waiting for ``count`` GPUs: a file holding the count, locked while it waits (a dead
        worker's file is unlocked, and ignored)."""
        path = self.lock_dir / f"waiting-{uuid.uuid4().hex}"
        with _locked(self.queue_lock):  # readers hold it too: none sees the file before it is locked
            handle = path.open("w")
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(str(count))
            handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            handle.close()

    def _waiting_sizes(self) -> list[int]:
        """How many GPUs each other trial waiting on this node needs (called under the queue lock)."""
        sizes = []
        for path in self.lock_dir.glob("waiting-*"):
            with contextlib.suppress(FileNotFoundError), path.open() as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its trial is waiting: alive
                    sizes.append(int(handle.read() or 0))
                    continue
                path.unlink(missing_ok=True)  # unlocked: its worker died while it waited
        return sizes


def _about_to_end(handle, typical_trial_s: float | None, now: float) -> bool:
    """Whether the lease whose GPU lock file this is has run about a typical trial's length at ``now``."""
    if not typical_trial_s:
        return False
    handle.seek(0)
    try:
        age = now - float(handle.read())
    except ValueError:  # taken by an older autotune, or being written
        return False
    return abs(age - typical_trial_s) <= _ENDING_FRACTION * typical_trial_s


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def node_lock_dir(studies_dir: Path) -> Path:
    """Where the workers of this node keep their GPU locks (one directory per host: a shared studies directory on a
    cluster file system must not make two nodes' GPU 0 one GPU)."""
    return studies_dir / ".gpus" / os.uname().nodename
