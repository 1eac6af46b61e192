"""A running trial's heartbeat, recorded from a thread through an outage (``autotune.search.storage``)."""

from __future__ import annotations

import logging
import threading

from autotune.errors import AutotuneError
from autotune.search.storage import RetryingStorage, retry_backoff
from autotune.text import shorten

log = logging.getLogger(__name__)


class Heartbeat:
    """Records the running trial's heartbeat from a thread (study.optimize does this; we drive ask/tell ourselves).
    Through an outage it keeps trying (the worker's own calls give up, not its heartbeat), so that the trial is
    marked alive as soon as the storage answers again; a storage that gave up ends it quietly (the worker says why)."""

    def __init__(self, storage: RetryingStorage, trial_id: int, interval_s: int) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                answered = self.storage.beat(self.trial_id)
            except AutotuneError:
                return  # the storage gave up: the worker's next call says so, in one line
            except Exception as exc:  # a thread's traceback would be all the user sees of it
                log.warning("heartbeat of trial id %d stopped: %s", self.trial_id, shorten(str(exc), 200))
                return
            failures = 0 if answered else failures + 1
            self.stop.wait(self.interval if answered else min(self.interval, retry_backoff(failures)))

    def __enter__(self) -> Heartbeat:
        if self.interval:  # 0: no heartbeats (a study that no other worker watches, e.g. a benchmark's)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
