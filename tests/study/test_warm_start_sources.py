"""Where ``--warm-start`` finds its sources and in what order, and a warm study that stops with nothing queued.

- a named source (or ``auto``) is looked for in the run's ``--storage`` (its sibling studies are there);
- ``auto`` ranks its sources by similarity: the same space first, then the same workload shape, never by the
  storage's listing order; a mix is no source for a one-workload study;
- ``auto`` that finds nothing names the studies of the same hardware and engines, and ``--warm-start NAME``;
- a warm study stops with no trial left WAITING: its first launches fit its budget, and the warm prior queues no
  pick after the budget's last launch.

The ranking tests make their source studies as ``study run`` describes them (``setup.set_up``, the identity), with
one measured trial each and no engine; the others run the simulator in direct mode (a table: fast).
"""

from __future__ import annotations

import datetime
import io
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from rich.console import Console

from autotune import records
from autotune.cli.warm import warm_sources
from autotune.search import setup as study_setup
from autotune.search.study import RunOptions, prepare_study
from autotune.search.trial_queue import FixedConfiguration
from autotune.search.warm_start import WarmSource, first_configurations, identity_of, snapshot
from autotune.search.workers import run_trials
from autotune.space.files import load_space
from tests.study.conftest import autotune, show
from tests.study.test_budget_launches import table_space

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names
WORKLOAD = {"dataset": "random", "input_len": 16, "output_len": 16, "num_prompts": 8}


def space_text(workload: dict | None = None, seqs: tuple[int, ...] = (2, 8, 32), model: str = "org/Tiny-Model",
               mix: bool = False) -> dict:  # fmt: skip
    space = {
        "name": "warm", "hardware": {"gpus": 0},
        "engines": {"vllm": {"version": "0.32.0", "fixed": {"model": model}}},
        "params": {"max_num_seqs": {"choices": list(seqs), "default": seqs[0]}},
        "objective": {"metrics": [{"name": "total_token_throughput"}]},
        "search": {"prior": "none"},
    }  # fmt: skip
    if mix:
        space["workloads"] = [WORKLOAD | {"name": "chat"}, WORKLOAD | {"name": "long", "input_len": 64}]
    else:
        space["workload"] = workload or WORKLOAD
    return space


def written(directory: Path, name: str, space: dict) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def made_study(url: str, name: str, space_file: Path, best: int, finished_at: datetime.datetime) -> None:
    """A finished study of ``space_file`` as `study run` describes it, whose one measured trial (its best) is
    ``max_num_seqs=best``, ended at ``finished_at``."""
    space = load_space(space_file)
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    records.write_study(study, identity=identity_of(space))
    study_setup.set_up(study, space, space_file, [])
    trial = optuna.trial.create_trial(value=100.0, params={"max_num_seqs": best},
                                      distributions={"max_num_seqs": CategoricalDistribution([2, 8, 32, 64])},
                                      user_attrs=records.stored(launched=True, engine="vllm"),
                                      constraints={"launch": 0.0})  # fmt: skip
    trial.datetime_complete = finished_at
    study.add_trial(trial)


def at(minute: int) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, 12, minute)


@pytest.fixture
def siblings(tmp_path) -> tuple[str, Path]:
    """One storage, listed in this order: a mix of the same model (the highest-valued, and newest, of all), a study
    of another workload shape, one of another space of the same shape, and last the sibling of the very same space
    (finished first of all: neither the listing nor recency puts it first)."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    mine = written(tmp_path, "mine", space_text())
    made_study(url, "mix", written(tmp_path, "mix", space_text(mix=True)), best=32, finished_at=at(50))
    longer = space_text(WORKLOAD | {"input_len": 512})
    made_study(url, "other-shape", written(tmp_path, "other-shape", longer), best=32, finished_at=at(40))
    made_study(url, "same-shape", written(tmp_path, "same-shape", space_text(seqs=(2, 8, 32, 64))), best=2,
               finished_at=at(30))  # fmt: skip
    made_study(url, "sibling", mine, best=8, finished_at=at(10))
    return url, mine


def test_auto_ranks_the_same_space_first_then_the_same_workload_shape_and_never_takes_a_mix(siblings) -> None:
    url, mine = siblings
    space = load_space(mine)
    found = warm_sources("auto", url, space, "new", Console(file=io.StringIO()), space_path=mine)
    assert [s.study for s in found] == ["sibling", "same-shape", "other-shape"]
    # every source's best is 1.0 of itself: the most alike source's best is measured first
    snap = snapshot(space, list(found))
    baseline = FixedConfiguration({"max_num_seqs": 2}, records.stored(baseline=True))
    assert first_configurations(space, snap, [baseline])[0].params == {"max_num_seqs": 8}
    assert snap.measurements[0].source.startswith("sibling:")


def test_auto_that_finds_nothing_names_the_studies_of_the_same_hardware_and_engines(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    made_study(url, "llama", written(tmp_path, "llama", space_text(model="org/Llama-3")), best=8, finished_at=at(1))
    made_study(url, "mix", written(tmp_path, "mix", space_text(mix=True)), best=8, finished_at=at(2))
    other_hardware = space_text() | {"hardware": {"gpus": 8, "gpu": "H200", "gpu_memory_gb": 141}}
    made_study(url, "h200", written(tmp_path, "h200", other_hardware), best=8, finished_at=at(3))
    out = io.StringIO()
    mine = written(tmp_path, "mine", space_text())
    assert warm_sources("auto", url, load_space(mine), "new", Console(file=out, width=400), space_path=mine) == ()
    line = out.getvalue()
    assert "starting cold" in line and "llama (model llama-3)" in line and "mix (2 workloads)" in line
    assert "h200" not in line  # another hardware: not a study to start from
    assert line.rstrip().endswith("to start from one of them: --warm-start NAME")


@pytest.mark.parametrize("spec", ["a", "auto"])
def test_a_named_or_auto_source_is_found_in_the_runs_storage(tmp_path, monkeypatch, spec) -> None:
    """Called as `study run --storage URL --warm-start a` calls it: the source is in URL, not in studies/a.db."""
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path / "studies"))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    mine = written(tmp_path, "mine", space_text())
    made_study(url, "a", mine, best=8, finished_at=at(1))
    found = warm_sources(spec, None, load_space(mine), "b", Console(file=io.StringIO()), run_storage=url,
                         space_path=mine)  # fmt: skip
    assert found == (WarmSource(storage=url, study="a"),)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> tuple[Path, str]:
    """Study ``a`` on the table simulator, 6 launches, in a storage of its own: (its space file, the storage)."""
    directory = tmp_path_factory.mktemp("warm-table")
    space_file = table_space(directory, [64, 256, 1024, 4096], [4096, 8192])
    url = f"sqlite:///{directory / 'shared.db'}"
    run_trials(prepare_study(load_space(space_file), space_file, RunOptions("a", url, directory, n_trials=6,
                                                                            heartbeat_s=0, seed=1)))  # fmt: skip
    return space_file, url


@pytest.mark.slow
def test_study_run_takes_its_warm_start_from_its_own_storage(earlier, studies) -> None:
    """`study run --storage URL --warm-start a`: a is in URL (nothing under studies/)."""
    space_file, url = earlier
    done = autotune("study", "run", str(space_file), "--study", "b", "--storage", url, "--warm-start", "a",
                    "--n-trials", "1", "--seed", "1", studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warm start from a" in done.stderr
    assert show("b", studies, "--storage", url)["trials"][0]["warm_of"].startswith("a:")


@pytest.mark.slow
@pytest.mark.parametrize("n_trials", [2, 5], ids=["budget-under-the-first-launches", "warm-prior-after-the-last"])
def test_a_warm_study_stops_with_no_trial_left_waiting(earlier, n_trials) -> None:
    """Budget 2: the sources' best, the baseline and two runners-up were queued (two left WAITING). Budget 5: after
    the fifth launch the warm prior queued its next pick (left WAITING)."""
    space_file, url = earlier
    options = RunOptions(f"b{n_trials}", url, space_file.parent, n_trials=n_trials, heartbeat_s=0, seed=1,
                         warm_start=(WarmSource(storage=url, study="a"),))  # fmt: skip
    study = run_trials(prepare_study(load_space(space_file), space_file, options))
    assert [t.number for t in study.trials if t.state == TrialState.WAITING] == []
    assert sum(1 for t in study.trials if t.user_attrs.get("launched")) == n_trials
    assert study.trials[0].user_attrs.get("warm_of", "").startswith("a:")  # still warm-started: the best first
