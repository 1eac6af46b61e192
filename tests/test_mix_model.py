"""The calibrated mix: each workload's predictions corrected by that workload's measurements, mixed relative to the
study's measured references, in the unit of the trials' values; a several-workload study queues what it predicts
to beat the incumbent's mix, and never what it predicts to miss one workload's SLO."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune.records import LoadRecord
from autotune.search import calibration
from autotune.search.mix_model import MixCalibration
from autotune.search.prior import PredictedLoad, Ranked, predicted_mix
from autotune.search.residuals import Calibration
from autotune.space.files import load_space
from tests.test_mix import TWO, space_file

ENGINE = "vllm"


def model(space, seqs, chat: float, rag: float, rag_ttft: float = 100.0) -> Ranked:
    """A configuration the model predicts ``chat`` and ``rag`` throughput for at each of the workload's loads."""
    by_workload = {}
    for workload, throughput, ttft in (("chat", chat, 10.0), ("rag", rag, rag_ttft)):
        metrics = {"total_token_throughput": throughput, "p99_tpot_ms": 10.0, "p99_ttft_ms": ttft}
        levels = space.workload_load_levels(ENGINE, next(w for w in space.mix_workloads() if w.name == workload))
        by_workload[workload] = tuple(PredictedLoad(load, metrics) for load in levels)
    return Ranked(ENGINE, {"vllm.max_num_seqs": seqs}, None, by_workload["chat"], by_workload)


def launched(study, space, key: str, seqs, chat: float, rag: float, mix: float, **marks) -> None:
    """A launched trial with configuration key ``key`` that measured ``chat`` and ``rag`` at every load."""
    benchmarks = []
    for workload, throughput in (("chat", chat), ("rag", rag)):
        levels = space.workload_load_levels(ENGINE, next(w for w in space.mix_workloads() if w.name == workload))
        metrics = {"total_token_throughput": throughput, "p99_tpot_ms": 10.0, "p99_ttft_ms": 100.0}
        benchmarks += [LoadRecord(load=load, feasible=True, value=throughput, metrics=metrics,
                                  workload=workload).stored() | {"workload": workload} for load in levels]  # fmt: skip
    distributions = {"vllm.max_num_seqs": optuna.distributions.CategoricalDistribution([None, 256, 512])}
    study.add_trial(optuna.trial.create_trial(
        params={"vllm.max_num_seqs": seqs}, distributions=distributions, value=mix,
        user_attrs={"config_key": key, "launched": True, "benchmarks": benchmarks, **marks},
        system_attrs={"constraints": [0.0]}))  # fmt: skip


@pytest.fixture
def space(tmp_path):
    return load_space(space_file(tmp_path, TWO))  # chat (weight 1), rag (weight 2, its own TTFT SLO and loads)


def test_each_workload_is_corrected_by_its_own_measurements(space) -> None:
    """The model is 2x low on chat and right on rag. After the baseline, the calibrated model reproduces the
    baseline's mix (1.0) and predicts an unmeasured configuration's mix close to the truth, the geometric mean
    (weights 1 and 2) of its chat prediction x2 and its rag prediction, each relative to the baseline's measurement;
    one correction shared by both workloads (the raw model's mix, or a mean factor on both) is further off."""
    keyed = {"baseline": model(space, None, chat=100.0, rag=50.0), "other": model(space, 256, chat=150.0, rag=40.0)}
    study = optuna.create_study(direction="maximize")
    launched(study, space, "baseline", None, chat=200.0, rag=50.0, mix=1.0)
    reference = {"chat": 200.0, "rag": 50.0}
    fitted = MixCalibration(space, keyed, study.trials, reference)
    assert fitted.rows == 2 + 3  # chat's two loads, rag's three
    assert fitted.value(space, keyed["baseline"]) == pytest.approx(1.0, rel=0.05)
    truth = (300 / 200 * (40 / 50) ** 2) ** (1 / 3)
    raw = predicted_mix(space, {"chat": 150.0, "rag": 40.0}, reference)
    shared = 2 ** (2 / 5)  # the mean factor over the five measured loads
    shared_mix = predicted_mix(space, {"chat": 150.0 * shared, "rag": 40.0 * shared}, reference)
    got = fitted.value(space, keyed["other"])
    assert got == pytest.approx(truth, rel=0.05)
    assert abs(got - truth) < min(abs(raw - truth), abs(shared_mix - truth)) / 1.5, (got, truth, raw, shared_mix)
    # the predicted mix is the objective's: geomean here, the worst relative under `worst`
    worst = space.model_copy(update={"objective": space.objective.model_copy(update={"mix": "worst"})})
    assert predicted_mix(worst, {"chat": 300.0, "rag": 40.0}, reference) == pytest.approx(0.8)


def test_a_configuration_predicted_to_miss_one_workloads_slo_has_no_mix(space) -> None:
    """Best on chat by far, but the model (calibrated: rag's TTFT is measured as predicted) says it misses rag's
    TTFT SLO at every load: infeasible for the mix, so it has no value; and no reference for a workload gives none."""
    keyed = {"baseline": model(space, None, chat=100.0, rag=50.0),
             "fast-chat": model(space, 512, chat=900.0, rag=80.0, rag_ttft=10 * 3000.0)}  # fmt: skip
    study = optuna.create_study(direction="maximize")
    launched(study, space, "baseline", None, chat=100.0, rag=50.0, mix=1.0)
    fitted = MixCalibration(space, keyed, study.trials, reference={"chat": 100.0, "rag": 50.0})
    assert fitted.value(space, keyed["fast-chat"]) is None
    unreferenced = MixCalibration(space, keyed, study.trials, reference={"chat": 100.0})
    assert unreferenced.value(space, keyed["baseline"]) is None


def test_a_mix_study_queues_what_its_calibrated_mix_predicts_above_the_incumbent(space) -> None:
    """The incumbent's mix is 1.0; the model, once corrected x2 on chat, predicts another configuration at
    about (3 x 1^2)^(1/3) = 1.44: it is queued for that (not as a neighbour), marked with its calibrated mix."""
    keyed = {"baseline": model(space, None, chat=100.0, rag=50.0), "better": model(space, 512, chat=300.0, rag=50.0),
             "neighbour": model(space, 256, chat=90.0, rag=50.0)}  # fmt: skip
    study = optuna.create_study(direction="maximize")
    launched(study, space, "baseline", None, chat=200.0, rag=50.0, mix=1.0)
    fitted = MixCalibration(space, keyed, study.trials, reference={"chat": 200.0, "rag": 50.0})
    fixed = calibration.next_configuration(study, space, keyed, fitted)
    assert fixed is not None and fixed.params == {"vllm.max_num_seqs": 512}
    assert fixed.marks.get("neighbour_of") is None
    assert fixed.marks["calibrated_predicted"] == pytest.approx(3 ** (1 / 3), rel=0.05)
    # a first-workload calibration would call "better" 3x the incumbent's chat: a number in another unit than 1.0
    assert Calibration([]).value(space, keyed["better"]) == pytest.approx(300.0)
    assert not math.isclose(fixed.marks["calibrated_predicted"], 300.0)


def test_the_prior_ranks_by_the_predicted_mix_and_judges_a_workload_it_calls_all_infeasible_without_its_slo(
        space) -> None:  # fmt: skip
    """The raw model puts rag's TTFT over its SLO on every configuration (the analytic model's TTFT on long prompts
    can be 10x high): judged by that SLO nothing would be ranked; judged without it, configurations are valued by
    the predicted mix relative to the space's default configuration (max_num_seqs unset) and ranked by it."""
    from autotune.search import prior

    over = 10 * 3000.0
    ranked = [model(space, None, chat=100.0, rag=50.0, rag_ttft=over),
              model(space, 256, chat=400.0, rag=25.0, rag_ttft=over),  # chat x4, rag x1/2: (4 x 1/4)^(1/3) = 1
              model(space, 512, chat=200.0, rag=100.0, rag_ttft=over)]  # fmt: skip
    valued = prior._with_predicted_mix(space, ranked)
    assert [r.predicted for r in valued] == pytest.approx([1.0, 1.0, (2 * 2**2) ** (1 / 3)])
    feasible_rag = [model(space, None, chat=100.0, rag=50.0), model(space, 256, chat=400.0, rag=25.0, rag_ttft=over)]
    valued = prior._with_predicted_mix(space, feasible_rag)  # rag judged by its SLO where the model calls one feasible
    assert valued[0].predicted == pytest.approx(1.0) and valued[1].predicted is None
