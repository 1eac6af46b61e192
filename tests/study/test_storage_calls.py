"""The storage calls one trial makes, counted (not timed): a simulated quickstart study of one worker, in-process,
on SQLite, every RDB storage method call of the main thread counted (a method's calls to others once), and each
batched write (``autotune.records.batch.one_call``) as one call: what benchmarks/workers_stress.py counts.

On this study (15 trials) a trial made 68.1 calls before the batched writes (2026-12-03: 25.7 of them one per user
attribute, 4 for its dashboard note, 2 of which read every trial's note) and makes 48.5 after (10.5 user-attribute
writes, one per ``records.write``; 1 for its note). The pins are a little above, so a regression shows."""

from __future__ import annotations

import collections
import inspect
import threading

import optuna
import pytest

from autotune.records import batch
from autotune.search.workers import run_study
from autotune.testing.spaces import direct_quickstart

TRIALS = 12
CALLS_PER_TRIAL = 51  # after: 48.5 (before: 68.1)
USER_ATTR_CALLS_PER_TRIAL = 11  # one per records.write: 10.5 (before: 25.7, one per attribute)


@pytest.fixture
def counted(monkeypatch) -> collections.Counter:
    """Counts each RDB storage method called on the main thread (not the ones it calls itself) and each batch."""
    counts: collections.Counter = collections.Counter()
    depth = threading.local()

    def counting(name: str, function):
        def call(*args, **kwargs):
            if getattr(depth, "n", 0) or threading.current_thread() is not threading.main_thread():
                return function(*args, **kwargs)
            counts[name] += 1
            depth.n = 1
            try:
                return function(*args, **kwargs)
            finally:
                depth.n = 0

        return call

    for name, method in list(vars(optuna.storages.RDBStorage).items()):
        if inspect.isfunction(method) and not name.startswith("__"):
            monkeypatch.setattr(optuna.storages.RDBStorage, name, counting(name, method))
    monkeypatch.setattr(batch, "one_call", counting("one_call", batch.one_call))
    # the dashboard note's one call, told apart from the record's writes
    note = counting("update_study_system_attrs", batch.update_study_system_attrs)
    monkeypatch.setattr(batch, "update_study_system_attrs", note)
    return counts


def test_one_trial_makes_at_most_the_pinned_number_of_storage_calls(tmp_path, monkeypatch, counted) -> None:
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path / "studies"))
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    space = direct_quickstart(tmp_path, num_prompts=50)
    study = run_study(space, study="calls", n_trials=TRIALS, storage=f"sqlite:///{tmp_path / 'calls.db'}", seed=0)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) >= TRIALS and all(t.state.is_finished() for t in trials)
    per_trial = sum(counted.values()) / len(trials)
    user_attr_calls = (counted["set_trial_user_attr"] + counted["one_call"]) / len(trials)
    assert per_trial <= CALLS_PER_TRIAL, (per_trial, counted.most_common())
    assert user_attr_calls <= USER_ATTR_CALLS_PER_TRIAL, (user_attr_calls, counted.most_common())
    assert counted["get_study_system_attrs"] == 0  # the notes read their own trial's note alone
    assert counted["update_study_system_attrs"] == len(trials)  # one call for each finished trial's note
    print(f"storage calls per trial: {per_trial:.1f}, of which user-attribute writes {user_attr_calls:.1f}")
