"""The regression table of an engine upgrade (``autotune.evidence.regression``) on studies made in memory."""

from __future__ import annotations

import io
from typing import Any

import optuna

from autotune import records
from autotune.evidence.regression import regression_rows
from autotune.records import WorkloadRecord
from autotune.search.setup import baseline_params
from autotune.space.files import load_space
from tests.test_mix import ONE, TWO, space_file


def _study(trials: list[tuple[dict[str, Any], float, dict[str, float]]]) -> optuna.Study:
    """A study of launched trials: (params, the trial's value, each workload's own throughput)."""
    study = optuna.create_study(direction="maximize")
    for params, value, own in trials:
        held = [WorkloadRecord(name=name, value=v, feasible=True, relative=v / 100) for name, v in own.items()]
        distributions = {name: optuna.distributions.CategoricalDistribution([v]) for name, v in params.items()}
        study.add_trial(optuna.trial.create_trial(values=[value], params=params, distributions=distributions,
                                                  user_attrs=records.stored(launched=True, **({'workloads': held} if held else {})),
                                                  constraints={"launch": 0.0}))  # fmt: skip
    return study


def test_a_several_workload_upgrade_compares_each_workloads_throughput_not_the_mix(tmp_path) -> None:
    """The mix value of a study's baseline is 1 on either version (it is relative to it), so the table compares
    each workload's own throughput: the new version is half as fast on rag, for the baseline and the old best."""
    space = load_space(space_file(tmp_path, TWO))
    base, best = baseline_params(space, "vllm"), {"vllm.max_num_seqs": 256}
    assert base != best
    old = _study([(base, 1.0, {"chat": 100.0, "rag": 100.0}), (best, 1.5, {"chat": 150.0, "rag": 150.0})])
    new = _study([(best, 1.2, {"chat": 150.0, "rag": 75.0}), (base, 1.0, {"chat": 100.0, "rag": 50.0})])
    rows = {(r.configuration, r.workload): r for r in regression_rows(old, new, space)}
    assert set(rows) == {(c, w) for c in ("baseline", "vllm.max_num_seqs=256") for w in ("chat", "rag")}
    assert rows["baseline", "rag"].old == [100.0] and rows["baseline", "rag"].new == [50.0]
    assert rows["baseline", "rag"].verdict.startswith("slower") and rows["baseline", "rag"].change == -0.5
    assert rows["vllm.max_num_seqs=256", "rag"].verdict.startswith("slower")
    assert rows["baseline", "chat"].verdict == rows["vllm.max_num_seqs=256", "chat"].verdict == "within noise"
    assert rows["vllm.max_num_seqs=256", "chat"].role == "old best"


def test_a_one_workload_upgrade_has_one_row_per_configuration(tmp_path) -> None:
    space = load_space(space_file(tmp_path, ONE))
    base, best = baseline_params(space, "vllm"), {"vllm.max_num_seqs": 256}
    old = _study([(base, 100.0, {}), (best, 200.0, {})])
    new = _study([(best, 90.0, {}), (base, 100.0, {})])
    rows = regression_rows(old, new, space)
    assert [(r.configuration, r.workload, r.old, r.new) for r in rows] == [
        ("baseline", "random 2000/100", [100.0], [100.0]),
        ("vllm.max_num_seqs=256", "random 2000/100", [200.0], [90.0]),
    ]
    assert rows[1].verdict.startswith("slower")


def test_a_several_engine_upgrade_names_each_rows_engine(tmp_path) -> None:
    from tests.conftest import SPACES

    space = load_space(SPACES / "quickstart.yaml")
    baselines = [baseline_params(space, engine) for engine in space.engines]
    best = {**baselines[1], "sglang.max_num_seqs" if "sglang.max_num_seqs" in baselines[1] else "max_num_seqs": 256}
    old = _study([(p, 100.0, {}) for p in baselines] + [(best, 200.0, {})])
    rows = regression_rows(old, _study([]), space)
    assert [r.configuration for r in rows[:3]] == [f"baseline ({engine})" for engine in space.engines]
    assert rows[3].role == "old best" and rows[3].configuration.startswith("engine=sglang, ")
    assert all(r.verdict == "not measured on both versions" for r in rows)


def test_the_table_keeps_numbers_and_verdicts_whole_at_80_columns() -> None:
    from rich.console import Console

    from autotune.cli.upgrade import regression_table
    from autotune.evidence.regression import RegressionRow

    row = RegressionRow(configuration="sglang.layout=tp=8,dp=8,dp_attention=True,ep=8, max_num_batched_tokens=16384",
                        role="old best", workload="generation-heavy", old=[4213.5], new=[2106.2], change=-0.5,
                        verdict="slower (1 run each)")  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(regression_table([row], "a", "b", {"sglang": "0.5.16"}))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "4213.5" in text and "2106.2" in text and "-50.0%" in text and "slower" in text and "old best:" in text
