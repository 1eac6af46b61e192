"""Datasets: exact random lengths with the model's tokenizer, vllm bench's ShareGPT filter, JSONL prompts."""

from __future__ import annotations

import json
import os

import pytest

from autotune.bench.datasets import build_requests, load_tokenizer
from autotune.errors import UsageError
from autotune.space.schema import Workload


@pytest.fixture(scope="module")
def tokenizer(tokenizer_file):
    return load_tokenizer(tokenizer_file)


def test_random_prompts_have_exact_lengths(tokenizer) -> None:
    workload = Workload(dataset="random", input_len=100, output_len=20, num_prompts=40, range_ratio=0.25, prefix_len=10)
    requests = build_requests(workload, tokenizer)
    for request in requests:
        assert len(tokenizer.encode(request.prompt, add_special_tokens=True).ids) == request.prompt_len
        assert 10 + 75 <= request.prompt_len <= 10 + 125 and 15 <= request.output_len <= 25
    assert len({r.prompt_len for r in requests}) > 5  # the range ratio spreads them
    shared = os.path.commonprefix([r.prompt for r in requests])
    assert len(tokenizer.encode(shared, add_special_tokens=False).ids) >= 8  # the 10-token prefix, up to its last merge
    unprefixed = build_requests(workload.model_copy(update={"prefix_len": 0}), tokenizer)
    assert len(os.path.commonprefix([r.prompt for r in unprefixed])) < 5


def test_random_lengths_are_exact_without_a_range(tokenizer) -> None:
    requests = build_requests(Workload(dataset="random", input_len=64, output_len=8, num_prompts=100), tokenizer)
    assert {r.prompt_len for r in requests} == {64}
    assert {len(tokenizer.encode(r.prompt).ids) for r in requests} == {64}


def test_random_is_deterministic_per_seed(tokenizer) -> None:
    workload = Workload(dataset="random", input_len=32, num_prompts=5, seed=7)
    assert build_requests(workload, tokenizer) == build_requests(workload, tokenizer)
    assert build_requests(workload, tokenizer) != build_requests(workload, tokenizer, seed=8)


def test_sharegpt_filter(tokenizer, tmp_path) -> None:
    def conv(human: str, gpt: str) -> dict:
        return {"conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]}

    ok = "def function(argument): return argument + 1 " * 3
    data = [conv(ok, ok), conv("hi", ok), conv(ok, "ok"), conv(ok * 100, ok), {"conversations": [{"from": "human", "value": ok}]},
            conv(ok + "x", ok + "y")]  # fmt: skip
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    requests = build_requests(Workload(dataset="sharegpt", path=str(path), num_prompts=10), tokenizer)
    assert sorted(r.prompt for r in requests) == sorted([ok, ok + "x"])  # short, too long and one-turn dropped
    assert all(r.output_len == len(tokenizer.encode(ok, add_special_tokens=False).ids) or r.prompt.endswith("x")
               for r in requests)  # fmt: skip


def test_jsonl(tmp_path, tokenizer) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "hello world", "output_len": 3}\n\n{"prompt": "bye"}\n{"prompt": "vllm", "output_tokens": 5}\n'
    )
    requests = build_requests(Workload(dataset="jsonl", path=str(path), num_prompts=10, output_len=9), tokenizer)
    assert sorted((r.prompt, r.output_len) for r in requests) == [("bye", 9), ("hello world", 3), ("vllm", 5)]
    path.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(UsageError, match="p.jsonl:1"):
        build_requests(Workload(dataset="jsonl", path=str(path)), tokenizer)


def test_missing_inputs_are_usage_errors(tmp_path) -> None:
    with pytest.raises(UsageError, match="tokenizer"):
        build_requests(Workload(dataset="random"), None)
    with pytest.raises(UsageError, match="dataset-path"):
        build_requests(Workload(dataset="sharegpt"), None)
    with pytest.raises(UsageError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
