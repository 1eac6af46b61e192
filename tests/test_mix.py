"""The mix of several workloads: the schema that names them, the value, the bound that stops a launch early, the
order, and the study digest that lets a study made before them resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.errors import SpaceError, UsageError
from autotune.records import LoadRecord, TrialRecord, WorkloadRecord
from autotune.search import mix, setup
from autotune.search.mix import Share
from autotune.space.files import check_dataset, load_space
from tests.conftest import local_llama

SPACE = """
name: digest-probe
hardware: {gpus: 8, gpu_memory_gb: 141, gpu: H200}
simulate: {performance_model: analytic, mode: direct}
engines:
  vllm:
    version: 0.13.0
    fixed: {model: deepseek-ai/DeepSeek-V3.2}
    params:
      max_num_seqs: {choices: [null, 256]}
params:
  max_concurrency: {choices: [16, 64], default: 64}
WORKLOAD
objective:
  metrics: [{name: total_token_throughput}]
  slo: {p99_tpot_ms: 80}
"""
ONE = "workload: {dataset: random, input_len: 2000, output_len: 100, num_prompts: 50, seed: 42}"
TWO = """workloads:
  - {name: chat, dataset: random, input_len: 200, output_len: 100, num_prompts: 50}
  - {name: rag, weight: 2, dataset: random, input_len: 8000, output_len: 300, num_prompts: 20,
     slo: {p99_ttft_ms: 3000}, loads: {max_concurrency: [4, 8, 2]}}"""
# what autotune before several workloads (main at 1808e8a) stored as the digest of the one-workload space above
PREVIOUS_DIGEST = "0e604cdcd9b9b058"


def space_file(tmp_path: Path, workloads: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.replace("WORKLOAD", workloads))
    return path


def test_a_one_workload_space_keeps_its_digest_so_an_older_study_resumes(tmp_path) -> None:
    space = load_space(space_file(tmp_path, ONE))
    assert setup.digest(space) == PREVIOUS_DIGEST
    assert space.mix_workloads() == [space.workload] and not space.is_mix


def test_workloads_each_with_weight_slo_and_loads(tmp_path) -> None:
    space = load_space(space_file(tmp_path, TWO))
    chat, rag = space.mix_workloads()
    assert space.is_mix and (chat.name, rag.name, rag.weight) == ("chat", "rag", 2.0)
    assert space.workload_slo(chat) == {"p99_tpot_ms": 80} and space.workload_slo(rag) == {"p99_ttft_ms": 3000}
    assert space.workload_load_levels("vllm", chat) == [{"max_concurrency": 16}, {"max_concurrency": 64}]
    assert space.workload_load_levels("vllm", rag) == [{"max_concurrency": c} for c in (2, 4, 8)]
    assert setup.digest(space) != PREVIOUS_DIGEST


@pytest.mark.parametrize(
    ("workloads", "words"),
    [
        (ONE + "\n" + TWO, ["both `workload` and `workloads`", "fix"]),
        ("workloads: [{input_len: 10}, {input_len: 20}]", ["has no name", "fix"]),
        ("workloads: [{name: a}, {name: a}]", ["unique", "a repeated"]),
    ],
)
def test_workloads_refused_with_the_key_and_the_fix(tmp_path, workloads, words) -> None:
    with pytest.raises(SpaceError) as refused:
        load_space(space_file(tmp_path, workloads))
    assert all(word in str(refused.value) for word in words), str(refused.value)


def test_mix_values() -> None:
    shares = [Share(1, 2.0), Share(1, 0.5), Share(2, 1.0)]
    assert mix.mix_value("geomean", shares) == pytest.approx(1.0)
    assert mix.mix_value("weighted_mean", shares) == pytest.approx((2.0 + 0.5 + 2 * 1.0) / 4)
    assert mix.mix_value("worst", shares) == 0.5
    assert mix.mix_value("geomean", [Share(1, 4.0), Share(3, 1.0)]) == pytest.approx(4 ** (1 / 4))
    assert mix.mix_value("geomean", [Share(1, 0.0), Share(1, 3.0)]) == 0.0
    assert mix.mix_value("geomean", []) == 0.0


def test_the_bound_stops_only_when_the_workloads_left_cannot_lift_the_mix() -> None:
    measured = [Share(1, 0.5)]
    # two left, each at most 1.5: the geomean reaches (0.5 · 1.5 · 1.5)^(1/3) = 1.04 at best
    left = [Share(1, 1.5), Share(1, 1.5)]
    assert mix.upper_bound("geomean", measured, left) == pytest.approx((0.5 * 1.5 * 1.5) ** (1 / 3))
    assert not mix.cannot_lift("geomean", measured, left, incumbent=1.0)  # 1.04 > 1.0: they could still lead
    assert mix.cannot_lift("geomean", measured, left, incumbent=1.05)
    assert not mix.cannot_lift("geomean", measured, [], incumbent=5.0)  # nothing left: the mix is known
    assert not mix.cannot_lift("geomean", measured, left, incumbent=None)  # no incumbent: measure everything
    assert not mix.cannot_lift("geomean", measured, [Share(1, math.inf)], incumbent=100.0)  # never measured
    assert mix.cannot_lift("worst", [Share(1, 0.9)], [Share(1, math.inf)], incumbent=0.9)  # worst: exact


@given(
    kind=st.sampled_from(["geomean", "weighted_mean", "worst"]),
    measured=st.lists(st.tuples(st.floats(0.1, 5), st.floats(0.01, 10)), min_size=1, max_size=3),
    left=st.lists(st.tuples(st.floats(0.1, 5), st.floats(0.01, 10), st.floats(0, 1)), min_size=1, max_size=3),
    incumbent=st.floats(0.01, 10),
)
def test_early_stop_never_skips_a_workload_that_could_change_the_incumbent(kind, measured, left, incumbent) -> None:
    """Whatever the workloads left turn out to be, up to their ceilings: once the bound says stop, no such outcome
    would have lifted the mix above the incumbent."""
    done = [Share(w, r) for w, r in measured]
    ceilings = [Share(w, c) for w, c, _ in left]
    outcome = [Share(w, c * share) for w, c, share in left]  # any result at or below the ceiling
    if mix.cannot_lift(kind, done, ceilings, incumbent):
        assert mix.mix_value(kind, [*done, *outcome]) <= incumbent * (1 + 1e-9)
    if mix.mix_value(kind, [*done, *ceilings]) > incumbent * (1 + 1e-9):
        assert not mix.cannot_lift(kind, done, ceilings, incumbent)


def test_the_most_discriminating_workload_first() -> None:
    history = {"short": [1.0, 1.02, 0.98], "long": [1.0, 0.4, 2.0], "medium": [1.0, 1.5]}
    assert mix.discriminating_order(["short", "medium", "long"], history, {}) == ["long", "medium", "short"]
    # no spread yet (only the baseline): where the incumbent is weakest first, then the space's order
    flat = {"a": [1.0], "b": [1.0], "c": [1.0]}
    assert mix.discriminating_order(["a", "b", "c"], flat, {"a": 1.3, "b": 0.9, "c": 1.3}) == ["b", "a", "c"]


def test_workload_records_round_trip_and_old_records_read_without_them() -> None:
    results = [WorkloadRecord(name="chat", load={"max_concurrency": 8}, feasible=True, value=100.0, relative=1.25,
                              metrics={"total_token_throughput": 100.0}, loads_measured=2),
               WorkloadRecord(name="rag", weight=2.0, skipped=True)]  # fmt: skip
    level = LoadRecord(load={"max_concurrency": 8}, feasible=True, value=100.0, metrics={}, workload="chat")
    record = TrialRecord.model_validate({"workloads": results, "mix": "geomean", "benchmarks": [level]})
    stored = record.stored()
    assert stored["workloads"][1] == {"name": "rag", "weight": 2.0, "skipped": True}
    assert stored["benchmarks"][0]["workload"] == "chat"
    assert TrialRecord.from_attrs(stored).workloads == results
    old = TrialRecord.from_attrs({"benchmarks": [{"load": {}, "feasible": True, "value": 1.0}]})
    assert old.workloads == [] and old.mix is None and "workload" not in old.benchmarks[0].stored()


def test_validate_measures_a_mix_studys_own_workloads_each_at_its_chosen_load(tmp_path) -> None:
    from autotune.evidence.validate import Contender, study_suite

    space = load_space(space_file(tmp_path, TWO))
    suite = study_suite(space)
    assert [named.name for named in suite] == ["chat", "rag"]
    contender = Contender(space.default_point("vllm").server, {"max_concurrency": 64}, "trial 3",
                          {"chat": {"max_concurrency": 16}, "rag": {"max_concurrency": 4}})  # fmt: skip
    assert [contender.workload(named, 1).max_concurrency for named in suite] == [16, 4]
    assert contender.workload(suite[1], 1).input_len == 8000 and contender.workload(suite[1], 1).seed == 1


def test_validate_judges_each_workload_by_its_own_slo(tmp_path) -> None:
    """rag has its own SLO (p99 TTFT ≤ 3000 ms), chat the objective's (p99 TPOT ≤ 80 ms): each row is judged by its
    workload's, and the plan line names both."""
    from autotune.cli.validate import slo_text
    from autotune.evidence.validate import Contender, study_suite, validate

    path = space_file(tmp_path, TWO)
    path.write_text(
        path.read_text().replace("model: deepseek-ai/DeepSeek-V3.2}", "model: deepseek-ai/DeepSeek-V3.2, tp: 8}")
    )
    space = load_space(path)
    suite = study_suite(space)
    contender = Contender(space.default_point("vllm").server, {}, "trial 0",
                          {"chat": {"max_concurrency": 16}, "rag": {"max_concurrency": 4}})  # fmt: skip
    rows = {row["workload"]: row for row in validate(space, contender, {"candidate": contender}, suite, 2, tmp_path)}
    assert rows["chat"]["slo"] == {"p99_tpot_ms": 80} and rows["rag"]["slo"] == {"p99_ttft_ms": 3000}
    rag_ttft = rows["rag"]["reference_p99_ttft_ms"]
    assert set(rows["rag"]["reference_slo_misses"]) == ({"p99_ttft_ms"} if rag_ttft > 3000 else set())
    assert "candidate_p99_tpot_ms" not in rows["rag"] and "candidate_p99_ttft_ms" not in rows["chat"]
    assert slo_text(suite, space.objective) == "chat: p99_tpot_ms ≤ 80; rag: p99_ttft_ms ≤ 3000"


def test_init_writes_several_workloads_and_the_seed_suite_scaled_to_the_context(tmp_path) -> None:
    from autotune.space.init import Request, write_space

    def written(**changes) -> list:
        path = tmp_path / "space.yaml"
        path.write_text(write_space(Request(**{"model": "deepseek-ai/DeepSeek-V3", "gpus": 8, "gpu_memory_gb": 141,
                                               "engines": ("sglang",)} | changes)))  # fmt: skip
        return load_space(path).mix_workloads()

    two = written(workloads=("sharegpt", "random:8000:300"))
    assert [(w.name, w.dataset, w.input_len) for w in two][1] == ("random-8000-300", "random", 8000)
    six = written(seed_suite=True)
    assert [w.name for w in six] == ["sharegpt", "very-long", "long", "medium", "short", "generation-heavy"]
    assert six[0].dataset == "sharegpt" and "# ShareGPT: download" in (tmp_path / "space.yaml").read_text()
    # simulated, ShareGPT is its mean lengths (the simulator needs no file): the space runs as written
    simulated = written(seed_suite=True, simulate=True)
    assert (simulated[0].dataset, simulated[0].input_len, simulated[0].output_len) == ("random", 219, 197)
    check_dataset(load_space(tmp_path / "space.yaml"), tmp_path / "space.yaml")
    assert [(w.input_len, w.output_len) for w in six[1:]] == [(32000, 100), (4000, 200), (2000, 100), (128, 4),
                                                              (1000, 2000)]  # fmt: skip
    model = local_llama(tmp_path / "small-context", 8192)
    scaled = written(model=str(model), engines=("vllm",), seed_suite=True)
    assert all(w.input_len + w.output_len <= 8192 for w in scaled)
    assert scaled[1].input_len == round(32000 * 8192 / 32100)
    with pytest.raises(UsageError, match="--seed-suite and --workload"):
        written(seed_suite=True, workloads=("sharegpt",))


def test_a_launch_stopped_as_infeasible_on_one_workload_records_no_bound(tmp_path) -> None:
    """With an incumbent, a launch infeasible on its first workload stops there (infeasible for the mix); nothing
    measured bounds a geomean of the workloads left, so no bound is recorded (not an infinite one); under ``worst``
    the measured workload bounds it."""
    import optuna

    from autotune import records
    from autotune.search.mix_sweep import MixSweep

    space = load_space(space_file(tmp_path, TWO))
    study = optuna.create_study(direction="maximize")
    held = [WorkloadRecord(name=n, weight=1, feasible=True, value=100.0, relative=1.0) for n in ("chat", "rag")]
    study.add_trial(optuna.trial.create_trial(values=[1.0], user_attrs=records.stored(workloads=held, launched=True),
                                              constraints={"launch": 0.0}))  # fmt: skip
    for kind, bound in (("geomean", None), ("worst", 0.4)):
        mixed = MixSweep(space.model_copy(update={"objective": space.objective.model_copy(update={"mix": kind})}),
                         "vllm", study, trial_number=1)  # fmt: skip
        first = mixed.order[0]
        mixed.results[first] = WorkloadRecord(name=first, weight=1, feasible=False, value=40.0, relative=0.4)
        assert mixed.next_workload() is None and mixed.stopped_early
        assert mixed.bound() == bound
