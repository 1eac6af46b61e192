"""The load sweep's choice of levels: the SLO boundary found, the incumbent bound respected, failures monotone."""

from __future__ import annotations

import pytest

from autotune.search.sweep import LoadResult, LoadSweep
from autotune.space.schema import Objective

LEVELS = [{"max_concurrency": c} for c in (8, 16, 32, 64, 128, 256, 512, 1024)]
SLO = Objective(slo={"p99_tpot_ms": 50})


def run(sweep: LoadSweep, boundary: int, throughput=lambda i: 1000.0 * (i + 1), fails_from: int | None = None):
    """Drive ``sweep`` on a landscape feasible up to level ``boundary`` (TPOT 40 ms there, 60 ms above)."""
    while (index := sweep.next_level()) is not None:
        if fails_from is not None and index >= fails_from:
            sweep.add(index, LoadResult(LEVELS[index], failure="oom", reason="out of memory"))
            continue
        tpot = 40.0 if index <= boundary else 60.0
        result = {"total_token_throughput": throughput(index), "p99_tpot_ms": tpot}
        sweep.add(index, LoadResult(LEVELS[index], result))
    return sweep


@pytest.mark.parametrize("boundary", range(-1, 8))
@pytest.mark.parametrize("start", [None, 0, 3, 7])
def test_the_heaviest_feasible_load_is_found_from_any_start(boundary, start) -> None:
    sweep = run(LoadSweep(LEVELS, SLO, start=start), boundary)
    best = sweep.best()
    if boundary < 0:
        assert best is None and sweep.closest() is not None and sweep.closest().violations["slo:p99_tpot_ms"] > 0
    else:
        assert best.load == LEVELS[boundary] and best.values == [1000.0 * (boundary + 1)]
    assert len(sweep.measured) <= 5  # never the whole grid of 8


def test_without_slos_every_load_is_measured_heaviest_first() -> None:
    sweep = LoadSweep(LEVELS, Objective())
    order = []
    while (index := sweep.next_level()) is not None:
        order.append(index)
        sweep.add(index, LoadResult(LEVELS[index], {"total_token_throughput": 10.0 * index}))
    assert order == list(range(7, -1, -1)) and sweep.best().load == LEVELS[7]


def test_a_configuration_that_cannot_beat_the_incumbent_stops_after_one_benchmark() -> None:
    # its heaviest load bounds every lighter one's throughput: 8000 < 10000
    sweep = run(LoadSweep(LEVELS, SLO, incumbent=10_000.0), boundary=3)
    assert list(sweep.measured) == [7]
    # one that could still lead is swept to its boundary
    sweep = run(LoadSweep(LEVELS, SLO, incumbent=3_500.0), boundary=3)
    assert sweep.best().load == LEVELS[3]


def test_a_failed_load_makes_every_heavier_one_infeasible_and_is_reported() -> None:
    sweep = run(LoadSweep(LEVELS, SLO), boundary=6, fails_from=4)
    assert sweep.best().load == LEVELS[3] and sweep.lowest_failure() == 4
    assert all(i < 4 or sweep.measured[i].failure == "oom" for i in sweep.measured)


def test_a_cap_from_out_of_memory_dominance_is_never_exceeded() -> None:
    sweep = run(LoadSweep(LEVELS, SLO, cap=2), boundary=6)
    assert max(sweep.measured) <= 1 and sweep.best().load == LEVELS[1]


@pytest.mark.parametrize("peak", range(8))
@pytest.mark.parametrize("start", [None, 0, 3, 7])
def test_a_throughput_that_falls_with_load_has_its_peak_found_below_the_slo_boundary(peak, start) -> None:
    # a long-prompt workload past the engine's KV capacity: throughput peaks at ``peak`` and falls heavier (more
    # slowly than it rose: a peak between two levels measured alike is taken for a plateau, and not looked for)
    def throughput(i: int) -> float:
        return 5000.0 - (700.0 * (peak - i) if i <= peak else 400.0 * (i - peak))

    sweep = run(LoadSweep(LEVELS, SLO, start=start), boundary=6, throughput=throughput)
    expected = min(peak, 6)
    assert sweep.best().load == LEVELS[expected] and sweep.best().values == [throughput(expected)]


class BoundedOnly(LoadSweep):
    """The sweep without its search for a peak below the boundary."""

    def _toward_peak(self) -> None:
        return None


@pytest.mark.parametrize("boundary", range(-1, 8))
@pytest.mark.parametrize("start", [None, 0, 3, 7])
def test_a_throughput_that_grows_with_load_costs_no_level_more(boundary, start) -> None:
    noisy = lambda i: 1000.0 * (i + 1) * (1.0 if i % 2 else 0.98)  # noqa: E731 (noise under FALL: no fall)
    for throughput in (lambda i: 1000.0 * (i + 1), noisy):
        plain = run(BoundedOnly(LEVELS, SLO, start=start), boundary, throughput)
        sweep = run(LoadSweep(LEVELS, SLO, start=start), boundary, throughput)
        assert list(sweep.measured) == list(plain.measured)
