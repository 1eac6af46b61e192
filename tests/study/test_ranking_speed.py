"""The prior's ranking before a study's first launch: the same order and predictions as a reference that simulates
every configuration at every load afresh, while stepping the scheduler through only the schedules that differ (the
rest are reused or retimed), and its progress, told as it goes and shown as ``ranking 4,200 / 11,520 · 12 s`` once
it has taken two seconds (a controlled clock: nothing here waits)."""

from __future__ import annotations

import pytest

from autotune.bench.datasets import build_requests
from autotune.cli.ranking_progress import RankingProgress, ranking_text
from autotune.config import Hardware, ServerConfig
from autotune.search import prior
from autotune.search.prior import RankingStatus
from autotune.search.setup import first_configurations
from autotune.search.status import Phase, StatusEvent
from autotune.sim import direct
from autotune.sim.analytic import analytic_profile
from autotune.sim.replay import Diverged, RecordingScheduler, ReplayScheduler
from autotune.sim.scheduler import SimRequest
from autotune.sim.words import word_tokenizer
from autotune.space.files import load_space
from autotune.space.schema import Workload

# 2 layouts × 2 attention backends × 2 KV dtypes × 3 max_num_seqs × 2 contexts × 2 CUDA graphs = 96 configurations,
# at 3 loads: max_num_seqs 2 holds requests back at the loads above 2, a context of 100 refuses every request
SPACE = """
name: ranking-speed
hardware: {gpus: 8, gpu_memory_gb: 141.0, gpu: H200}
engines:
  vllm:
    version: 0.33.0
    executable: [vllm]
    fixed: {model: meta-llama/Llama-3.3-70B-Instruct}
    params:
      layout:
        tied:
          - {tp: 4, dp: 2}
          - {tp: 8}
        default: {tp: 8}
      attention_backend: {choices: [null, FLASHINFER]}
      kv_cache_dtype: {choices: [null, fp8]}
params:
  max_num_seqs: {choices: [null, 2, 256]}
  max_model_len: {choices: [null, 100]}
  cuda_graph: {choices: [null, false]}
  max_concurrency: {choices: [2, 4, 16], default: 16}
workload: {dataset: random, input_len: 96, output_len: 12, num_prompts: 8, ignore_eos: true, seed: 42}
objective:
  metrics: [{name: total_token_throughput, direction: maximize}]
  slo: {p99_tpot_ms: 50.0}
"""
CONFIGURATIONS, LOADS = 96, 3


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "ranking-speed.yaml"
    path.write_text(SPACE)
    direct._MEASURED.clear()  # nothing reused from another test's benchmarks
    direct._TRACES.clear()
    prior._RANKINGS.clear()
    return load_space(path)


def _predictions(ranked: list[prior.Ranked]) -> list[tuple]:
    return [(r.engine, r.params, r.predicted, r.loads) for r in ranked]


def test_the_ranking_is_the_one_that_simulates_every_configuration_afresh(space) -> None:
    with direct.without_reuse():
        reference = prior._rank(space, "analytic", map, prior.no_progress)
    ranked = prior._rank(space, "analytic", map, prior.no_progress)
    assert _predictions(ranked) == _predictions(reference)  # the same order, values and metrics at every load
    assert len(ranked) == CONFIGURATIONS
    refused = [r for r in ranked if r.params["max_model_len"] == 100]  # every request refused: nothing served
    assert {r.predicted for r in refused} == {0.0} and ranked[-len(refused) :] == refused
    by_params = {tuple(sorted(r.params.items())): r for r in ranked}
    for limited in (r for r in ranked if r.params["max_num_seqs"] == 2 and r.params["max_model_len"] is None):
        unlimited = by_params[tuple(sorted((limited.params | {"max_num_seqs": None}).items()))]
        assert [p.load["max_concurrency"] for p in limited.loads] == [2, 4, 16]
        assert limited.loads[0] == unlimited.loads[0]  # 2 at once: a limit of 2 holds nothing back
        assert limited.loads[2] != unlimited.loads[2]  # all 8 at once: it does, on either layout


def test_only_schedules_that_differ_are_stepped_through(space, monkeypatch) -> None:
    """96 configurations × 3 loads: 288 benchmarks. Only the attention ranks (2 layouts), a max_num_seqs the load
    reaches, the context and the load change what the scheduler does; the rest only time its steps."""
    stepped = []
    real = direct.simulate

    def counting(model, requests, offsets, max_concurrency, scheduler=None):
        if not isinstance(scheduler, ReplayScheduler):
            stepped.append(max_concurrency)
        return real(model, requests, offsets, max_concurrency, scheduler)

    monkeypatch.setattr(direct, "simulate", counting)
    prior._rank(space, "analytic", map, prior.no_progress)
    # per layout: 3 loads × 2 contexts, and max_num_seqs 2 once more at the 2 loads it holds requests back
    assert len(stepped) == 2 * (LOADS * 2 + 2 * 2)
    assert len(stepped) < CONFIGURATIONS * LOADS / 10


def test_the_ranking_tells_its_progress_after_each_prediction(space) -> None:
    heard = []
    prior._rank(space, "analytic", map, lambda done, total: heard.append((done, total)))
    assert heard == [(done, CONFIGURATIONS) for done in range(CONFIGURATIONS + 1)]


def test_the_study_set_up_reports_the_ranking_as_status_events(space) -> None:
    events: list[StatusEvent] = []
    first_configurations(space, n_trials=4, on_status=events.append)
    assert events[0] == StatusEvent(Phase.RANKING)
    counts = [(e.done, e.total) for e in events[1:]]
    assert all(isinstance(e, RankingStatus) and e.phase == Phase.RANKING for e in events[1:])
    assert counts == [(done, CONFIGURATIONS) for done in range(CONFIGURATIONS + 1)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_shows_the_count_once_the_ranking_has_taken_two_seconds() -> None:
    clock = FakeClock()
    progress = RankingProgress(clock, live=True)
    assert progress.text() == "ranking the space"  # (no event yet)
    progress.status(StatusEvent(Phase.RANKING))
    progress.status(RankingStatus(Phase.RANKING, done=0, total=11_520))
    clock.now += 1.875
    progress.status(RankingStatus(Phase.RANKING, done=3_000, total=11_520))
    assert progress.text() == "ranking the space"
    clock.now += 0.125
    assert progress.text() == "ranking 3,000 / 11,520 · 2 s"
    clock.now += 10.5  # the live line's seconds go on between predictions (a slow one)
    progress.status(RankingStatus(Phase.RANKING, done=4_200, total=11_520))
    assert progress.text() == "ranking 4,200 / 11,520 · 12 s"
    progress.status(StatusEvent(Phase.LAUNCHING, trial=0))  # another phase's event is not the ranking's
    assert progress.text() == "ranking 4,200 / 11,520 · 12 s"
    assert ranking_text(26_880, 26_880, 75.0) == "ranking 26,880 / 26,880 · 1 min 15 s"


def test_a_ranking_over_within_two_seconds_shows_no_count() -> None:
    clock = FakeClock()
    progress = RankingProgress(clock, live=False)
    progress.status(StatusEvent(Phase.RANKING))
    for done in range(0, 401):
        progress.status(RankingStatus(Phase.RANKING, done=done, total=400))
        clock.now += 0.004
    assert progress.text() == "ranking the space"


def test_a_log_gets_a_line_every_ten_seconds_and_the_last() -> None:
    """A display printing each change of the text (where stderr is not a terminal) prints these lines."""
    clock = FakeClock()
    progress = RankingProgress(clock, live=False)
    progress.status(StatusEvent(Phase.RANKING))
    lines = [progress.text()]
    for done in range(0, 251):
        progress.status(RankingStatus(Phase.RANKING, done=done, total=250))
        if progress.text() != lines[-1]:
            lines.append(progress.text())
        clock.now += 0.125  # (exact in binary: the seconds compared are those written here)
    assert lines == ["ranking the space", "ranking 16 / 250 · 2 s", "ranking 96 / 250 · 12 s",
                     "ranking 176 / 250 · 22 s", "ranking 250 / 250 · 31 s"]  # fmt: skip


def _benchmark_inputs(max_num_seqs: int | None = None):
    config = ServerConfig(engine="vllm", model="meta-llama/Llama-3.3-70B-Instruct", tp=8, max_num_seqs=max_num_seqs)
    profile = analytic_profile(config, Hardware(gpus=8, gpu_memory_gb=141, gpu="H200"))
    workload = Workload(dataset="random", input_len=64, output_len=8, num_prompts=6, ignore_eos=True, seed=1)
    return profile, workload, build_requests(workload, word_tokenizer())


def test_a_replay_whose_requests_come_between_other_steps_says_so() -> None:
    profile, _, requests = _benchmark_inputs()
    recorder = RecordingScheduler(profile)
    direct.simulate(profile, requests, [0.0] * len(requests), 2, recorder)

    replay = ReplayScheduler(profile, recorder.trace)
    with pytest.raises(Diverged):
        replay.add(SimRequest(64, 8, handle=1))  # the recording added request 0 first
    replay = ReplayScheduler(profile, recorder.trace)
    replay.add(SimRequest(64, 8, handle=0))
    with pytest.raises(Diverged):
        replay.step()  # the recording added request 1 before its first step

    again = direct.simulate(profile, requests, [0.0] * len(requests), 2, ReplayScheduler(profile, recorder.trace))
    fresh = direct.simulate(profile, requests, [0.0] * len(requests), 2)
    assert again == fresh


def test_a_reused_result_is_the_callers_to_change() -> None:
    profile, workload, requests = _benchmark_inputs()
    first = direct.direct_benchmark(profile, workload, requests, "sim")
    first["total_token_throughput"] = -1.0
    assert direct.direct_benchmark(profile, workload, requests, "sim")["total_token_throughput"] > 0


def test_remembered_schedules_are_bounded_by_what_they_hold(monkeypatch) -> None:
    """A simulated study's benchmarks of a thousand requests each must not pile up: the oldest are let go."""
    (profile, workload, requests), (limited, _, _) = _benchmark_inputs(), _benchmark_inputs(max_num_seqs=2)

    def remembered() -> list:
        direct._MEASURED.clear()
        direct._TRACES.clear()
        direct.direct_benchmark(profile, workload, requests, "sim")
        direct.direct_benchmark(limited, workload, requests, "sim")  # another schedule (2 at a time)
        return list(direct._TRACES.values())

    first, second = remembered()
    monkeypatch.setattr(direct, "_TRACES_KEPT_SIZE", max(first.size, second.size))  # room for one of them
    (kept,) = remembered()
    assert kept.size == second.size and kept.adds == second.adds  # the later one
