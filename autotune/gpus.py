"""A node's GPUs shared by the trials of its workers: each trial leases as many as its configuration uses, disjoint
from every other trial's, and its engine sees only those (``CUDA_VISIBLE_DEVICES``).

Leases are ``flock`` locks on one file per GPU in a directory of the node, so they work across the worker processes
of a node and are released by the kernel when a worker dies, even by SIGKILL: a dead worker's GPUs are never lost.
A trial waiting for GPUs first lets later, smaller trials take GPUs that are free (so the node is not left idle
behind it); after ``_PATIENCE_S`` it holds the node's queue lock, so that no later trial takes the GPUs it waits for
one by one: it starts as soon as the running ones end. An 8-GPU trial never starts beside another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from autotune.errors import UsageError
from autotune.server import gpu_memory_used

_WAIT_POLL_S = 0.2
# How long a trial waiting for GPUs lets later, smaller trials take free ones before it holds the node's queue: a
# 1-GPU trial may start on a GPU an 8-GPU trial waits for, delaying it by at most this and one trial's length.
_PATIENCE_S = 60.0


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
    """The GPUs a worker may use, leased per trial. ``lock_dir`` is shared by every worker of the node."""

    def __init__(self, gpus: tuple[str, ...], lock_dir: Path) -> None:
        self.gpus, self.lock_dir = gpus, lock_dir
        lock_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def lease(self, count: int) -> Iterator[tuple[str, ...]]:
        """Hold ``count`` of the pool's GPUs (waiting until that many are free) for the duration of the block."""
        if count > len(self.gpus):
            raise ValueError(f"needs {count} GPUs, the worker has {len(self.gpus)} ({','.join(self.gpus)})")
        held, waiting_since = None, time.monotonic()
        while held is None and time.monotonic() - waiting_since < _PATIENCE_S:  # smaller trials may pass meanwhile
            with _locked(self.lock_dir / "queue.lock"):
                held = self._take(count)
            if held is None:
                time.sleep(_WAIT_POLL_S)
        if held is None:
            with _locked(self.lock_dir / "queue.lock"):  # then no trial starts before this one: it cannot starve
                held = self._take(count)
                while held is None:
                    time.sleep(_WAIT_POLL_S)
                    held = self._take(count)
        try:
            yield tuple(gpu for gpu, _ in held)
        finally:
            for _, handle in held:
                handle.close()  # closing the file releases its lock

    def _take(self, count: int) -> list[tuple[str, object]] | None:
        """``count`` free GPUs, locked, or None (and nothing held) when fewer are free."""
        held = []
        for gpu in self.gpus:
            handle = (self.lock_dir / f"gpu-{gpu}.lock").open("w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            held.append((gpu, handle))
            if len(held) == count:
                return held
        for _, handle in held:
            handle.close()
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def node_lock_dir(studies_dir: Path) -> Path:
    """Where the workers of this node keep their GPU locks (one directory per host: a shared studies directory on a
    cluster file system must not make two nodes' GPU 0 one GPU)."""
    return studies_dir / ".gpus" / os.uname().nodename
