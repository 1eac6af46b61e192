"""GPU leases: disjoint, waiting for enough free GPUs, smaller trials passing a waiting one only for a while."""

from __future__ import annotations

import threading
import time

import pytest

from autotune import gpus
from autotune.errors import UsageError
from autotune.gpus import GpuPool, parse_gpus


def test_leases_are_disjoint_and_a_larger_one_waits_for_enough(tmp_path) -> None:
    pool = GpuPool(("0", "1", "2"), tmp_path)
    with pool.lease(1) as first, pool.lease(2) as second:
        assert len(first) == 1 and len(second) == 2 and not set(first) & set(second)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(_hold(pool, 2)))
        waiter.start()
        time.sleep(0.5)
        assert not got  # every GPU is held
    waiter.join(timeout=10)
    assert len(got[0]) == 2
    with pytest.raises(ValueError, match="needs 4 GPUs, the worker has 3"), pool.lease(4):
        pass


@pytest.mark.parametrize(("patience_s", "passes"), [(30.0, True), (0.0, False)])
def test_a_smaller_trial_passes_a_waiting_one_only_within_its_patience(tmp_path, monkeypatch, patience_s, passes):
    monkeypatch.setattr(gpus, "_MIN_PATIENCE_S", patience_s)
    pool = GpuPool(("0", "1"), tmp_path)
    order: list[str] = []
    with pool.lease(1):  # one GPU busy: the 2-GPU trial must wait
        big = threading.Thread(target=lambda: (_hold(pool, 2), order.append("big")))
        big.start()
        time.sleep(0.5)  # the big one is waiting now
        small = threading.Thread(target=lambda: (_hold(pool, 1), order.append("small")))
        small.start()
        time.sleep(1.0)
        assert (order == ["small"]) is passes  # within its patience the small one took the free GPU at once
    big.join(timeout=10)
    small.join(timeout=10)
    assert sorted(order) == ["big", "small"]


def test_a_smaller_waiting_trial_steps_aside_for_a_larger_one_that_fits(tmp_path) -> None:
    pool = GpuPool(("0", "1"), tmp_path)
    order: list[str] = []
    with pool.lease(2):  # every GPU busy: both wait, the small one first
        small = threading.Thread(target=lambda: (_hold(pool, 1), order.append("small")))
        small.start()
        time.sleep(0.5)
        big = threading.Thread(target=lambda: (_hold(pool, 2, seconds=1.0), order.append("big")))
        big.start()
        time.sleep(0.5)
    small.join(timeout=10)
    big.join(timeout=10)
    assert order == ["big", "small"]  # the free GPUs went to the larger trial that fits them
    assert not list(tmp_path.glob("waiting-*"))  # no trial is left registered as waiting


def test_a_smaller_trial_steps_aside_when_a_larger_ones_gpus_are_about_to_be_free(tmp_path) -> None:
    pool = GpuPool(("0", "1"), tmp_path)
    order: list[str] = []
    with pool.lease(1) as (held,):
        # this lease has run as long as the study's trials take (30 s, give or take 3): its GPU is about to be free
        (tmp_path / f"gpu-{held}.lock").write_text(f"{time.time() - 30.0:.3f}")
        big = threading.Thread(target=lambda: (_hold(pool, 2, typical_trial_s=30.0), order.append("big")))
        big.start()
        time.sleep(0.5)
        small = threading.Thread(target=lambda: (_hold(pool, 1, typical_trial_s=30.0), order.append("small")))
        small.start()
        time.sleep(1.0)
        assert order == []  # the free GPU was left for the 2-GPU trial, which starts as the lease ends
    big.join(timeout=10)
    small.join(timeout=10)
    assert order == ["big", "small"]


def test_a_dead_waiters_registration_is_ignored(tmp_path) -> None:
    (tmp_path / "waiting-dead").write_text("2")  # left by a worker killed while it waited: unlocked
    pool = GpuPool(("0", "1"), tmp_path)
    with pool.lease(1) as leased:
        assert len(leased) == 1
    assert not (tmp_path / "waiting-dead").exists()


def test_patience_grows_with_the_studys_trial_length(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gpus, "_MIN_PATIENCE_S", 0.0)
    pool = GpuPool(("0", "1"), tmp_path)
    order: list[str] = []
    with pool.lease(1):  # the 2-GPU trial waits; trials take 10 s: it lets the small one pass for 40 s
        big = threading.Thread(target=lambda: (_hold(pool, 2, typical_trial_s=10.0), order.append("big")))
        big.start()
        time.sleep(0.5)
        small = threading.Thread(target=lambda: (_hold(pool, 1), order.append("small")))
        small.start()
        small.join(timeout=5)
        assert order == ["small"]
    big.join(timeout=10)
    assert order == ["small", "big"]


def _hold(pool: GpuPool, count: int, seconds: float = 0.2, typical_trial_s: float | None = None) -> tuple[str, ...]:
    with pool.lease(count, typical_trial_s) as leased:
        time.sleep(seconds)
        return leased


def test_gpu_sets_are_parsed_with_a_fix_for_bad_input() -> None:
    assert parse_gpus("0,2,3") == ("0", "2", "3") and parse_gpus("4") == ("0", "1", "2", "3")
    for bad in ("0,0", "a,b", "0"):
        with pytest.raises(UsageError):
            parse_gpus(bad)
