"""A SIGTERM to a tuner process (``scancel``, a pod's deletion, a node's workers stopped by their parent): the running
trial stops where it is and is left RUNNING, to be retried by the next run; it is never judged.

The handler raises ``Terminated`` where the signal lands, so that the engine's context manager takes it down. But
Python may run a handler inside a callback that swallows exceptions (a weakref finaliser, ``__del__``), and a
scheduler signals the engine too: the engine then dies of the same SIGTERM, and without the flag below the trial would
record a crash of a good configuration and go on to the next one. So the request is also kept as a flag that the
trial's failure paths and the worker's loop look at (``raise_if_requested``).

Inside an event loop (a benchmark) the handler raises nothing: asyncio keeps an exception raised in a task or a
callback to that task (a watchdog task that took it would die silently, and the benchmark would wait on a hung engine
forever). It cancels the loop's tasks instead, and ``stop_on_sigterm`` turns the cancellation into ``Terminated``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM turned into an exception (a BaseException: no ``except Exception`` of a trial may judge it)."""


_requested = threading.Event()
_inside = threading.Event()  # within stop_on_sigterm: our handler is the one installed
_AGAIN_AFTER_S = 0.05


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
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise Terminated from None
    loop.call_soon_threadsafe(_cancel_tasks, loop)  # threadsafe: wakes the loop where it waits in select


def _cancel_tasks(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel("SIGTERM")


def _raise_again_where_it_goes_on(unraisable, previous_hook) -> None:
    """``sys.unraisablehook`` while inside ``stop_on_sigterm``: a ``Terminated`` dropped by the callback it landed in
    is signalled once more, so that the handler raises it where the main thread goes on (the flag alone is looked at
    only between trials and where a launch fails: a benchmark of a live engine would otherwise run to its end, past
    a scheduler's KillWait, seen under Slurm)."""
    if isinstance(unraisable.exc_value, Terminated):
        signal.signal(signal.SIGTERM, _on_sigterm)
        # from another thread, a moment later: signalled from here, the handler would run at this hook's next
        # bytecode, inside the callback again
        threading.Timer(_AGAIN_AFTER_S, _signal_again).start()
        if previous_hook is sys.__unraisablehook__:
            return  # no "Exception ignored" traceback for the user: the stop goes on
    previous_hook(unraisable)


def _signal_again() -> None:
    if _inside.is_set():  # not once the stop is done and the previous handler is back (it may be the default: death)
        os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside, a SIGTERM raises ``Terminated`` and is remembered; the previous handler is put back after."""
    _requested.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: _raise_again_where_it_goes_on(unraisable, previous_hook)
    _inside.set()
    try:
        yield
    except asyncio.CancelledError:
        if _requested.is_set():  # a benchmark's tasks, cancelled by the handler
            raise Terminated from None
        raise
    finally:
        _inside.clear()
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)
