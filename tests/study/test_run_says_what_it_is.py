"""Issue #51 item 9: `study run` says what it is before it starts (study, storage, space, SIMULATED) and what to do
after (the load and SLO judged at, why the winner won, the next commands); Ctrl-C says how to resume and leaves no
trial RUNNING."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.cli import run_summary
from autotune.space.files import find_space, load_space
from tests.conftest import REPO
from tests.study.conftest import autotune, show


def test_why_it_won_names_each_knob_changed_from_the_engines_baseline() -> None:
    space = load_space(find_space("quickstart"))
    engine = next(iter(space.engines))
    from autotune.search.setup import baseline_params

    baseline = dict(baseline_params(space, engine))
    knob = next(name for name in baseline if name != "engine" and baseline[name] is None)
    distributions = {k: CategoricalDistribution([v, 4096] if k == knob else [v]) for k, v in baseline.items()}
    trial = create_trial(state=TrialState.COMPLETE, values=[1.0], params=baseline | {knob: 4096},
                         distributions=distributions)  # fmt: skip
    assert (
        run_summary.why_it_won(space, trial)
        == f"why it won: 1 change(s) from {engine}'s baseline: {knob} default → 4096"
    )
    same = create_trial(state=TrialState.COMPLETE, values=[1.0], params=baseline, distributions=distributions)
    assert "it is " + engine + "'s baseline" in run_summary.why_it_won(space, same)


def test_the_load_and_the_slo_are_said_with_units() -> None:
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("objective", {"slo": {"p99_ttft_ms": 2000}})
    trial = create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"load": {"max_concurrency": 64}})
    assert run_summary.judged_at(study, trial) == "measured at max_concurrency=64; SLO: p99_ttft_ms ≤ 2000 ms (met)"


@pytest.mark.slow
def test_a_run_starts_with_its_header_and_ends_with_why_and_what_next(tmp_path, studies) -> None:
    done = autotune("study", "run", "--n-trials", "4", "--seed", "0", studies=studies)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("study quickstart · storage sqlite:///") and "SIMULATED" in first
    assert "why it won:" in done.stdout
    assert "next: autotune study best --study quickstart · autotune study report --study quickstart" in done.stdout


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume_and_leaves_no_running_trial(studies) -> None:
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies)}
    # SIGINT's default action restored in the child, as a shell's foreground job has it (a test runner's worker
    # may ignore SIGINT, and an ignored signal is inherited)
    tuner = subprocess.Popen([sys.executable, "-m", "autotune", "study", "run", "--n-trials", "3", "--seed", "0"],
                             cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    seen = []
    for line in tuner.stderr:  # the second trial is being measured: its engine runs
        seen.append(line)
        if line.startswith("trial 1 (launch 2 of 3): load 1 of"):
            break
    os.killpg(tuner.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the tuner's whole foreground group
    rest = tuner.stderr.read()
    assert tuner.wait(timeout=120) == 130, "".join(seen) + rest
    assert "interrupted; rerun the same command to resume" in rest
    trials = show("quickstart", studies)["trials"]
    assert not [t for t in trials if t["state"] == "RUNNING"]
    interrupted = next(t for t in trials if t["number"] == 1)
    assert interrupted["state"] == "FAIL"
    retried = [t for t in trials if t["state"] == "WAITING" and t["params"] == interrupted["params"]]
    assert retried, trials  # its configuration is queued again: the same command measures it
    again = autotune("study", "run", "--n-trials", "3", "--seed", "0", studies=studies)
    assert again.returncode == 0, again.stderr
    trials = show("quickstart", studies)["trials"]
    assert any(t["state"] == "COMPLETE" and t["params"] == interrupted["params"] for t in trials)


def test_the_next_commands_never_print_a_storage_password() -> None:
    line = run_summary.next_commands("s", "postgresql+psycopg://u:Secret-9@db:5432/t")
    assert "Secret-9" not in line and "postgresql+psycopg://u:***@db:5432/t" in line
