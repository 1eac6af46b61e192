"""``study run``'s progress: what it is doing now (ranking the space, trial k of N launching, waiting for readiness,
load L of the sweep), trials done of the budget, the incumbent, node-hours spent (of ``--budget-node-hours``) and an
ETA from the measured trial lengths. A live display on a terminal; where stderr is not one (a log, CI, a pipe), one
plain line per phase change and per finished trial.

It is fed ``StatusEvent`` s (``autotune.search.status``, emitted by the study and the objective) and the study's counts after
each trial (``StudyCounts``); its clock is injectable, so that the ETA can be tested on given trial lengths.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from autotune.cli.ranking_progress import RankingProgress
from autotune.search import budget
from autotune.search.improvement import chance_to_improve
from autotune.search.ranking import best_of, maximizes
from autotune.search.status import Phase, StatusEvent
from autotune.search.study import node_minutes_of
from autotune.space.schema import SearchSpace


@dataclass(frozen=True)
class StudyCounts:
    """Where the study stands: trials finished of its budget, its incumbent, what its trials cost."""

    done: int
    total: int
    best: str  # "best #3: 1234.5", or "no feasible trial yet"
    node_minutes: float
    chance: str = ""  # "chance to improve >2%: 12% (calibrated model)", once there is an incumbent


def study_counts(study: optuna.Study, space: SearchSpace | None = None) -> StudyCounts:
    """The counts of a study in its storage (every worker's trials), from one read of its trials; with ``space``, the
    chance that an untried configuration improves on the incumbent (``autotune.search.improvement``)."""
    trials = study.get_trials(deepcopy=False)
    done = budget.count(trials).launches  # what the budget (the total) counts
    incumbent = best_of(trials, maximizes(study))
    best = f"best #{incumbent.number}: {incumbent.values[0]:.1f}" if incumbent else "no feasible trial yet"
    chance = chance_to_improve(study, space) if space is not None else None
    return StudyCounts(done, budget.study_budget(study), best, node_minutes_of(trials),
                       chance.text() if chance is not None else "")  # fmt: skip


def duration_text(seconds: float) -> str:
    """45 s, 12 min, 1 h 05 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class StudyProgress:
    """The progress display of one ``study run``; a context manager (the live display runs inside it)."""

    def __init__(self, console: Console, budget_node_minutes: float | None = None,
                 clock: Callable[[], float] = time.monotonic, live: bool | None = None,
                 header: str = "") -> None:  # fmt: skip
        self.console, self.budget_node_minutes, self.clock = console, budget_node_minutes, clock
        # printed once the study is open and checked (its first event): a run refused before that stays one line
        self.header = header
        self.live = console.is_terminal if live is None else live
        self.ranking = RankingProgress(clock, live=self.live)  # the count, where the ranking takes over 2 s
        self.counts: StudyCounts | None = None
        self.current: StatusEvent | None = None
        self.started: float | None = None  # when the first trial started (the ranking before is no trial's time)
        self.last_finish: float | None = None
        self.lengths: list[float] = []  # seconds between trial finishes: trial lengths, over the workers running
        self._display: Live | None = None
        self._last_line = ""

    def __enter__(self) -> StudyProgress:
        if self.live:
            self._display = Live(self, console=self.console, transient=True, refresh_per_second=4)
            self._display.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._display is not None:
            self._display.stop()

    def __rich__(self) -> Group:
        counts = self.counts
        bar = ProgressBar(total=counts.total if counts else None, completed=counts.done if counts else 0, width=20)
        line = Table.grid(padding=(0, 1))
        line.add_row(bar, Text(self.summary()))  # the summary wraps beside the bar on a narrow terminal
        return Group(Text(self.doing(), style="bold"), line)

    # -- what it is doing now -------------------------------------------------------------------------------------
    def _announce(self) -> None:
        if self.header:
            self.console.print(self.header, highlight=False, markup=False, soft_wrap=True)
            self.header = ""

    def status(self, event: StatusEvent) -> None:
        """The status callback (``autotune.search.status.StatusCallback``)."""
        self._announce()
        self.ranking.status(event)
        if event.phase != Phase.RANKING and self.started is None:
            self.started = self.clock()
        self.current = event
        self._plain(self.doing())

    def doing(self) -> str:
        event = self.current
        if event is None:
            return "preparing the study (checking the space and its engines, opening the storage)"
        if event.trial is None:
            return self.ranking.text() if event.phase == Phase.RANKING else event.phase.value
        counts = self.counts
        # one numbering: the trial's own number (as its finished line and `study show` name it); the budget's count
        # beside it, while the budget has launches left (a duplicate or a rejection after it launches nothing)
        which = f"trial {event.trial}"
        if counts and counts.done < counts.total:
            which += f" (launch {counts.done + 1} of {counts.total})"
        if event.phase == Phase.MEASURING:
            load = ", ".join(f"{k}={v}" for k, v in (event.load or {}).items()) or "the workload's own"
            of = f"workload {event.workload}, " if event.workload else ""
            return f"{which}: {of}load {event.load_index + 1} of {event.loads} ({load})"
        return f"{which}: {event.phase.value}"

    # -- trials done ----------------------------------------------------------------------------------------------
    def update(self, counts: StudyCounts) -> None:
        """The study's counts now; each newly finished trial's length is the time since the previous finish."""
        self._announce()
        now = self.clock()
        finished = counts.done - (self.counts.done if self.counts else counts.done)
        if finished > 0:
            since = self.last_finish if self.last_finish is not None else self.started
            if since is not None:
                self.lengths += [(now - since) / finished] * finished
            self.last_finish = now
        elif self.started is None:
            self.started = now
        self.counts = counts

    def trial_finished(self, counts: StudyCounts, line: str) -> None:
        """A trial of this process finished: its line (``trial N: outcome``), then where the study stands."""
        self.update(counts)
        self.console.print(f"{line}  [{self.summary()}]", highlight=False, markup=False, soft_wrap=True)

    def node_progress(self, counts: StudyCounts) -> None:
        """The study's counts, polled while a node's workers run (their trials print their own lines)."""
        before = self.counts.done if self.counts else None
        self.update(counts)
        if not self.live and counts.done != before:
            self._plain(self.summary())

    def eta_s(self) -> float | None:
        """Seconds left: the mean trial length so far times the trials left, less the time into the current one."""
        if not self.lengths or self.counts is None:
            return None
        left = statistics.fmean(self.lengths) * max(0, self.counts.total - self.counts.done)
        into = self.clock() - self.last_finish if self.last_finish is not None else 0.0
        return max(0.0, left - into)

    def summary(self) -> str:
        counts = self.counts
        if counts is None:
            return "no trial finished yet"
        hours = f"{counts.node_minutes / 60:.2f} node-hours"
        if self.budget_node_minutes is not None:
            hours += f" of {self.budget_node_minutes / 60:.2f}"
        eta = self.eta_s()
        parts = [f"{counts.done}/{counts.total} launches done", counts.best, *([counts.chance] if counts.chance else []),
                 hours, "ETA " + (duration_text(eta) if eta is not None else "after the first trial")]  # fmt: skip
        return " · ".join(parts)

    def _plain(self, line: str) -> None:
        """Where stderr is not a terminal: the line, once (a phase change)."""
        if self.live or line == self._last_line:
            return
        self._last_line = line
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)
