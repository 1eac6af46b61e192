"""A SIGTERM to a tuner process (``scancel``, a pod's deletion, a node's workers stopped by their parent): the running
trial stops where it is and is left RUNNING, to be retried by the next run; it is never judged.

The handler raises ``Terminated`` where the signal lands, so that the engine's context manager takes it down. But
Python may run a handler inside a callback that swallows exceptions (a weakref finaliser, ``__del__``), and a
scheduler signals the engine too: the engine then dies of the same SIGTERM, and without the flag below the trial would
record a crash of a good configuration and go on to the next one. So the request is also kept as a flag that the
trial's failure paths and the worker's loop look at (``raise_if_requested``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM turned into an exception (a BaseException: no ``except Exception`` of a trial may judge it)."""


_requested = threading.Event()


def requested() -> bool:
    return _requested.is_set()


def raise_if_requested() -> None:
    """Raise ``Terminated`` when a SIGTERM came (also one whose exception was swallowed where it landed)."""
    if _requested.is_set():
        raise Terminated


def _on_sigterm(signum: int, frame: object) -> None:
    _requested.set()
    # once: a second SIGTERM (Slurm signals every process of a step; a node's workers get one from their parent too)
    # must not interrupt the engine's stop that the first one started
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside, a SIGTERM raises ``Terminated`` and is remembered; the previous handler is put back after."""
    _requested.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
