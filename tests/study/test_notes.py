"""Every trial says what became of it: an ``outcome`` attribute to filter on, and a dashboard note in Markdown with
the outcome in words, the launch command, the loads and the key metrics."""

from __future__ import annotations

import sys

import optuna
import pytest

from autotune.errors import AutotuneError
from autotune.evidence.notes import save_trial_note, trial_note
from autotune.search.study import default_storage
from autotune.space.schema import Objective
from tests.study.outcome_study import CRASH_LINE, SLO_MS, outcome_study

OUTCOMES = {"measured", "misses_slo", "rejected", "duplicate", "pruned", "crash", "oom", "unsupported", "bad_flag",
            "port_in_use", "nccl", "timeout", "hang", "no_data", "error"}  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> tuple[optuna.Study, dict[str, optuna.trial.FrozenTrial]]:
    study = outcome_study(tmp_path_factory.mktemp("outcomes") / "studies")
    return study, {t.user_attrs["outcome"]: t for t in study.trials if t.state.is_finished()}  # not one left queued


def _note(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str:
    return trial_note(trial, Objective.model_validate(study.user_attrs["objective"]))


def test_each_trial_has_its_outcome(outcomes) -> None:
    study, by_outcome = outcomes
    assert sum(t.state.is_finished() for t in study.trials) == 5
    assert set(by_outcome) == {"measured", "crash", "rejected", "misses_slo", "duplicate"}


def test_a_measured_trials_note_has_its_value_command_load_and_metrics(outcomes) -> None:
    study, by_outcome = outcomes
    note = _note(study, by_outcome["measured"])
    assert note.startswith("### Outcome: measured\n\n**Measured**: total_token_throughput = 1800.0.")
    assert "```sh\nvllm serve deepseek-ai/DeepSeek-V3 -tp 8 --max-num-seqs 64 " in note
    assert "**Load**: the workload's own" in note and "**Loads measured** (1)" in note
    assert "| output_throughput | 900.0 tok/s |" in note and "| p99_ttft_ms | 60.0 ms |" in note
    assert "**Cost**: 10.00 node-minutes" in note


def test_a_crashed_trials_note_has_its_error_line_and_command(outcomes) -> None:
    study, by_outcome = outcomes
    note = _note(study, by_outcome["crash"])
    assert "**Crashed**:\n\n```text\n" in note and CRASH_LINE in " ".join(note.split())  # wrapped to fit
    assert "--kv-cache-dtype fp8" in note and "| the workload's own |  | no | crash |" in note


def test_a_rejected_trials_note_names_its_rule(outcomes) -> None:
    study, by_outcome = outcomes
    rejected = by_outcome["rejected"]
    assert rejected.user_attrs["rejected_by"] == "learned:kv_cache_dtype=fp8"
    note = _note(study, rejected)
    assert "**Rejected by rule `learned:kv_cache_dtype=fp8`** before launch" in note and "Not launched." in note


def test_a_duplicates_note_names_the_trial_it_repeats(outcomes) -> None:
    study, by_outcome = outcomes
    note = _note(study, by_outcome["duplicate"])
    assert f"**Duplicate of trial #{by_outcome['measured'].number}**: the same launch, not run again." in note
    assert "| total_token_throughput | 1800.0 tok/s |" in note


def test_a_trial_that_misses_its_slo_says_which_metric_by_how_much(outcomes) -> None:
    study, by_outcome = outcomes
    note = _note(study, by_outcome["misses_slo"])
    assert f"**Misses its SLO** at its closest load: p99_ttft_ms 250.0 > limit {SLO_MS:g}." in note
    assert "| the workload's own | 2200.0 | no | misses p99_ttft_ms |" in note


def test_the_notes_are_saved_for_optuna_dashboard(outcomes) -> None:
    get_note = pytest.importorskip("optuna_dashboard", reason="needs optuna-dashboard (the dashboard extra)").get_note
    study, _ = outcomes
    for frozen in (t for t in study.trials if t.state.is_finished()):
        assert get_note(optuna.Trial(study, frozen._trial_id)) == _note(study, frozen)


def test_a_statically_rejected_quickstart_trial(quickstart_studies) -> None:
    study = optuna.load_study(study_name="quickstart", storage=default_storage("quickstart", quickstart_studies))
    assert {t.user_attrs.get("outcome") for t in study.trials} <= OUTCOMES
    by_outcome = {t.user_attrs["outcome"]: t for t in study.trials if t.state.is_finished()}
    # a pruned trial's note: tests/study/test_pruner_rule.py (whether 8 quickstart trials prune one is chance)
    rejected = by_outcome["rejected"]
    rule = rejected.user_attrs["rejected_by"]
    assert rejected.user_attrs["failure_reason"].startswith(f"rejected by rule '{rule}'")  # a static rule's name
    assert f"**Rejected by rule `{rule}`**" in _note(study, rejected)


def test_without_optuna_dashboard_the_note_is_a_clear_error(monkeypatch) -> None:
    # a dependency: only a broken install lacks it, and a study there would silently lose every trial's note
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)
    study = optuna.create_study()
    with pytest.raises(AutotuneError, match="optuna-dashboard is missing.*fix: pip install"):
        save_trial_note(study.ask(), "a note")
