"""`autotune bench` end to end: vllm bench's result fields, exit codes, one-line errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.cli import app
from autotune.serving.process import free_port

runner = CliRunner()
VLLM_RESULT_FIELDS = [
    "date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests", "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors",
] + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")]  # fmt: skip


def test_bench_json_and_saved_result(scripted_server, tokenizer_file, tmp_path) -> None:
    saved = tmp_path / "result.json"
    result = runner.invoke(app, ["bench", "--base-url", scripted_server.base_url, "--model", "scripted", "--tokenizer",
                                 str(tokenizer_file), "--input-len", "16", "--output-len", "8", "--num-prompts", "20",
                                 "--goodput", "ttft:1000", "--save-result", str(saved), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert set(VLLM_RESULT_FIELDS) <= set(printed)
    assert printed == json.loads(saved.read_text())
    assert printed["completed"] == 20 and printed["total_output_tokens"] == 160 and printed["request_rate"] == "inf"


def test_bench_prints_the_block(scripted_server, tokenizer_file) -> None:
    result = runner.invoke(app, ["bench", "--base-url", scripted_server.base_url, "--model", "s", "--tokenizer",
                                 str(tokenizer_file), "--input-len", "8", "--output-len", "4", "--num-prompts", "5"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("============ Serving Benchmark Result ============")


def test_unreachable_server_is_one_line_and_exit_1() -> None:
    result = runner.invoke(app, ["bench", "--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m"])
    assert result.exit_code == 1
    assert result.stderr.startswith("autotune: error: server unreachable") and result.stderr.count("\n") == 1


def test_every_request_failing_is_exit_1(scripted_server, tmp_path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "FAULT:500"}\n{"prompt": "FAULT:404"}\n')
    result = runner.invoke(app, ["bench", "--base-url", scripted_server.base_url, "--model", "s", "--dataset", "jsonl",
                                 "--dataset-path", str(path), "--num-prompts", "2"])  # fmt: skip
    assert result.exit_code == 1
    assert "every request failed" in result.stderr and "http_500" in result.stderr


def test_bad_options_are_usage_errors(scripted_server) -> None:
    base = ["bench", "--base-url", scripted_server.base_url, "--model", "s"]
    for extra, fragment in [(["--goodput", "latency:5"], "--goodput"), (["--range-ratio", "2"], "--range-ratio"),
                            (["--dataset", "sharegpt"], "dataset-path")]:  # fmt: skip
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert fragment in result.stderr
