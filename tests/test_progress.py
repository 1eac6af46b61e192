"""`study run`'s progress display: scripted status events and a fake clock drive the renderer (the ETA comes from the
given trial lengths, not from wall time). A real study's plain lines: tests/study/test_progress_lines.py."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autotune.cli.progress import StudyCounts, StudyProgress, duration_text
from autotune.search.status import Phase, StatusEvent


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _progress(live: bool = False, budget_node_minutes: float | None = None):
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    clock = FakeClock()
    return StudyProgress(console, budget_node_minutes, clock=clock, live=live), clock, out


def test_eta_is_the_mean_measured_trial_length_times_the_trials_left() -> None:
    progress, clock, _ = _progress()
    progress.status(StatusEvent(Phase.RANKING))
    clock.now += 159  # the ranking is no trial's time
    progress.update(StudyCounts(done=0, total=10, best="no feasible trial yet", node_minutes=0))
    assert progress.eta_s() is None and "ETA after the first trial" in progress.summary()
    for length in (60, 120, 90):  # trial lengths: mean 90 s
        progress.status(StatusEvent(Phase.STARTING, trial=progress.counts.done))
        clock.now += length
        done = progress.counts.done + 1
        progress.trial_finished(StudyCounts(done, 10, "best #0: 812.5", 30.0 * done), f"trial {done - 1}: 812.5")
    assert progress.lengths == [60, 120, 90]
    assert progress.eta_s() == pytest.approx(90 * 7)
    clock.now += 30  # 30 s into the next trial
    assert progress.eta_s() == pytest.approx(90 * 7 - 30)
    assert "ETA 10 min" in progress.summary()  # 600 s


def test_trials_finishing_together_share_the_interval() -> None:
    # a node's workers: two trials finished between two polls 100 s apart → 50 s each at the study's rate
    progress, clock, _ = _progress()
    progress.update(StudyCounts(0, 6, "no feasible trial yet", 0))
    clock.now += 100
    progress.node_progress(StudyCounts(2, 6, "best #1: 3.0", 4))
    assert progress.lengths == [50, 50] and progress.eta_s() == pytest.approx(200)


def test_the_display_says_what_it_is_doing_now_the_incumbent_and_the_node_hours_of_the_budget() -> None:
    progress, _, _ = _progress(live=True, budget_node_minutes=120)
    progress.status(StatusEvent(Phase.RANKING))
    assert progress.doing() == "ranking the space"
    progress.update(StudyCounts(2, 12, "best #1: 3590.0", 45.0))
    progress.status(StatusEvent(Phase.LAUNCHING, trial=2))
    assert progress.doing() == "trial 2 (launch 3 of 12): launching"
    progress.status(StatusEvent(Phase.WAITING_READY, trial=2))
    assert progress.doing() == "trial 2 (launch 3 of 12): waiting for readiness"
    progress.status(StatusEvent(Phase.MEASURING, trial=2, load_index=1, loads=4, load={"max_concurrency": 32}))
    assert progress.doing() == "trial 2 (launch 3 of 12): load 2 of 4 (max_concurrency=32)"
    summary = progress.summary()
    assert "2/12 launches done" in summary and "best #1: 3590.0" in summary and "0.75 node-hours of 2.00" in summary
    rendered = io.StringIO()
    Console(file=rendered, width=100, color_system=None).print(progress)
    assert "load 2 of 4 (max_concurrency=32)" in rendered.getvalue() and "best #1: 3590.0" in rendered.getvalue()


def test_plain_mode_prints_one_line_per_phase_change() -> None:
    progress, clock, out = _progress(live=False)
    progress.update(StudyCounts(0, 2, "no feasible trial yet", 0))
    for event in (StatusEvent(Phase.STARTING, 0), StatusEvent(Phase.LAUNCHING, 0), StatusEvent(Phase.LAUNCHING, 0),
                  StatusEvent(Phase.WAITING_READY, 0), StatusEvent(Phase.MEASURING, 0, 0, 1, {})):  # fmt: skip
        progress.status(event)
    clock.now += 42
    progress.trial_finished(StudyCounts(1, 2, "best #0: 1611.1", 10), "trial 0: 1611.1")
    assert out.getvalue().splitlines() == [
        "trial 0 (launch 1 of 2): checking the configuration",
        "trial 0 (launch 1 of 2): launching",  # once, though emitted twice
        "trial 0 (launch 1 of 2): waiting for readiness",
        "trial 0 (launch 1 of 2): load 1 of 1 (the workload's own)",
        "trial 0: 1611.1  [1/2 launches done · best #0: 1611.1 · 0.17 node-hours · ETA 42 s]",
    ]


def test_one_numbering_the_workload_measured_and_no_launch_past_the_budget() -> None:
    progress, _, _ = _progress(live=True)
    progress.update(StudyCounts(4, 8, "best #3: 1.02", 10))
    progress.status(StatusEvent(Phase.MEASURING, 6, 0, 6, {"max_concurrency": 16}, workload="random-4000-200"))
    assert progress.doing() == "trial 6 (launch 5 of 8): workload random-4000-200, load 1 of 6 (max_concurrency=16)"
    progress.update(StudyCounts(8, 8, "best #3: 1.02", 20))  # the budget spent: a trial now checks, launches nothing
    progress.status(StatusEvent(Phase.STARTING, 9))
    assert progress.doing() == "trial 9: checking the configuration"


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration_text(s) for s in (45, 600, 3900)] == ["45 s", "10 min", "1 h 05 min"]
