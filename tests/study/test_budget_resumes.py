"""The budget is a number, not trials made in advance: a huge one starts trials at once and stops at --timeout,
`--more` adds any amount, and a study whose creator was killed at any point of its set-up is finished by the next run.

The space: the quickstart (three engines, millions of configurations) with the simulator in direct mode (each trial
computed in-process in about 0.1 s, no server), so a few seconds run trials without ever exhausting it."""

from __future__ import annotations

import signal

import pytest

from autotune.testing.spaces import direct_quickstart
from tests.study.conftest import autotune, show
from tests.study.killed_creator import KILL_ENV

HUGE = 10_000_000_000


def test_a_huge_budget_starts_trials_at_once_and_stops_at_the_timeout(tmp_path, studies) -> None:
    space = direct_quickstart(tmp_path, num_prompts=50)
    # the old slots (one WAITING trial per launch bought, made before the first trial) never got this far
    done = autotune("study", "run", str(space), "--study", "huge", "--n-trials", str(HUGE), "--timeout", "3",
                    "--seed", "1", studies=studies, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = show("huge", studies)
    launches = report["budget"]["launches"]
    assert report["budget"]["budget"] == HUGE and launches >= 1
    assert f"timeout: no trial started after 3 s; {launches} launches of a budget of {HUGE}; " in done.stderr
    assert len(report["trials"]) < 1000  # trials made as they start, not in advance
    # the name stays usable: --more adds to the budget (it was a list of that many slots: a MemoryError)
    # 5 s, not 1: the timeout counts from the run's start, and a loaded CI machine took over a second to set up
    more = autotune("study", "run", str(space), "--study", "huge", "--more", str(HUGE), "--timeout", "5",
                    studies=studies, timeout=240)  # fmt: skip
    assert more.returncode == 0, more.stderr
    again = show("huge", studies)
    assert again["budget"]["budget"] == 2 * HUGE and again["budget"]["launches"] > launches


def test_more_adds_a_huge_number_of_launches_to_a_study(tmp_path, studies) -> None:
    space = direct_quickstart(tmp_path, num_prompts=50)
    first = autotune("study", "run", str(space), "--study", "more", "--n-trials", "2", "--seed", "1", studies=studies)
    assert first.returncode == 0, first.stderr
    more = autotune("study", "run", str(space), "--study", "more", "--more", str(HUGE), "--timeout", "1",
                    studies=studies, timeout=240)  # fmt: skip
    assert more.returncode == 0 and "Traceback" not in more.stderr, more.stderr
    assert show("more", studies)["budget"]["budget"] == HUGE + 2


@pytest.mark.parametrize("killed_before", [1, 2, 3, 4, 5, 6, 8, 9, 10, 12])
def test_a_study_whose_creator_was_killed_during_set_up_resumes(tmp_path, studies, killed_before) -> None:
    # the quickstart study's writes to the storage: 1 the study, 2 its metric names, 3 its identity (what
    # `--warm-start auto` asks), 4 its description (one transaction, the space's digest with it: whole or absent),
    # 5-7 its three baselines queued, 8 the mark that they were, 9 its budget; then the first trial: 10 its heartbeat
    # (still WAITING), 11 RUNNING (killed before 12: a running trial of a dead worker)
    space = direct_quickstart(tmp_path, num_prompts=50)
    argv = ("study", "run", str(space), "--study", "s", "--n-trials", "4", "--seed", "1")
    killed = autotune(*argv, studies=studies, env_extra={KILL_ENV: str(killed_before)}, timeout=240,
                      module="tests.study.killed_creator")  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rerun = autotune(*argv, studies=studies, timeout=240)
    assert rerun.returncode == 0, rerun.stderr
    report = show("s", studies)
    assert report["budget"]["budget"] == 4 and report["budget"]["launches"] == 4
    # each baseline queued once, none twice (a dead worker's trial is a FAIL, retried: it does not count)
    baselines = [t["params"]["engine"] for t in report["trials"] if t["baseline"] and t["state"] != "FAIL"]
    assert sorted(baselines) == ["sglang", "trtllm", "vllm"]
    assert {t["state"] for t in report["trials"]} <= {"COMPLETE", "PRUNED", "WAITING", "FAIL"}
    assert [t["number"] for t in report["trials"] if t["state"] == "FAIL"] == ([0] if killed_before == 12 else [])
