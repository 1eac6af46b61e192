"""The prior's first launches: its best-ranked configurations, each at least two knobs from the others."""

from __future__ import annotations

from types import SimpleNamespace

from autotune.search import setup
from autotune.search.prior import Ranked
from autotune.space.schema import Search


def _ranked(layout: str, batch: int, kv: str | None, predicted: float | None) -> Ranked:
    return Ranked("vllm", {"layout": layout, "max_num_batched_tokens": batch, "kv_cache_dtype": kv}, predicted)


RANKING = [  # best first: the top is one layout at three batch limits
    _ranked("tp=2,dp=4", 8192, "fp8", 3.0),
    _ranked("tp=2,dp=4", 4096, "fp8", 2.9),
    _ranked("tp=2,dp=4", 16384, "fp8", 2.8),
    _ranked("tp=8", 8192, "fp8", 2.7),
    _ranked("tp=8", 4096, None, 2.6),
    _ranked("tp=4,dp=2", 8192, None, 2.5),
    _ranked("tp=4,dp=2", 2048, "fp8", None),  # predicted infeasible: never a prior pick
]


def _space(monkeypatch, prior_trials: int) -> SimpleNamespace:
    monkeypatch.setattr(setup, "prior_model", lambda space: "analytic")
    monkeypatch.setattr(setup, "rank", lambda space, model: RANKING)
    return SimpleNamespace(engines={"vllm": None}, search=Search(prior_trials=prior_trials))


def _picks(monkeypatch, prior_trials: int, baselines: list[dict] = ()) -> list[dict]:
    return [params for params, _ in setup._prior_params(_space(monkeypatch, prior_trials), list(baselines), room=10)]


def test_the_picks_are_the_best_ranked_each_two_knobs_from_the_others(monkeypatch) -> None:
    picks = _picks(monkeypatch, prior_trials=4)
    # 4096, 16384 and tp=8 at 8192 are each one knob from the first pick; the predicted-infeasible one ends the
    # ranking's usable part, so three picks of the four asked for
    assert picks == [RANKING[0].params, RANKING[4].params, RANKING[5].params]
    for i, a in enumerate(picks):
        for b in picks[i + 1 :]:
            assert setup._knobs_apart(a, b) >= setup.PRIOR_SPREAD


def test_a_baseline_is_not_a_pick_and_the_budget_caps_them(monkeypatch) -> None:
    assert _picks(monkeypatch, prior_trials=1, baselines=[RANKING[0].params]) == [RANKING[1].params]
    assert _picks(monkeypatch, prior_trials=0) == []


def test_a_warm_started_study_takes_the_rankings_top_as_it_is(monkeypatch) -> None:
    space = _space(monkeypatch, prior_trials=4)
    baseline = {"layout": "tp=1", "max_num_batched_tokens": 2048, "kv_cache_dtype": None}
    monkeypatch.setattr(setup, "baseline_params", lambda space, engine: baseline)

    def prior_picks(warm: bool) -> list[dict]:
        first = setup.first_configurations(space, n_trials=10, warm=warm)
        assert first[0].params == baseline and first[0].marks.get("baseline")
        return [f.params for f in first[1:]]

    assert prior_picks(warm=True) == [r.params for r in RANKING[:4]]
    assert prior_picks(warm=False) == [RANKING[0].params, RANKING[4].params, RANKING[5].params]
