"""What ``study run`` shows while the prior ranks the space before its first launch: "ranking the space", and once
that has taken ``SHOW_AFTER_S``, how far it is: ``ranking 4,200 / 11,520 · 12 s``.

It reads the set-up's status events (``autotune.search.prior.RankingStatus``: the count of configurations
predicted) and its clock is injectable, so that what it shows at each moment is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune.search.prior import RankingStatus
from autotune.search.status import Phase, StatusEvent

SHOW_AFTER_S = 2.0  # a ranking over sooner is over before a count could be read: the phase alone says enough
PLAIN_EVERY_S = (
    10.0  # where stderr is not a terminal, a new line at most this often: a log of a long ranking stays short
)


def ranking_text(done: int, total: int, elapsed_s: float) -> str:
    """``ranking 4,200 / 11,520 · 12 s``."""
    return f"ranking {done:,} / {total:,} · {_elapsed_text(elapsed_s)}"


def _elapsed_text(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


class RankingProgress:
    """The ranking's line. Live (a terminal redraws it): the count and the seconds as of now. Plain (a log):
    as of the last update at least ``PLAIN_EVERY_S`` after the one shown before, or the last, so that a display
    printing each change prints a line every ``PLAIN_EVERY_S``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, live: bool = True) -> None:
        self.clock, self.live = clock, live
        self.started: float | None = None  # the first RANKING event: the ranking begins
        self.latest: tuple[int, int] | None = None  # (done, total) as last heard
        self.shown: tuple[int, int, float] | None = None  # plain: (done, total, elapsed) as last shown

    def status(self, event: StatusEvent) -> None:
        """A status event of the study (``autotune.search.status.StatusCallback``); those of other phases are not
        the ranking's."""
        if event.phase != Phase.RANKING:
            return
        now = self.clock()
        if self.started is None:
            self.started = now
        if not isinstance(event, RankingStatus):
            return
        self.latest = (event.done, event.total)
        elapsed = now - self.started
        last = self.shown[2] if self.shown else None
        finished = event.done == event.total
        if elapsed >= SHOW_AFTER_S and (last is None or elapsed - last >= PLAIN_EVERY_S or finished):
            self.shown = (event.done, event.total, elapsed)

    def text(self) -> str:
        """What the ranking shows now."""
        if self.started is None or self.latest is None:
            return Phase.RANKING.value
        if not self.live:
            return ranking_text(*self.shown) if self.shown else Phase.RANKING.value
        elapsed = self.clock() - self.started
        return ranking_text(*self.latest, elapsed) if elapsed >= SHOW_AFTER_S else Phase.RANKING.value
