"""`--n-trials N` buys N launches: duplicates and rejected configurations launch nothing and do not count; a
study whose space is exhausted stops with a line that says so. On the simulator in direct mode (a table), so fast.

The space: max_num_seqs × max_num_batched_tokens, where vLLM's static rule `batched-tokens-cover-seqs` refuses the
configurations whose batched tokens are fewer than their sequences (the baseline among them: a rejection every time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from autotune.search import budget
from autotune.search.study import RunOptions, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space
from tests.conftest import REPO
from tests.study.conftest import autotune, show


def table_space(tmp_path: Path, seqs: list[int], batched: list[int]) -> Path:
    """A simulated space whose baseline (the largest max_num_seqs, the fewest batched tokens) breaks a static rule."""
    table = tmp_path / "t.csv"
    rows = ["max_num_seqs,max_num_batched_tokens,max_concurrency,status,output_throughput,total_token_throughput,"
            "mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms"]  # fmt: skip
    rows += [f"{s},{b},8,ok,{s + b},{s + b},1,1,1,1" for s in seqs for b in batched]
    table.write_text("\n".join(rows) + "\n")
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({
        "name": "budget",
        "hardware": {"gpus": 8, "gpu_memory_gb": 141, "gpu": "H200"},
        "engines": {"vllm": {"version": "0.13.0", "fixed": {"model": "deepseek-ai/DeepSeek-V3", "tp": 8}}},
        "params": {"max_num_seqs": {"choices": seqs, "default": max(seqs)},
                   "max_num_batched_tokens": {"choices": batched, "default": min(batched)}},
        "workload": {"dataset": "random", "input_len": 16, "output_len": 8, "num_prompts": 8, "max_concurrency": 8},
        "simulate": {"performance_model": "table", "table": str(table), "mode": "direct"},
        "search": {"sampler": "random", "prior": "none"},
    }))  # fmt: skip
    return path


def kinds(trials: list) -> tuple[int, int, int]:
    """(launches, rejections, duplicates) of finished trials, from their attributes."""
    done = [t for t in trials if t.state.is_finished()]
    duplicates = {t.number for t in done if "duplicate_of" in t.user_attrs}
    rejected = {t.number for t in done if t.user_attrs.get("failure_kind") == "rejected"} - duplicates
    return sum(1 for t in done if t.user_attrs.get("launched")), len(rejected), len(duplicates)


def run(space_file: Path, tmp_path: Path, **options) -> optuna.Study:
    options = RunOptions("budget", f"sqlite:///{tmp_path}/b.db", tmp_path, heartbeat_s=0, **options)
    return run_trials(prepare_study(load_space(space_file), space_file, options))


def test_n_trials_counts_launches_not_duplicates_or_rejections(tmp_path) -> None:
    # 4 × 4 configurations, 6 refused by the static rule: 10 to launch, 6 asked for, drawn at random
    space = table_space(tmp_path, [64, 256, 1024, 4096], [1024, 2048, 4096, 8192])
    study = run(space, tmp_path, n_trials=6, seed=3)
    launches, rejected, duplicates = kinds(study.trials)
    assert rejected >= 1 and duplicates >= 1  # both happened (the baseline is a rejection)
    assert launches == 6  # and neither took a launch from the budget
    assert study.trials[0].user_attrs["failure_kind"] == "rejected" and budget.study_budget(study) == 6
    assert budget.count(study.trials) == budget.BudgetCount(6, rejected, duplicates)
    # the same budget again runs none; --more 2 adds two launches
    assert len(run(space, tmp_path, n_trials=6, seed=4).trials) == len(study.trials)
    assert kinds(run(space, tmp_path, n_trials=6, more_trials=2, seed=5).trials)[0] == 8


def test_an_exhausted_space_stops_with_a_line_that_says_so(tmp_path, studies) -> None:
    # 2 × 3 configurations, 2 refused by the static rule: 4 to launch, 9 asked for
    space = table_space(tmp_path, [256, 4096], [1024, 2048, 8192])
    done = autotune("study", "run", str(space), "--n-trials", "9", "--seed", "1", studies=studies)
    assert done.returncode == 0, done.stderr
    report = show("budget", studies)
    finished = [t for t in report["trials"] if t["state"] != "WAITING"]
    launched = [t for t in finished if t["launched"]]
    assert len(launched) == 4  # every launchable configuration once, none twice
    assert len({tuple(sorted(t["params"].items())) for t in launched}) == 4
    rejected = sum(1 for t in finished if t["failure_kind"] == "rejected" and t["duplicate_of"] is None)
    duplicates = sum(1 for t in finished if t["duplicate_of"] is not None)
    line = f"space exhausted: every configuration was tried (4 launches, {rejected} rejected, {duplicates} duplicates)"
    assert line in done.stderr
    assert report["budget"] == {"budget": 9, "launches": 4, "rejected": rejected, "duplicates": duplicates}
    listing = autotune("study", "show", "--study", "budget", studies=studies).stdout
    assert f"trials: 4 launches of a budget of 9; {rejected} rejected before launch and {duplicates} duplicates" in (
        " ".join(listing.split())
    )
    again = autotune("study", "run", str(space), "--more", "3", "--seed", "2", studies=studies)  # nothing left to try
    assert again.returncode == 0 and "space exhausted: every configuration was tried (4 launches" in again.stderr


def test_a_space_too_large_to_enumerate_stops_after_a_run_of_non_launches(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(budget, "ENUMERATION_LIMIT", 1)  # as if the space were too large to enumerate
    monkeypatch.setattr(budget, "NON_LAUNCH_RUN_LIMIT", 8)  # a shorter run of non-launches: a faster test
    space = table_space(tmp_path, [256, 4096], [1024, 2048, 8192])
    study = run(space, tmp_path, n_trials=9, seed=1)
    launches, rejected, duplicates = kinds(study.trials)
    assert launches == 4 and rejected + duplicates >= budget.NON_LAUNCH_RUN_LIMIT
    assert not any(t.user_attrs.get("launched") for t in study.trials[-budget.NON_LAUNCH_RUN_LIMIT :])
    line = budget.stop_line(study, budget.LaunchCatalogue(load_space(space)))
    # it says what the run of non-launches was instead (issue #48: never stop quietly while budget remains)
    last = study.trials[-budget.NON_LAUNCH_RUN_LIMIT :]
    dup = sum(1 for t in last if "duplicate_of" in t.user_attrs)
    refused = [
        t.user_attrs["rejected_by"]
        for t in last
        if "rejected_by" in t.user_attrs and "duplicate_of" not in t.user_attrs
    ]
    why = "; ".join(
        ([f"{dup} duplicate(s) of measured configurations"] if dup else [])
        + ([f"{len(refused)} refused by rules: batched-tokens-cover-seqs {len(refused)}"] if refused else [])
    )
    assert set(refused) <= {"batched-tokens-cover-seqs"}
    assert line == (f"space exhausted: the last {budget.NON_LAUNCH_RUN_LIMIT} trials in a row found no untried "
                    f"configuration ({why}); the space is too large to count what was not tried "
                    f"(4 launches, {rejected} rejected, {duplicates} duplicates)")  # fmt: skip


def test_two_workers_on_one_sqlite_study_make_exactly_the_launches_asked_for(tmp_path) -> None:
    workers = 2
    # 6 × 4 configurations, 9 refused by the static rule: 15 to launch, 12 asked for, so duplicates are likely
    space = table_space(tmp_path, [64, 256, 1024, 2048, 4096, 16384], [1024, 2048, 4096, 8192])
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies"), "AUTOTUNE_HEARTBEAT_S": "1"}
    argv = [sys.executable, "-m", "autotune", "study", "run", str(space), "--n-trials", "12"]
    procs = [subprocess.Popen([*argv, "--seed", str(seed)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in range(workers)]  # fmt: skip
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, outputs
    study = optuna.load_study(study_name="budget", storage=f"sqlite:///{tmp_path}/studies/budget.db")
    launches, rejected, _ = kinds(study.trials)
    assert launches == 12 and rejected >= 1  # the rejected baseline gave its slot back
    assert len({t.user_attrs["worker"] for t in study.trials if t.state.is_finished()}) == workers  # all took part
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "FAIL")]
    keys = [t.user_attrs["config_key"] for t in study.trials if t.user_attrs.get("launched")]
    assert len(keys) == len(set(keys))  # no configuration launched twice
