"""Typed trial records (``autotune.records``): what a trial stores reads back as it was written, a study written by
autotune before the records module opens as it is, and no other module of the package touches user attributes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import optuna
import pytest
from optuna.study import StudyDirection
from pydantic import BaseModel, ConfigDict, ValidationError
from typer.testing import CliRunner

import autotune
from autotune import records
from autotune.cli import app
from autotune.errors import FailureKind
from autotune.evidence.notes import trial_note
from autotune.evidence.report import trials_frame
from autotune.records import LoadRecord, Outcome, StudyRecord, TrialRecord
from autotune.search import budget
from autotune.search.ranking import maximized, sign
from autotune.search.sweep import LoadResult
from autotune.space.schema import Objective

# A study written by autotune at d2874b2 (before this module): tests/study/outcome_study.py's study, one trial of each
# outcome (measured, crash, a learned-rule rejection, a duplicate, an SLO miss) on the simulator in process. Written
# again by d2874b2's code with the workload's input_len 16 -> 64 (its table rows were over Little's law at 16, which
# the table model now cuts), so that both versions run the same study.
OLD_STUDY = Path(__file__).parent / "data" / "outcomes-d2874b2.db"
OLD_NAME = "outcomes"
MEASURED_LOAD = {"load": {"max_concurrency": 8}, "feasible": True, "value": 1800.0,
                 "metrics": {"output_throughput": 900.0, "total_token_throughput": 1800.0, "p99_ttft_ms": 60.0,
                             "completed": 8, "failed": 0},
                 "violations": {"slo:p99_ttft_ms": -0.4}}  # fmt: skip
FAILED_LOAD = {"load": {"max_concurrency": 16}, "feasible": False, "value": None, "failure_kind": "oom",
               "failure_reason": "CUDA out of memory"}  # fmt: skip
ATTRS = {"config_key": "0123456789abcdef", "engine": "vllm", "config": {"engine": "vllm", "model": "m", "tp": 1},
         "launched": True, "benchmarks": [MEASURED_LOAD, FAILED_LOAD], "node_minutes": 2.5, "baseline": True,
         "launch": {"argv": ["vllm", "serve", "m"], "env": {}, "secret_env": []}, "engine_version": "0.13.0",
         "outcome": "measured", "load": {"max_concurrency": 8}, "output_throughput": 900.0,
         "total_token_throughput": 1800.0, "p99_ttft_ms": 60.0, "client_saturated": False, "launch_s": 12.3,
         "benchmark_s": 40.1, "trial_s": 55.0, "oom_from_level": 1}  # fmt: skip


def test_a_record_reads_back_as_it_was_stored() -> None:
    record = TrialRecord.from_attrs(ATTRS)
    assert record.stored() == ATTRS
    assert record.outcome is Outcome.MEASURED and record.metrics["total_token_throughput"] == 1800.0
    assert [level.measured for level in record.benchmarks] == [True, False]
    assert record.benchmarks[1].failure_kind is FailureKind.OOM
    assert [level.stored() for level in record.benchmarks] == [MEASURED_LOAD, FAILED_LOAD]
    # counts stay ints: what is stored again is what was measured
    assert isinstance(record.benchmarks[0].metrics["completed"], int)


def test_written_to_optuna_and_read_back() -> None:
    study = optuna.create_study()
    trial = study.ask()
    fields = TrialRecord.from_attrs(ATTRS)
    records.write(trial, **{name: getattr(fields, name) for name in fields.model_fields_set})
    frozen = study.tell(trial, 1800.0)
    assert frozen.user_attrs == ATTRS
    assert TrialRecord.of(frozen) == fields


def test_writing_is_strict_and_reading_is_lenient() -> None:
    with pytest.raises(ValidationError):
        records.stored(no_such_field=1)
    with pytest.raises(ValidationError):
        records.stored(launched="not a flag")
    # another version's attributes: unknown names and values of another type are kept aside, never an error
    odd = TrialRecord.from_attrs({"engine_process": "not a record", "someday": [1], "failure_kind": "meteor"})
    assert odd.engine_process is None and odd.extra == {"engine_process": "not a record", "someday": [1]}
    assert odd.failure_kind == "meteor" and odd.stored()["failure_kind"] == "meteor"


class _Result(BaseModel):
    """A stand-in for ``autotune.bench.results.BenchmarkResult``: a frozen model of the benchmark's keys."""

    model_config = ConfigDict(frozen=True)
    output_throughput: float
    total_token_throughput: float
    p99_ttft_ms: float
    completed: int
    failed: int
    client: dict


def test_a_load_record_from_a_benchmark_result_dict_or_model() -> None:
    result = {"output_throughput": 900.0, "total_token_throughput": 1800.0, "p99_ttft_ms": 60.0, "completed": 8,
              "failed": 0, "client": {"saturated": False}}  # fmt: skip
    load = {"max_concurrency": 8}
    fields = {"feasible": True, "value": 1800.0, "violations": {"slo:p99_ttft_ms": -0.4}}
    from_dict = LoadRecord.from_benchmark(result, load, **fields)
    assert from_dict == LoadRecord.from_benchmark(_Result(**result), load, **fields)
    assert from_dict.stored() == MEASURED_LOAD
    failed = LoadRecord.from_benchmark(None, {"max_concurrency": 16}, failure_kind="oom",
                                       failure_reason="CUDA out of memory")  # fmt: skip
    assert failed.stored() == FAILED_LOAD


def test_the_sweep_keeps_load_records_of_todays_layout() -> None:
    level = LoadResult({"max_concurrency": 16}, failure="oom", reason="CUDA out of memory")
    assert level.record().stored() == FAILED_LOAD


def test_one_outcome_for_every_failure_with_its_words() -> None:
    assert {kind.value for kind in FailureKind} <= {outcome.value for outcome in Outcome}
    assert all(outcome.text for outcome in Outcome)
    assert {o for o in Outcome if o.failure} == {Outcome.failed(kind) for kind in FailureKind}


def test_one_direction_helper() -> None:
    assert maximized("maximize") and maximized(StudyDirection.MAXIMIZE)
    assert not maximized("minimize") and not maximized(StudyDirection.MINIMIZE)
    assert sign("maximize") == 1 and sign(StudyDirection.MINIMIZE) == -1


@pytest.fixture
def old_study(tmp_path, monkeypatch) -> optuna.Study:
    """The study written by the previous autotune, copied (opening it may write) where `autotune` finds it."""
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    shutil.copy(OLD_STUDY, tmp_path / f"{OLD_NAME}.db")
    return optuna.load_study(study_name=OLD_NAME, storage=f"sqlite:///{tmp_path / OLD_NAME}.db")


def test_a_study_of_the_previous_layout_opens(old_study) -> None:
    trials = [t for t in old_study.get_trials(deepcopy=False) if t.state.is_finished()]
    for trial in trials:
        record = TrialRecord.of(trial)
        assert record.extra == {}, f"trial {trial.number}: unknown attributes {record.extra}"
        assert record.stored() == trial.user_attrs
    assert {Outcome.of(t) for t in trials} == {"measured", "crash", "rejected", "duplicate", "misses_slo"}
    study = StudyRecord.of(old_study)
    assert study.space_digest and study.slo == {"p99_ttft_ms": 100.0} and study.budget == 5 and study.first_queued
    assert [rule.kind for rule in study.learned_rules.values()] == ["crash"]
    objective = Objective.model_validate(study.objective)
    notes = {Outcome.of(t): trial_note(t, objective) for t in trials}
    assert notes["rejected"].startswith("### Outcome: rejected\n\n**Rejected by rule `learned:kv_cache_dtype=fp8`**")
    assert "**Measured**: total_token_throughput = 1800.0." in notes["measured"]
    frame = trials_frame(old_study)
    assert set(frame.outcome) == {"measured", "crash", "rejected"} and frame.node_minutes.notna().all()


def test_study_show_and_best_open_a_study_of_the_previous_layout(old_study) -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["study", "show", "--study", OLD_NAME, "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["budget"]["budget"] == 5 and data["failures_by_kind"] == {"crash": 1, "rejected": 1}
    assert list(data["learned_rules"]) == ["learned:kv_cache_dtype=fp8"]
    best = runner.invoke(app, ["study", "best", "--study", OLD_NAME, "--json"])
    assert best.exit_code == 0, best.output
    chosen = json.loads(best.stdout)
    assert (
        chosen["trial"] == 0
        and chosen["load"] == {}
        and "vllm serve deepseek-ai/DeepSeek-V3" in " ".join(chosen["launch"]["argv"])
    )


def test_budget_summary_is_typed(old_study) -> None:
    summary = budget.summary(old_study)
    assert isinstance(summary, budget.BudgetSummary)
    assert (summary.budget, summary.launches, summary.rejected, summary.duplicates) == (5, 3, 1, 1)


def test_only_the_records_module_touches_user_attributes() -> None:
    """The issue's check, ``grep -rn "user_attrs\\[\\|set_user_attr(" autotune``, over the package's source."""
    package = Path(autotune.__file__).parent
    pattern = re.compile(r"user_attrs\[|set_user_attr\(")
    found = [f"{path.relative_to(package)}:{number}"
             for path in sorted(package.rglob("*.py")) if "records" not in path.relative_to(package).parts
             for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]  # fmt: skip
    assert found == []


def test_this_version_stores_the_layout_the_previous_one_did(old_study, tmp_path) -> None:
    """The same study run again: every trial stores the same attributes, with the same values where they do not
    depend on the run (times, the worker, the run's directory)."""
    from tests.study.outcome_study import outcome_study

    new = outcome_study(tmp_path / "again")
    volatile = {"trial_s", "launch_s", "benchmark_s", "server_log", "worker", "worker_process", "engine_process"}

    def settled(study: optuna.Study, attrs: dict) -> dict:
        run = str(Path(study.user_attrs["space_path"]).parent)
        kept = json.loads(json.dumps({k: v for k, v in attrs.items() if k not in volatile}).replace(run, "RUN"))
        for workload in [kept.get("workload") or {}, *(kept.get("workloads") or [])]:
            if workload.get("tokenizer", "absent") is None:  # a workload's field this version adds, unset
                del workload["tokenizer"]
        return kept

    for before, after in zip(old_study.get_trials(deepcopy=False), new.get_trials(deepcopy=False), strict=True):
        assert set(after.user_attrs) == set(before.user_attrs), f"trial {before.number}"
        assert settled(new, after.user_attrs) == settled(old_study, before.user_attrs), f"trial {before.number}"
    added = {"identity"}  # what this version adds to a study: its model family, hardware, engine versions (warm start)
    assert set(new.user_attrs) - added == set(old_study.user_attrs)
    fresh = {k: v for k, v in new.user_attrs.items() if k not in added}
    assert settled(new, fresh) | {"space_digest": None} == settled(old_study, old_study.user_attrs) | {
        "space_digest": None  # a digest of the space file, whose table path is the run's
    }
