"""A node worker dies with the ``study run`` process that started it, even when that process is SIGKILLed.

The workers' parent is multiprocessing's fork server, not ``run_node``'s process, so their PDEATHSIG fires only when
the fork server exits; and the fork server exits only once every write end of its "alive" pipe is closed, which each
process it forks holds too (CPython hands it to them). So after a SIGKILL of the tuner, the fork server and its
workers kept each other alive: the workers went on running trials unwatched, and their trials never looked dead to the
next ``study run``. Each worker therefore watches the tuner itself, through a pidfd (an event, no polling).
"""

from __future__ import annotations

import os
import select
import signal
import threading


def die_with(tuner_pid: int) -> None:
    """SIGKILL this process as soon as process ``tuner_pid`` exits; exit at once if it has already. A daemon thread
    waits on its pidfd; where there are none (not Linux 5.3+), only the check that it still runs is made."""
    try:
        pidfd = os.pidfd_open(tuner_pid)
    except (AttributeError, OSError) as exc:
        if isinstance(exc, ProcessLookupError) or not _runs(tuner_pid):
            os._exit(1)  # the tuner died before this worker got this far
        return

    def wait_then_die() -> None:
        select.select([pidfd], [], [])  # readable once the process has exited
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait_then_die, name="die-with-tuner", daemon=True).start()


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
