"""`python -m tests.study.killed_creator ARGS...`: the autotune CLI (`python -m autotune ARGS...`) that kills itself
with SIGKILL just before its Nth write to the storage (``KILL_BEFORE_WRITE=N``): a creator killed at a known point of
the study's set-up, not at a moment a sleep guessed."""

from __future__ import annotations

import inspect
import os
import signal
import sys

import optuna

from autotune.cli import main
from autotune.records import batch

KILL_ENV = "KILL_BEFORE_WRITE"
# RDBStorage's methods that write (Optuna's cached storage makes a trial through the private one)
_WRITES = ("create_new_", "_create_new_trial", "set_", "record_heartbeat")


def _kill_before(nth: int) -> None:
    writes = 0

    def wrap(method):
        def counted(*args, **kwargs):
            nonlocal writes
            writes += 1
            if writes == nth:
                os.kill(os.getpid(), signal.SIGKILL)
            return method(*args, **kwargs)

        return counted

    storage = optuna.storages.RDBStorage
    for name, method in list(vars(storage).items()):
        if inspect.isfunction(method) and name.startswith(_WRITES):
            setattr(storage, name, wrap(method))
    # autotune's batched writes (several attributes in one transaction) are one write each
    batch.one_call = wrap(batch.one_call)


if __name__ == "__main__":
    _kill_before(int(os.environ[KILL_ENV]))
    sys.argv = ["autotune", *sys.argv[1:]]
    main()
