"""GPU leases: disjoint, waiting for enough free GPUs, smaller trials passing a waiting one only for a while."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from autotune.errors import UsageError
from autotune.serving import gpus
from autotune.serving.gpus import GpuPool, parse_gpus


class SteppedClock:
    """The pool's clock, held by the test: time stands still until the test advances it. Each wait between polls
    (a lease that looked and found too few GPUs) is counted per thread, so the test waits for that event, never for
    a guessed while; the wait itself lets the other threads run."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.polls: Counter[str] = Counter()
        self.leasing: set[str] = set()  # threads that began a lease
        self.changed = threading.Condition()

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        with self.changed:
            self.leasing.add(threading.current_thread().name)
            self.changed.notify_all()
        return self.now

    def sleep(self, seconds: float, /) -> None:
        with self.changed:
            self.polls[threading.current_thread().name] += 1
            self.changed.notify_all()
        time.sleep(0.01)  # real time, only to let the other threads run: the clock stands still

    def polled(self, name: str, times: int = 1) -> None:
        """Wait until thread ``name`` has polled ``times`` times in all (it is waiting for GPUs)."""
        self._wait_for(lambda: self.polls[name] >= times, f"{name} never polled {times} time(s)")

    def began(self, name: str) -> None:
        """Wait until thread ``name`` has begun its lease."""
        self._wait_for(lambda: name in self.leasing, f"{name} never began its lease")

    def advance_while(self, name: str, seconds: float) -> None:
        """Once thread ``name`` waits (it polled), advance the clock by ``seconds``; wait until it has polled after."""
        self.polled(name)
        polls = self.polls[name]
        with self.changed:
            self.now += seconds
        self.polled(name, polls + 2)  # one poll may have begun before the advance; the next one began after it

    def _wait_for(self, predicate, failure: str) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout=60), failure  # a guard against a hang, not a timing


class Trials:
    """Trials in threads named after them, each leasing GPUs of ``pool``; ``order`` is who got their GPUs when."""

    def __init__(self, pool: GpuPool) -> None:
        self.pool, self.order, self.leased, self.threads = pool, [], {}, {}

    def start(self, name: str, count: int, typical_trial_s: float | None = None) -> None:
        def trial() -> None:
            with self.pool.lease(count, typical_trial_s) as leased:
                self.order.append(name)
                self.leased[name] = leased

        self.threads[name] = threading.Thread(target=trial, name=name, daemon=True)
        self.threads[name].start()

    def join(self, *names: str) -> None:
        for name in names or tuple(self.threads):
            self.threads[name].join(timeout=60)
            assert not self.threads[name].is_alive(), f"{name} never got its GPUs"


def test_leases_are_disjoint_and_a_larger_one_waits_for_enough(tmp_path) -> None:
    clock = SteppedClock()
    pool = GpuPool(("0", "1", "2"), tmp_path, clock)
    trials = Trials(pool)
    with pool.lease(1) as first, pool.lease(2) as second:
        assert len(first) == 1 and len(second) == 2 and not set(first) & set(second)
        trials.start("waiter", 2)
        clock.polled("waiter")  # it looked, and waits
        assert trials.order == []  # every GPU is held
    trials.join()
    assert len(trials.leased["waiter"]) == 2
    with pytest.raises(UsageError, match="needs 4 GPUs, the worker has 3"), pool.lease(4):
        pass


@pytest.mark.parametrize(("waited_s", "passes"), [(gpus._MIN_PATIENCE_S - 1, True), (gpus._MIN_PATIENCE_S + 1, False)])
def test_a_smaller_trial_passes_a_waiting_one_only_within_its_patience(tmp_path, waited_s, passes) -> None:
    clock = SteppedClock()
    pool = GpuPool(("0", "1"), tmp_path, clock)
    trials = Trials(pool)
    with pool.lease(1):  # one GPU busy: the 2-GPU trial must wait
        trials.start("big", 2)
        clock.advance_while("big", waited_s)
        trials.start("small", 1)
        if passes:
            trials.join("small")  # within its patience the small one took the free GPU at once
            assert trials.order == ["small"]
        else:
            clock.began("small")  # past its patience the big one holds the queue: the small one waits behind it
    trials.join()
    assert trials.order == (["small", "big"] if passes else ["big", "small"])


def test_a_smaller_waiting_trial_steps_aside_for_a_larger_one_that_fits(tmp_path) -> None:
    clock = SteppedClock()
    pool = GpuPool(("0", "1"), tmp_path, clock)
    trials = Trials(pool)
    with pool.lease(2):  # every GPU busy: both wait, the small one first
        trials.start("small", 1)
        clock.polled("small")
        trials.start("big", 2)
        clock.polled("big")
    trials.join()
    assert trials.order == ["big", "small"]  # the free GPUs went to the larger trial that fits them
    assert not list(tmp_path.glob("waiting-*"))  # no trial is left registered as waiting


def test_a_smaller_trial_steps_aside_when_a_larger_ones_gpus_are_about_to_be_free(tmp_path) -> None:
    clock = SteppedClock()
    pool = GpuPool(("0", "1"), tmp_path, clock)
    trials = Trials(pool)
    with pool.lease(1):
        trials.start("big", 2, typical_trial_s=30.0)
        clock.advance_while("big", 30.0)  # the lease has run as long as the study's trials: its GPU is about to be free
        trials.start("small", 1, typical_trial_s=30.0)
        clock.polled("small")  # it looked at the free GPU and left it
        assert trials.order == []  # ... for the 2-GPU trial, which starts as the lease ends
    trials.join()
    assert trials.order == ["big", "small"]


def test_a_dead_waiters_registration_is_ignored(tmp_path) -> None:
    (tmp_path / "waiting-dead").write_text("2")  # left by a worker killed while it waited: unlocked
    pool = GpuPool(("0", "1"), tmp_path)
    with pool.lease(1) as leased:
        assert len(leased) == 1
    assert not (tmp_path / "waiting-dead").exists()


def test_patience_grows_with_the_studys_trial_length(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gpus, "_MIN_PATIENCE_S", 0.0)
    clock = SteppedClock()
    pool = GpuPool(("0", "1"), tmp_path, clock)
    trials = Trials(pool)
    with pool.lease(1):  # the 2-GPU trial waits; trials take 10 s: it lets the small one pass for 80 s
        trials.start("big", 2, typical_trial_s=10.0)
        clock.advance_while("big", 70.0)
        trials.start("small", 1)
        trials.join("small")
        assert trials.order == ["small"]
    trials.join()
    assert trials.order == ["small", "big"]


def test_gpu_sets_are_parsed_with_a_fix_for_bad_input() -> None:
    assert parse_gpus("0,2,3") == ("0", "2", "3") and parse_gpus("4") == ("0", "1", "2", "3")
    for bad in ("0,0", "a,b", "0"):
        with pytest.raises(UsageError):
            parse_gpus(bad)
