"""A small study with one trial of each outcome, in a second: a replayed performance table (the simulator's direct
mode, no server process) whose rows measure, miss the SLO and crash, in an order that also makes a learned-rule
rejection and a duplicate."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from autotune.search.study import RunOptions, default_storage, prepare_study
from autotune.search.workers import run_trials
from autotune.space.files import load_space

NAME = "outcomes"
CRASH_LINE = "ValueError: kv_cache_dtype fp8 is not supported by this attention backend"
SLO_MS = 100.0
# the p99 TTFT of max_num_seqs 128 is over the SLO; fp8 KV cache crashes at start-up
TABLE = (
    "max_num_seqs,kv_cache_dtype,status,message,output_throughput,total_token_throughput,mean_ttft_ms,p99_ttft_ms,"
    "mean_tpot_ms,p99_tpot_ms\n"
    "64,,ok,,900,1800,40,60,10,20\n"
    "128,,ok,,1100,2200,120,250,10,20\n"
    f"64,fp8,crash,{CRASH_LINE},,,,,,\n"
    f"128,fp8,crash,{CRASH_LINE},,,,,,\n"
)
# in this order: measured, crashed (teaches a rule on fp8), rejected by that rule, a duplicate, misses the SLO (the
# last configuration: once every one was tried the study stops)
ORDER = [(64, None), (64, "fp8"), (128, "fp8"), (64, None), (128, None)]


def outcome_study(studies: Path) -> optuna.Study:
    """Run the study under ``studies`` (as `autotune study run` would lay it out) and return it."""
    studies.mkdir(parents=True, exist_ok=True)
    table = studies / "table.csv"
    table.write_text(TABLE)
    space_file = studies / "space.yaml"
    space_file.write_text(yaml.safe_dump({
        "name": NAME,
        "hardware": {"gpus": 8, "gpu_memory_gb": 141, "gpu": "H200"},
        "engines": {"vllm": {"version": "0.13.0", "fixed": {"model": "deepseek-ai/DeepSeek-V3", "tp": 8}}},
        "params": {"max_num_seqs": {"choices": [64, 128], "default": 64},
                   "kv_cache_dtype": {"choices": [None, "fp8"], "default": None}},
        # 8 requests of 64 + 8 tokens: the rows are within what their latencies allow (Little's law: 8 * 72 tokens
        # in 40 + 7 * 10 ms is 5236 tok/s; the table model cuts a row above that)
        "workload": {"dataset": "random", "input_len": 64, "output_len": 8, "num_prompts": 8, "max_concurrency": 8},
        "objective": {"metrics": [{"name": "total_token_throughput"}], "slo": {"p99_ttft_ms": SLO_MS}},
        "simulate": {"performance_model": "table", "table": str(table), "mode": "direct"},
        "search": {"prior": "none"},
    }))  # fmt: skip
    space = load_space(space_file)
    options = RunOptions(NAME, default_storage(NAME, studies), studies, n_trials=len(ORDER), heartbeat_s=0)
    prepared = prepare_study(space, space_file, options)  # the baseline queued first, then the others in order
    for seqs, kv_cache_dtype in ORDER[1:]:
        prepared.study.enqueue_trial({"max_num_seqs": seqs, "kv_cache_dtype": kv_cache_dtype})
    return run_trials(prepared)
