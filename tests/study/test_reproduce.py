"""`study best` prints commands that reproduce the measurement: its launch, run as printed, measured with the printed
`autotune bench` line gives the trial's throughput; a launch that needs an API key is measured with it (readiness
and benchmark), and custom headers and body fields reach the server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.evidence.export import shell_script
from autotune.serving.process import free_port
from tests.conftest import REPO
from tests.study.conftest import ENGINE, autotune, show, write_space

KEY = "sk-reproduce-123456"


def reproduce_space(tmp_path: Path, env: dict | None = None, **workload) -> Path:
    """One launch configuration swept over two loads; 24 prompts of 48 tokens at 20 ms a token, so that a run takes
    seconds and a busy machine's scheduling delays (milliseconds a request) are a small share of it."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": "word " * 20, "output_len": 48}) + "\n" for _ in range(24)))
    timing = {"SCRIPTED_ITL_MS": "20", "SCRIPTED_TTFT_MS": "40"}
    path = write_space(tmp_path, env=timing | (env or {}), params={"max_num_seqs": {"choices": [8], "default": 8},
                                                  "max_concurrency": {"choices": [2, 4], "default": 2}})  # fmt: skip
    space = yaml.safe_load(path.read_text())
    space["engines"]["vllm"]["fixed"]["dtype"] = "bfloat16"
    space["workload"] |= {"path": str(prompts), "num_prompts": 24, "output_len": 48} | workload
    path.write_text(yaml.safe_dump(space))
    return path


@contextlib.contextmanager
def launched_as_printed(best: dict, workdir: Path, env: dict) -> Iterator[str]:
    """The printed launch, run by a shell as a user would paste it; yields its address once it serves."""
    port = best["launch"]["argv"][best["launch"]["argv"].index("--port") + 1]
    workdir.mkdir()
    process = subprocess.Popen(["bash", "-c", shell_script(best["launch"])], cwd=workdir, env=os.environ | env,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            assert process.poll() is None, "the printed launch exited"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def run_printed_bench(bench: list[str], env: dict) -> subprocess.CompletedProcess:
    assert bench[:2] == ["autotune", "bench"]
    return subprocess.run([sys.executable, "-m", "autotune", *bench[1:], "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=os.environ | env)  # fmt: skip


def best_json(studies: Path, port: int, env: dict | None = None) -> dict:
    done = autotune("study", "best", "--json", "--port", str(port), studies=studies, env_extra=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_printed_bench_line_reproduces_the_trials_throughput(tmp_path, studies) -> None:
    space = reproduce_space(tmp_path)
    done = autotune("study", "run", str(space), "--n-trials", "1", "--executable", ENGINE, studies=studies)
    assert done.returncode == 0, done.stderr
    trial = show("scripted", studies)["trials"][0]
    assert trial["load"] == {"max_concurrency": 4} and trial["feasible"]
    port = free_port()
    best = best_json(studies, port)
    bench = best["bench"]
    # every workload and client setting of the measured trial is on the line, the sweep's load included
    for flag, value in (("--max-concurrency", "4"), ("--num-prompts", "24"), ("--output-len", "48"),
                        ("--dataset", "jsonl"), ("--seed", "0"), ("--warmup-requests", "0"), ("--engine", "vllm"),
                        ("--model", "tiny"), ("--base-url", f"http://127.0.0.1:{port}")):  # fmt: skip
        assert bench[bench.index(flag) + 1] == value, (flag, bench)
    assert "--ignore-eos" in bench and best["api_key_env"] is None
    with launched_as_printed(best, tmp_path / "pasted", {}):
        measured = run_printed_bench(bench, {})
    assert measured.returncode == 0, measured.stderr
    result = json.loads(measured.stdout)
    assert result["completed"] == 24
    stored = best["values"][0]
    print(f"trial {stored:.1f} tok/s, the printed bench line {result['total_token_throughput']:.1f} tok/s")
    assert abs(result["total_token_throughput"] / stored - 1) < 0.05, (result["total_token_throughput"], stored)


def test_a_launch_with_an_api_key_is_measured_with_it_and_its_headers_and_body_fields(tmp_path, studies) -> None:
    space = reproduce_space(tmp_path, env={"SCRIPTED_REQUIRE_HEADER": "x-team:gpu"}, headers={"x-team": "gpu"},
                            extra_body={"temperature": 0.5})  # fmt: skip
    key = {"VLLM_API_KEY": KEY}  # in the tuner's environment, as a user exports it; the engine inherits it
    done = autotune("study", "run", str(space), "--n-trials", "1", "--executable", ENGINE, studies=studies,
                    env_extra=key)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trial = show("scripted", studies)["trials"][0]
    # ready and measured: readiness probes and requests carried the key and the header (the server refuses others)
    assert trial["feasible"] and trial["values"][0] > 0, trial
    log = next((studies / "scripted").rglob("server.log")).read_text()
    assert "'temperature'" in log and "'authorization'" in log and "'x-team'" in log, log
    assert KEY not in log
    best = best_json(studies, free_port())
    assert KEY not in json.dumps(best)
    assert best["api_key_env"] == "VLLM_API_KEY" and "VLLM_API_KEY" in best["launch"]["secret_env"]
    bench = best["bench"]
    assert bench[bench.index("--api-key-env") + 1] == "VLLM_API_KEY"
    assert bench[bench.index("--header") + 1] == "x-team:gpu"
    assert json.loads(bench[bench.index("--extra-body") + 1]) == {"temperature": 0.5}
    with launched_as_printed(best, tmp_path / "pasted", key):
        without_key = run_printed_bench(bench, {"VLLM_API_KEY": ""})
        with_key = run_printed_bench(bench, key)
    assert without_key.returncode == 1 and "401" in without_key.stderr
    assert with_key.returncode == 0 and json.loads(with_key.stdout)["completed"] == 24, with_key.stderr


def test_study_best_prints_the_vllm_bench_serve_equivalent(tmp_path, studies) -> None:
    done = autotune("study", "run", str(reproduce_space(tmp_path)), "--n-trials", "1", "--executable", ENGINE,
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = autotune("study", "best", "--port", "8123", studies=studies)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    vllm_line = next(line for line in lines if line.startswith(f"{ENGINE} bench serve "))  # the vLLM it launched
    for expected in ("--max-concurrency 4", "--dataset-name custom", "--custom-output-len 48", "--num-prompts 24",
                     "--ignore-eos", "--base-url http://127.0.0.1:8123", "--served-model-name tiny"):  # fmt: skip
        assert expected in vllm_line, (expected, vllm_line)
    assert any("--port 8123" in line for line in lines)


@pytest.mark.parametrize("header", ["Authorization: Bearer sk-1", "X-Api-Key: sk-2"])
def test_a_credential_in_the_workload_headers_is_refused_with_the_fix(tmp_path, studies, header) -> None:
    name, _, value = header.partition(": ")
    done = autotune("space", "show", str(reproduce_space(tmp_path, headers={name: value})), studies=studies)
    assert done.returncode == 2 and "workload.headers" in done.stderr and "VLLM_API_KEY" in done.stderr, done.stderr
    assert value not in done.stderr  # the credential is not echoed
