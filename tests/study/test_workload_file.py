"""A study never launches an engine for a workload file that gives no prompts, and never blames a configuration for
one: refused before any launch, and a file that goes bad once trials run (it changed) stops the study as the client's
input failure, not a crash of the configuration nor a rule learned from it."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.errors import AutotuneError, FailureKind, SpaceError
from autotune.search import budget
from autotune.search.learning import learned_rules
from autotune.search.study import RunOptions, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space
from tests.study.conftest import ENGINE, SCRIPTED_SPACE, write_space


def options(tmp_path: Path, n_trials: int = 1) -> RunOptions:
    # the scripted engine by this interpreter (PATH's python, which the space names, may lack autotune)
    return RunOptions("w", f"sqlite:///{tmp_path}/s.db", tmp_path / "studies", n_trials=n_trials, heartbeat_s=0,
                      executables={"vllm": shlex.split(ENGINE)})  # fmt: skip


def space_reading(tmp_path: Path, prompts: Path) -> Path:
    path = write_space(tmp_path)
    path.write_text(path.read_text().replace(str(SCRIPTED_SPACE.parent / "prompts.jsonl"), str(prompts)))
    return path


@pytest.mark.parametrize("content", [None, b"", b"\x89PNG\r\n\x1a\n\xff\xfe\xfd"])  # missing, empty, binary
def test_a_study_refuses_the_file_before_any_launch(content, tmp_path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    if content is not None:
        prompts.write_bytes(content)
    space = space_reading(tmp_path, prompts)
    with pytest.raises(SpaceError, match="workload.path: .*prompts.jsonl"):
        prepare_study(load_space(space), space, options(tmp_path))
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "studies").exists()  # no study, no trial, no launch


def test_a_file_that_goes_bad_after_the_checks_is_the_clients_failure(tmp_path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prompts = tmp_path / "prompts.jsonl"
    shutil.copy(SCRIPTED_SPACE.parent / "prompts.jsonl", prompts)
    space = space_reading(tmp_path, prompts)
    prepared = prepare_study(load_space(space), space, options(tmp_path, n_trials=2))
    prompts.write_bytes(b"")  # emptied once the study was checked: found when the first trial benchmarks
    with pytest.raises(AutotuneError, match=r"trial 0: .*prompts.jsonl holds no prompts"):
        run_trials(prepared)
    trial = prepared.study.trials[0]
    # not a configuration's outcome: no failure kind (crash) for the sampler, no rule learned, the study stopped
    assert trial.state == TrialState.FAIL and "failure_kind" not in trial.user_attrs, trial.user_attrs
    assert "holds no prompts" in trial.user_attrs["error"]
    assert learned_rules(prepared.study) == {}
    # the baseline it tried is queued again for the next run (the other trial, the sampler's, was never made)
    assert [(t.state, t.user_attrs.get("baseline")) for t in prepared.study.trials[1:]] == [(TrialState.WAITING, True)]
    # and it costs no launch of the budget: the study's next run launches both trials asked for
    assert trial.user_attrs["outcome"] == FailureKind.CLIENT_INPUT and budget.count(prepared.study.trials).launches == 0
