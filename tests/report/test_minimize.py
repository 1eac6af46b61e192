"""A study that minimises (P99 TTFT, under a P99 TPOT SLO) on the simulator: the report, `study validate`'s reference
and the baseline table rank in its direction; a failure is never drawn as a value; a baseline that misses its SLO
says so."""

from __future__ import annotations

import optuna
import pytest
import yaml

from autotune.cli.validate import _contender, _space_of
from autotune.evidence.report import baseline_rows, figures, gain_column
from autotune.search.objective import PESSIMISTIC
from autotune.search.study import default_storage
from tests.conftest import SPACES
from tests.study.conftest import autotune

METRIC, SLO = "p99_ttft_ms", {"p99_tpot_ms": 45.0}


def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.state == optuna.trial.TrialState.COMPLETE and all(v <= 0 for v in trial.constraints.values())


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> optuna.Study:
    """The quickstart's space with a minimised objective, an SLO and two loads, lighter for speed: 8 trials."""
    space = yaml.safe_load((SPACES / "quickstart.yaml").read_text())
    space["simulate"]["time_scale"] = 0.05
    space["workload"]["num_prompts"] = 60
    space["params"]["max_concurrency"] = {"choices": [8, 32], "default": 32}
    space["objective"] = {"metrics": [{"name": METRIC, "direction": "minimize"}], "slo": SLO}
    root = tmp_path_factory.mktemp("minimize")
    path = root / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    studies = root / "studies"
    done = autotune("study", "run", str(path), "--study", "ttft", "--n-trials", "8", "--seed", "1", studies=studies)
    assert done.returncode == 0, done.stderr
    return optuna.load_study(study_name="ttft", storage=default_storage("ttft", studies))


def test_best_so_far_falls_to_the_lowest_feasible_value(study) -> None:
    history = figures(study)["Optimization history"]
    best_so_far = next(trace for trace in history.data if trace.name == "best so far")
    lowest = min(t.values[0] for t in study.get_trials(deepcopy=False) if _feasible(t))
    assert all(later <= earlier for earlier, later in zip(best_so_far.y, best_so_far.y[1:], strict=False))
    assert best_so_far.y[-1] == lowest
    # a failure's pessimistic value is never drawn as if it were measured
    drawn = [y for trace in history.data if trace.yaxis == "y" for y in trace.y]
    assert PESSIMISTIC["minimize"] not in drawn and 0.0 not in drawn


def test_validate_takes_the_lowest_baseline_as_reference(study) -> None:
    baselines = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and _feasible(t)]
    lowest = min(baselines, key=lambda t: t.values[0])
    space = _space_of(study)
    assert _contender(study, space, "baseline").config == space.point_from_params(lowest.params).server
    assert len({t.values[0] for t in baselines}) > 1  # a choice was made


def test_baseline_gains_are_positive_where_the_best_is_lower(study) -> None:
    best = min((t for t in study.get_trials(deepcopy=False) if _feasible(t)), key=lambda t: t.values[0])
    rows = baseline_rows(study, best)
    gain = gain_column(METRIC, maximize=False)
    assert "(+ = better: lower)" in gain and list(rows.columns[3:]) == [METRIC, *SLO, gain]
    trials = study.get_trials(deepcopy=False)
    for row in rows.to_dict("records")[:-1]:
        trial = trials[int(row["trial"])]
        if not row[gain]:  # no value measured (a failure or a pruned baseline)
            assert row[METRIC] == "" and row["outcome"] != "measured"
            continue
        expected = (trial.values[0] - best.values[0]) / trial.values[0] * 100
        assert row[gain] == f"{expected:+.1f}%" and float(row[gain].rstrip("%")) >= 0
        missed = trial.constraints.get("slo:p99_tpot_ms", 0) > 0
        assert row["outcome"].startswith("misses SLO: p99_tpot_ms ") == missed


def test_a_baseline_that_misses_its_slo_says_by_how_much() -> None:
    study = optuna.create_study(directions=["minimize"])
    study.set_metric_names([METRIC])
    study.set_user_attr(
        "objective", {"metrics": [{"name": METRIC, "direction": "minimize"}], "slo": {"p99_tpot_ms": 50}}
    )
    attrs = {"engine": "vllm", "p99_tpot_ms": 63.24}
    study.add_trial(optuna.trial.create_trial(values=[900.0], user_attrs=attrs | {"baseline": True},
                                              constraints={"launch": 0.0, "slo:p99_tpot_ms": 0.26}))  # fmt: skip
    study.add_trial(optuna.trial.create_trial(values=[1200.0], user_attrs=attrs | {"p99_tpot_ms": 40.0},
                                              constraints={"launch": 0.0, "slo:p99_tpot_ms": -0.2}))  # fmt: skip
    rows = baseline_rows(study, study.trials[1]).to_dict("records")
    assert rows[0]["outcome"] == "misses SLO: p99_tpot_ms 63.2 > 50"
    assert rows[0][gain_column(METRIC, maximize=False)] == "-33.3%"  # the best is slower, but the baseline is out
    assert rows[1]["outcome"] == "measured"
