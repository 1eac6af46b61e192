"""Warm start without an engine: the warm prior's weight on landscapes that agree or moved, ``--warm-start auto``'s
query (nothing of another model or hardware), the rules' version states, and earlier parameters mapped into a space."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from autotune import records
from autotune.records import LearnedRule, ResidualRow, StudyIdentity, StudyRecord, WarmMeasurement
from autotune.search import warm_rules
from autotune.search.warm_model import TRUST, WarmModel, weight
from autotune.search.warm_start import auto_sources, identity_of, in_space, model_family, snapshot
from autotune.space.files import parse_space

SPACE = """
name: warm
hardware: {gpus: 0}
engines:
  vllm:
    version: 0.32.0
    fixed: {model: org/Tiny-Model-Instruct}
params:
  max_num_seqs: {choices: [2, 8, 32], default: 2}
  dtype: {choices: [float32, bfloat16], default: float32}
workload: {dataset: random, input_len: 16, output_len: 16, num_prompts: 8}
objective: {metrics: [{name: total_token_throughput}]}
"""
DISTRIBUTIONS = {"max_num_seqs": CategoricalDistribution([2, 8, 32]),
                 "dtype": CategoricalDistribution(["float32", "bfloat16"])}  # fmt: skip
CONFIGS = [{"max_num_seqs": s, "dtype": d} for s in (2, 8, 32) for d in ("float32", "bfloat16")]


def landscape_a(params: dict) -> float:
    """More sequences are faster, bfloat16 twice float32: the optimum is 32 / bfloat16."""
    return {2: 100.0, 8: 300.0, 32: 900.0}[params["max_num_seqs"]] * (2 if params["dtype"] == "bfloat16" else 1)


def landscape_moved(params: dict) -> float:
    """The optimum moved: fewer sequences are faster now, and float32 is."""
    return {2: 900.0, 8: 300.0, 32: 100.0}[params["max_num_seqs"]] * (2 if params["dtype"] == "float32" else 1)


def measured(params: dict, value: float, number: int) -> optuna.trial.FrozenTrial:
    """A trial that launched and measured ``value`` (feasible)."""
    trial = optuna.trial.create_trial(values=[value], params=params, distributions=DISTRIBUTIONS,
                                      user_attrs=records.stored(launched=True, engine="vllm", engine_version="0.32.0"),
                                      constraints={"launch": 0.0})  # fmt: skip
    trial.number = number
    return trial


def model_of(landscape) -> WarmModel:
    best = max(landscape(p) for p in CONFIGS)
    return WarmModel([WarmMeasurement(params=p, relative=landscape(p) / best, source=f"a:{i}")
                      for i, p in enumerate(CONFIGS)])  # fmt: skip


def test_the_model_reads_the_earlier_landscape_as_knob_effects() -> None:
    model = model_of(landscape_a)
    ranked = sorted(CONFIGS, key=model.predict, reverse=True)
    assert ranked[0] == {"max_num_seqs": 32, "dtype": "bfloat16"}
    assert ranked[-1] == {"max_num_seqs": 2, "dtype": "float32"}
    effects = dict(model.effects())
    assert effects['dtype="bfloat16"'] > 1 > effects['dtype="float32"']


@pytest.mark.parametrize("measured_here", [[0, 5, 2], [5, 0, 3, 1]])
def test_the_weight_stays_high_where_this_study_agrees(measured_here) -> None:
    model = model_of(landscape_a)
    trials = [measured(CONFIGS[i], landscape_a(CONFIGS[i]) * 0.7, n) for n, i in enumerate(measured_here)]
    result = weight(model, trials, maximize=True, number=len(trials) - 1)
    assert result.pairs == len(trials) * (len(trials) - 1) // 2 and result.concordant == result.pairs
    assert result.weight == 1.0


def test_the_weight_falls_where_the_optimum_moved() -> None:
    model = model_of(landscape_a)
    weights = []
    trials = []
    # the warm study measures the earlier best first, then others: on the moved landscape each disagrees
    for n, i in enumerate([0, 5, 4, 1]):
        trials.append(measured(CONFIGS[i], landscape_moved(CONFIGS[i]), n))
        weights.append(weight(model, trials, maximize=True, number=n).weight)
    assert weights[0] == 1.0  # one measurement orders nothing
    assert weights == sorted(weights, reverse=True) and weights[-1] < TRUST
    # the same measurements on the unmoved landscape keep it whole
    same = [measured(CONFIGS[i], landscape_a(CONFIGS[i]), n) for n, i in enumerate([0, 5, 4, 1])]
    assert weight(model, same, maximize=True, number=3).weight == 1.0


def missed(params: dict, number: int) -> optuna.trial.FrozenTrial:
    """A trial that launched and missed an SLO at every load (infeasible)."""
    trial = optuna.trial.create_trial(values=[0.0], params=params, distributions=DISTRIBUTIONS,
                                      user_attrs=records.stored(launched=True, engine="vllm", engine_version="0.32.0"),
                                      constraints={"launch": 0.0, "p99_ttft_ms": 1.0})  # fmt: skip
    trial.number = number
    return trial


def test_a_configuration_the_model_ranks_high_that_misses_an_slo_here_disagrees_with_it() -> None:
    """The earlier best (32 / bfloat16) misses an SLO here while the earlier worst meets it: an infeasible
    measurement is below every feasible one, so the pair disagrees with the model and its weight falls; two
    infeasible measurements are no order at all."""
    model = model_of(landscape_a)
    trials = [missed(CONFIGS[5], 0), measured(CONFIGS[0], 100.0, 1)]
    result = weight(model, trials, maximize=True, number=1)
    assert (result.pairs, result.concordant) == (1, 0) and result.weight < 1.0
    agreeing = [missed(CONFIGS[0], 0), measured(CONFIGS[5], 100.0, 1)]  # the earlier worst misses: as it said
    assert weight(model, agreeing, maximize=True, number=1).concordant == 1
    assert weight(model, [missed(CONFIGS[5], 0), missed(CONFIGS[0], 1)], maximize=True, number=1).pairs == 0


def test_values_within_noise_are_no_evidence_either_way() -> None:
    model = model_of(landscape_a)
    trials = [measured(CONFIGS[0], 500.0, 0), measured(CONFIGS[5], 505.0, 1)]
    assert weight(model, trials, maximize=True, number=1).pairs == 0


def _study(tmp_path, name: str, identity: StudyIdentity, measured_trial: bool = True, rule: bool = True) -> str:
    url = f"sqlite:///{tmp_path / name}.db"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    records.write_study(study, identity=identity)
    if measured_trial:
        study.add_trial(measured({"max_num_seqs": 32, "dtype": "bfloat16"}, 900.0, 0))
    if rule:
        records.write_study(study, learned_rules={f"learned:dtype={name}": LearnedRule(
            param="dtype", value=name, kind="unsupported", reason="x", trial=0)})  # fmt: skip
    return url


def test_auto_takes_only_finished_studies_of_the_same_model_family_hardware_and_engines(tmp_path) -> None:
    space = parse_space(SPACE)
    mine = identity_of(space)
    assert mine.model_family == "tiny-model" and mine.engines == {"vllm": "0.32.0"}
    urls = [
        _study(tmp_path, "same", mine),
        _study(tmp_path, "older-version", mine.model_copy(update={"engines": {"vllm": "0.31.0"}})),
        _study(tmp_path, "other-model", mine.model_copy(update={"model_family": "llama-3.1-8b"})),
        _study(
            tmp_path,
            "other-hardware",
            mine.model_copy(update={"hardware": {"gpus": 8, "gpu": "H200", "gpu_memory_gb": 141}}),
        ),
        _study(tmp_path, "other-engine", mine.model_copy(update={"engines": {"sglang": "0.5.0"}})),
        _study(tmp_path, "unfinished", mine, measured_trial=False),
        _study(tmp_path, "warm", mine),  # the study being made is never its own source
    ]
    found = auto_sources(urls, mine, exclude="warm")
    assert [s.study for s in found] == ["same", "older-version"]
    taken = snapshot(space, found)
    assert set(taken.rules) == {"learned:dtype=same", "learned:dtype=older-version"}
    assert {m.source.split(":")[0] for m in taken.measurements} == {"same", "older-version"}


def test_model_family_drops_organisation_directory_and_variant() -> None:
    assert model_family("meta-llama/Llama-3.3-70B-Instruct") == "llama-3.3-70b"
    assert model_family(".engines/vllm-cpu/tiny") == "tiny"
    assert model_family("deepseek-ai/DeepSeek-V3.2") == "deepseek-v3.2"


def test_earlier_parameters_map_into_the_space_or_are_left_out() -> None:
    space = parse_space(SPACE)
    assert in_space(space, {"max_num_seqs": 8}) == {"max_num_seqs": 8, "dtype": "float32"}
    assert in_space(space, {"max_num_seqs": 64, "dtype": "float32"}) is None  # not a value this space allows
    assert in_space(space, {"max_num_seqs": 8}, engine="sglang") is None


def test_a_rule_of_another_version_is_to_re_check_and_one_of_this_version_applies() -> None:
    record = StudyRecord(identity=StudyIdentity(engines={"vllm": "0.33.0"}))
    same = LearnedRule(param="p", value=1, kind="crash", reason="", trial=0, inherited_from="a:0", engine="vllm",
                       engine_version="0.33.0")  # fmt: skip
    older = same.model_copy(update={"engine_version": "0.32.0"})
    assert not warm_rules.needs_recheck(record, same) and warm_rules.needs_recheck(record, older)
    state = warm_rules.rule_state(record, "learned:p=1", older, {})
    assert state.claimable and not state.dropped
    own = LearnedRule(param="p", value=1, kind="crash", reason="", trial=0)
    assert not warm_rules.needs_recheck(record, own)


@pytest.mark.parametrize(("failure", "state"), [(None, "dropped"), ("crash", "holds"), ("oom", "to re-check")])
def test_a_re_check_holds_the_rule_only_if_it_fails_the_same_way(failure, state) -> None:
    """The rule was learned from a crash on 0.32.0: on 0.33.0 its re-check serving drops it, crashing again keeps
    it, and running out of memory says nothing of it: the next trial that breaks it re-checks it."""
    record = StudyRecord(identity=StudyIdentity(engines={"vllm": "0.33.0"}), rechecks={"learned:p=1": 4})
    older = LearnedRule(param="p", value=1, kind="crash", reason="", trial=0, inherited_from="a:0", engine="vllm",
                        engine_version="0.32.0")  # fmt: skip
    checker = optuna.trial.create_trial(value=1.0 if failure is None else 0.0, params={"p": 1},
                                        distributions={"p": optuna.distributions.CategoricalDistribution([1])},
                                        user_attrs=records.stored(launched=True, **({"failure_kind": failure}
                                                                                     if failure else {})))  # fmt: skip
    found = warm_rules.rule_state(record, "learned:p=1", older, {4: checker})
    assert found.text.startswith(state) and found.dropped == (state == "dropped")
    assert found.claimable == (state == "to re-check")


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_an_earlier_out_of_memory_rules_out_more_memory_on_its_version_only(version) -> None:
    from autotune.config import ServerConfig
    from autotune.records import InheritedOom
    from autotune.search.learning import oom_cap

    study = optuna.create_study()
    ran_out = {"engine": "vllm", "model": "m", "max_num_seqs": 32, "engine_version": "0.32.0"}
    records.write_study(study, identity=StudyIdentity(engines={"vllm": version}),
                        inherited_oom=[InheritedOom(config=ran_out, level=0, source="a:3", engine_version="0.32.0")])  # fmt: skip
    more = ServerConfig(engine="vllm", model="m", max_num_seqs=64, engine_version=version)
    less = ServerConfig(engine="vllm", model="m", max_num_seqs=8, engine_version=version)
    if version == "0.32.0":
        assert oom_cap(study, more, 0) == (0, "a:3")  # needs at least that memory: not launched
    else:
        assert oom_cap(study, more, 0) == (None, None)  # another version: launched, and learns it again if so
    assert oom_cap(study, less, 0) == (None, None)


MIX_SPACE = SPACE.replace(
    "workload: {dataset: random, input_len: 16, output_len: 16, num_prompts: 8}",
    "workloads:\n  - {name: chat, dataset: random, input_len: 16, output_len: 16, num_prompts: 8}\n"
    "  - {name: long, dataset: random, input_len: 64, output_len: 16, num_prompts: 8}",
)


@pytest.mark.parametrize(
    ("space_text", "best", "order", "residuals"),
    [
        # a:1 is the baseline's own configuration (the first of the others): measured once, as the baseline
        (SPACE, {"max_num_seqs": 32, "dtype": "bfloat16"}, ["a:0", "baseline", "a:2", "a:3"], False),
        (SPACE, {"max_num_seqs": 2, "dtype": "float32"}, ["baseline", "a:1", "a:2", "a:3"], False),
        (MIX_SPACE, {"max_num_seqs": 32, "dtype": "bfloat16"}, ["baseline", "a:0", "a:2", "a:3"], False),
        # with the sources' model residuals the calibration ranks the runners-up: the best alone is queued
        (SPACE, {"max_num_seqs": 32, "dtype": "bfloat16"}, ["a:0", "baseline"], True),
    ],
    ids=["best-first", "best-is-the-baseline", "mix-baselines-first", "residuals-best-alone"],
)
def test_the_earlier_best_is_measured_before_the_baselines_unless_it_is_one_or_the_space_is_a_mix(
    space_text, best, order, residuals
) -> None:
    from autotune.search.trial_queue import FixedConfiguration
    from autotune.search.warm_start import WarmSnapshot, first_configurations

    space = parse_space(space_text)
    others = [p for p in CONFIGS if p != best]
    measurements = [WarmMeasurement(params=p, relative=1.0 - i / 10, source=f"a:{i}")
                    for i, p in enumerate([best, *others])]  # fmt: skip
    rows = [ResidualRow(features=["engine=vllm"], residuals={"total_token_throughput": 0.1}, source="a")]
    snap = WarmSnapshot(sources=["a"], rules={}, oom=[], measurements=measurements, residuals=rows if residuals else [])
    baseline = FixedConfiguration({"max_num_seqs": 2, "dtype": "float32"}, records.stored(baseline=True))
    first = first_configurations(space, snap, [baseline])
    assert [f.marks.get("warm_of", "baseline") for f in first] == order
    assert len({str(f.params) for f in first}) == len(first)  # the baseline is not queued twice
