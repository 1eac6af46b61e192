"""The self-calibrating prior: its residual model on known errors, and a study on a landscape that its raw model
calls all SLO-infeasible, where the calibration corrects it, records its error and queues what it ranks first."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from autotune.records import LoadRecord, StudyRecord, TrialRecord
from autotune.search import calibration, residuals
from autotune.search.prior import PredictedLoad, Ranked
from autotune.search.ranking import feasible
from autotune.search.residuals import Calibration
from autotune.search.study import RunOptions, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space

REPO = Path(__file__).resolve().parent.parent
LANDSCAPE = REPO / "benchmarks" / "landscapes" / "qwen3-235b-trtllm-2000x500.yaml"
LOADS = [{"max_concurrency": c} for c in (8, 16, 32)]


def ranked(seqs: int, dtype: str, throughput: float, ttft: float) -> Ranked:
    """A configuration the model predicts ``throughput`` and ``ttft`` for at every load."""
    metrics = {"total_token_throughput": throughput, "p99_ttft_ms": ttft}
    return Ranked("vllm", {"max_num_seqs": seqs, "dtype": dtype}, throughput,
                  tuple(PredictedLoad(load, metrics) for load in LOADS))  # fmt: skip


def measured_at(throughput: float, ttft: float) -> list[LoadRecord]:
    return [LoadRecord(load=load, feasible=True, value=throughput,
                       metrics={"total_token_throughput": throughput, "p99_ttft_ms": ttft}) for load in LOADS]  # fmt: skip


def test_a_constant_error_is_corrected_exactly() -> None:
    """The model says half the throughput and ten times the TTFT of what is measured, on every configuration: the
    mean correction is not penalised, so an unmeasured configuration's prediction is corrected by the same factors."""
    measured = [(ranked(8, "float32", 50.0, 1000.0), measured_at(100.0, 100.0)),
                (ranked(32, "float32", 150.0, 3000.0), measured_at(300.0, 300.0))]  # fmt: skip
    fitted = Calibration(measured)
    unmeasured = ranked(8, "bfloat16", 80.0, 2000.0)
    corrected = fitted.corrected(unmeasured)
    assert fitted.rows == 6
    assert [p.metrics["total_token_throughput"] for p in corrected] == pytest.approx([160.0] * 3, rel=0.02)
    assert [p.metrics["p99_ttft_ms"] for p in corrected] == pytest.approx([200.0] * 3, rel=0.02)


def test_a_knob_value_the_model_gets_wrong_is_learned_as_its_effect() -> None:
    """The model misses bfloat16's speed-up (it predicts the float32 throughput); after two bfloat16 and two float32
    measurements the calibrated model predicts an unmeasured bfloat16 configuration closer to the truth than raw."""
    truth = {"float32": 1.0, "bfloat16": 2.0}
    measured = [(ranked(s, d, 100.0 * s, 10.0), measured_at(100.0 * s * truth[d], 10.0))
                for s in (2, 8) for d in truth]  # fmt: skip
    corrected = Calibration(measured).corrected(ranked(32, "bfloat16", 3200.0, 10.0))
    predicted = corrected[0].metrics["total_token_throughput"]
    assert abs(predicted - 6400.0) < abs(3200.0 - 6400.0) / 2, predicted
    raw_float32 = Calibration(measured).corrected(ranked(32, "float32", 3200.0, 10.0))[0]
    assert raw_float32.metrics["total_token_throughput"] < predicted  # the effect is bfloat16's, not everyone's


def test_an_error_only_where_two_knob_values_meet_is_learned_as_their_pair(monkeypatch) -> None:
    """The model misses that bfloat16 is 4x faster only with 32 sequences (elsewhere it is right). Measured on every
    sequences x dtype corner at chunk 512, the unmeasured chunk-2048 bfloat16/32 configuration is predicted above 2.5x
    with the pair effects; a sum of single effects (pairs held at 0) spreads the error over both knobs' values and
    predicts it lower and its neighbours higher."""

    def three(seqs: int, dtype: str, chunk: int) -> Ranked:
        metrics = {"total_token_throughput": 100.0, "p99_ttft_ms": 10.0}
        return Ranked("vllm", {"max_num_seqs": seqs, "dtype": dtype, "chunk": chunk}, 100.0,
                      tuple(PredictedLoad(load, metrics) for load in LOADS))  # fmt: skip

    def truth(seqs: int, dtype: str) -> float:
        return 400.0 if (seqs, dtype) == (32, "bfloat16") else 100.0

    corners = [(s, d) for s in (2, 8, 32) for d in ("float32", "bfloat16")]
    measured = [(three(s, d, 512), measured_at(truth(s, d), 10.0)) for s, d in corners]
    measured += [(three(s, "float32", 2048), measured_at(100.0, 10.0)) for s in (2, 32)]

    def predicted(seqs: int, dtype: str) -> float:
        return Calibration(measured).corrected(three(seqs, dtype, 2048))[0].metrics["total_token_throughput"]

    with_pairs = {(32, "bfloat16"): predicted(32, "bfloat16"), (8, "bfloat16"): predicted(8, "bfloat16")}
    monkeypatch.setattr(residuals, "PAIR_RIDGE", 1e9)  # every pair's effect held at 0: the single effects alone
    singles = {(32, "bfloat16"): predicted(32, "bfloat16"), (8, "bfloat16"): predicted(8, "bfloat16")}
    assert with_pairs[32, "bfloat16"] > 250.0, with_pairs  # measured 259 (the ridge holds a little back)
    assert with_pairs[32, "bfloat16"] > singles[32, "bfloat16"] + 50.0, (with_pairs, singles)
    assert abs(with_pairs[8, "bfloat16"] - 100.0) < abs(singles[8, "bfloat16"] - 100.0), (with_pairs, singles)


def test_nothing_measured_leaves_the_model_as_it_is() -> None:
    model = ranked(8, "float32", 50.0, 1000.0)
    assert Calibration([]).corrected(model) == model.loads


def test_a_study_calibrates_a_model_that_called_everything_infeasible() -> None:
    """On this landscape the analytic model's TTFT is several times too high, so the raw prior ranks no
    configuration feasible and queues none: after the baseline the calibration's error is lower than the raw
    model's, and it queues configurations it predicts to beat the incumbent, each untried when queued."""
    space = load_space(LANDSCAPE)
    with tempfile.TemporaryDirectory() as tmp:
        options = RunOptions(name="c", storage=f"sqlite:///{tmp}/c.db", studies_dir=Path(tmp), n_trials=6,
                             seed=0, heartbeat_s=0)  # fmt: skip
        study = run_trials(prepare_study(space, LANDSCAPE, options))
        trials = sorted(study.trials, key=lambda t: t.number)
        records = [TrialRecord.of(t) for t in trials]
        assert not any(r.prior is not None for r in records)  # the raw model predicted nothing feasible
        errors = StudyRecord.of(study).calibration
        assert errors and errors[0].fitted_loads == 0 and errors[0].raw == errors[0].calibrated  # nothing to fit yet
        later = [e for e in errors if e.fitted_loads > 0]
        assert later and all(e.calibrated < e.raw for e in later), errors
        picked = [t for t, r in zip(trials, records, strict=True) if r.calibrated_predicted is not None]
        assert picked, "the calibration queued nothing"
        for trial in picked:
            earlier = [t.params for t in trials if t.number < trial.number]
            assert trial.params not in earlier
        best_before = max(t.values[0] for t in trials[: picked[0].number] if feasible(t))
        assert records[picked[0].number].calibrated_predicted > best_before
        assert calibration.summary(study)[0].startswith("performance model: median error on the measured launches x")


def _finished(study, params: dict, key: str, value: float | None, **marks) -> None:
    """A launched trial of ``study`` with configuration key ``key``, feasible at ``value`` (None: infeasible)."""
    import optuna

    distributions = {n: optuna.distributions.CategoricalDistribution([8, 16, 32, "float32", "float16"])
                     for n in params}  # fmt: skip
    study.add_trial(optuna.trial.create_trial(
        params=params, distributions=distributions, value=value if value is not None else 0.0,
        user_attrs={"config_key": key, "launched": True, **marks},
        system_attrs={"constraints": [0.0 if value is not None else 1.0]}))  # fmt: skip


def test_with_nothing_predicted_better_the_incumbents_neighbours_come_next_best_first_taking_turns() -> None:
    """The model predicts nothing above the incumbent (100): its untried neighbours (one knob away) are queued,
    best predicted first, those predicted to miss an SLO after those predicted feasible; a configuration two
    knobs away never is; and a neighbour is never followed by another (the sampler takes every other turn)."""
    import optuna

    space = load_space(LANDSCAPE)
    slo_ttft = space.objective.slo["p99_ttft_ms"]

    def model(seqs: int, dtype: str, throughput: float, ttft: float = 10.0) -> Ranked:
        metrics = {"total_token_throughput": throughput, "p99_ttft_ms": ttft, "p99_tpot_ms": 1.0}
        return Ranked("trtllm", {"seqs": seqs, "dtype": dtype}, throughput,
                      tuple(PredictedLoad(load, metrics) for load in LOADS))  # fmt: skip

    keyed = {"incumbent": model(8, "float32", 90.0), "dtype": model(8, "float16", 95.0),
             "seqs16": model(16, "float32", 80.0), "two-away": model(16, "float16", 99.0),
             "slow-ttft": model(32, "float32", 97.0, ttft=10 * slo_ttft)}  # fmt: skip
    study = optuna.create_study(direction="maximize")
    _finished(study, {"seqs": 8, "dtype": "float32"}, "incumbent", 100.0)
    nothing_learned = Calibration([])
    picks = []
    for turn in range(6):
        fixed = calibration.next_configuration(study, space, keyed, nothing_learned)
        if fixed is None:  # the sampler's turn: it measures something else, worse
            _finished(study, {"seqs": 32, "dtype": "float16"}, f"sampler-{turn}", 50.0)
            picks.append(None)
            continue
        assert fixed.marks["neighbour_of"] == 0
        key = next(k for k, r in keyed.items() if r.params == fixed.params)
        _finished(study, fixed.params, key, 60.0, neighbour_of=0)
        picks.append(key)
    assert picks == ["dtype", None, "seqs16", None, "slow-ttft", None]


def test_the_next_value_of_an_ordered_knob_gets_every_other_neighbour_place() -> None:
    """The model ranks a one-step move (8 -> 16 of an ordered knob) below a categorical change and a two-step jump
    (8 -> 32): the best calibrated neighbour still goes first, but the one-step move comes second, ahead of the jump
    it ranks above it, and the jump third."""
    keyed = {"incumbent": ranked(8, "float32", 90.0, 10.0), "dtype": ranked(8, "float16", 95.0, 10.0),
             "jump": ranked(32, "float32", 93.0, 10.0), "step": ranked(16, "float32", 80.0, 10.0)}  # fmt: skip
    values = {key: r.predicted for key, r in keyed.items()}
    assert calibration._neighbours(keyed, "incumbent", values, better=1) == ["dtype", "step", "jump"]
    values["step"] = None  # predicted to miss an SLO: after every neighbour predicted feasible
    assert calibration._neighbours(keyed, "incumbent", values, better=1) == ["dtype", "jump", "step"]


def test_a_configuration_predicted_to_beat_the_incumbent_goes_before_its_neighbours() -> None:
    import optuna

    space = load_space(LANDSCAPE)
    keyed = {"incumbent": ranked(8, "float32", 90.0, 10.0), "far": ranked(32, "float16", 150.0, 10.0),
             "near": ranked(8, "float16", 95.0, 10.0)}  # fmt: skip
    for r in keyed.values():
        r.loads[0].metrics["p99_tpot_ms"] = 1.0
    study = optuna.create_study(direction="maximize")
    _finished(study, {"max_num_seqs": 8, "dtype": "float32"}, "incumbent", 100.0)
    fixed = calibration.next_configuration(study, space, keyed, Calibration([]))
    assert fixed is not None and fixed.params == {"max_num_seqs": 32, "dtype": "float16"}
    assert fixed.marks.get("neighbour_of") is None and fixed.marks["calibrated_predicted"] == 150.0


def _incumbent_and_three_predicted_above():
    """A study whose incumbent (100) has a neighbour ("near") and two far configurations ("far", then "far2") that
    the model predicts above it."""
    import optuna

    space = load_space(LANDSCAPE)
    keyed = {"incumbent": ranked(8, "float32", 90.0, 10.0), "far": ranked(32, "float16", 150.0, 10.0),
             "far2": ranked(16, "float16", 140.0, 10.0), "near": ranked(8, "float16", 95.0, 10.0)}  # fmt: skip
    for r in keyed.values():
        r.loads[0].metrics["p99_tpot_ms"] = 1.0
    study = optuna.create_study(direction="maximize")
    _finished(study, keyed["incumbent"].params, "incumbent", 100.0)
    return study, space, keyed


def test_a_model_pick_that_missed_gives_the_next_turn_to_the_incumbents_neighbour() -> None:
    """The model is trusted only as far as it predicts: after a configuration it queued for beating the incumbent
    came in below it, the incumbent's neighbour goes next even though the model still predicts another far
    configuration above the incumbent; once the neighbour has had its turn, the model's pick comes again."""
    study, space, keyed = _incumbent_and_three_predicted_above()
    _finished(study, keyed["far"].params, "far", 70.0, calibrated_predicted=150.0)  # the model's pick missed
    fixed = calibration.next_configuration(study, space, keyed, Calibration([]))
    assert fixed is not None and fixed.params == keyed["near"].params and fixed.marks["neighbour_of"] == 0
    _finished(study, fixed.params, "near", 60.0, neighbour_of=0)
    fixed = calibration.next_configuration(study, space, keyed, Calibration([]))
    assert fixed is not None and fixed.params == keyed["far2"].params
    assert fixed.marks.get("neighbour_of") is None


def test_a_model_pick_that_beat_the_incumbent_keeps_the_turn() -> None:
    study, space, keyed = _incumbent_and_three_predicted_above()
    _finished(study, keyed["far"].params, "far", 120.0, calibrated_predicted=150.0)  # the model's pick beat it
    fixed = calibration.next_configuration(study, space, keyed, Calibration([]))
    assert fixed is not None and fixed.params == keyed["far2"].params
