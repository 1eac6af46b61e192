"""``dataset: mix``: request classes sent together in one benchmark, in exact shares, with per-class metrics and SLOs.

Against the scripted server, which logs every request it receives (``--request-log``): the shares are counted on the
server's side, by the output length each class asks for.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from autotune.bench.client import ClientOptions
from autotune.bench.datasets import build_requests, check, load_tokenizer
from autotune.bench.results import BenchmarkResult
from autotune.bench.runner import run_benchmark
from autotune.cli import app
from autotune.cli.bench import parse_class
from autotune.config import ServerConfig
from autotune.errors import UsageError
from autotune.evidence.reproduce import class_flag
from autotune.serving.process import group_alive
from autotune.sim.analytic import analytic_profile
from autotune.sim.backends import to_model_time
from autotune.sim.direct import direct_benchmark
from autotune.sim.words import word_tokenizer
from autotune.space.files import load_space
from autotune.space.mix import RequestClass, class_counts, mix_counts, slo_keys
from autotune.space.schema import Workload
from autotune.testing import scripted
from autotune.testing.sim import H200X8, V32

CHAT = {"name": "chat", "share": 0.7, "input_len": 40, "output_len": 20}
RAG = {"name": "rag", "share": 0.3, "input_len": 300, "output_len": 30}


def mix(*classes: dict, **fields) -> Workload:
    return Workload(dataset="mix", classes=list(classes or (CHAT, RAG)), **({"num_prompts": 100} | fields))


def served(tmp_path: Path, **timings):
    return scripted.serving(tmp_path / "scripted", request_log=tmp_path / "requests.log", **timings)


def sent(tmp_path: Path) -> Counter:
    """Requests the server received, by the output length they asked for."""
    return Counter(int(line.split()[1]) for line in (tmp_path / "requests.log").read_text().splitlines())


def test_a_mix_is_sent_in_exact_shares_and_reported_per_class(tmp_path, tokenizer_file) -> None:
    with served(tmp_path, ttft_ms=5, itl_ms=1) as server:
        result = run_benchmark(ClientOptions(server.base_url, "s"), mix(), load_tokenizer(tokenizer_file))
        assert sent(tmp_path) == {20: 70, 30: 30}  # counted by the server: exactly 70% and 30% of 100
    assert not group_alive(server.pgid)
    chat, rag = result.classes
    assert (chat.name, chat.share, chat.num_prompts, chat.completed, chat.failed) == ("chat", 0.7, 70, 70, 0)
    assert (rag.name, rag.share, rag.num_prompts, rag.completed, rag.failed) == ("rag", 0.3, 30, 30, 0)
    assert (chat.total_output_tokens, rag.total_output_tokens, result.total_output_tokens) == (1400, 900, 2300)
    assert (result.completed, result.num_prompts) == (100, 100)
    # the same metric names as the overall, over each class's requests; rates over the one benchmark's duration
    for name in ("request_throughput", "output_throughput", "total_token_throughput", "total_input_tokens"):
        assert chat.metric(name) + rag.metric(name) == pytest.approx(result.metric(name))
    assert chat.metric("p99_ttft_ms") > 0 and rag.metric("mean_tpot_ms") > 0 and rag.p99_e2el_ms > chat.p50_e2el_ms
    assert result.class_result("rag") is rag and result.class_result("nope") is None
    # the classes' sections come back in the vllm bench JSON, after the overall fields, and read back the same
    data = result.to_vllm_json()
    assert [c["name"] for c in data["classes"]] == ["chat", "rag"] and data["classes"][0]["num_prompts"] == 70
    assert list(data)[-1] == "classes" and data["completed"] == 100
    assert BenchmarkResult.from_vllm_json(json.loads(json.dumps(data))).to_vllm_json() == data


def test_a_sharded_mix_is_split_the_same(tmp_path, tokenizer_file) -> None:
    with served(tmp_path, ttft_ms=2, itl_ms=1) as server:
        result = run_benchmark(ClientOptions(server.base_url, "s"), mix(num_prompts=20), load_tokenizer(tokenizer_file),
                               shards=2)  # fmt: skip
        assert sent(tmp_path) == {20: 14, 30: 6}
    assert [(c.name, c.num_prompts, c.completed, c.total_output_tokens) for c in result.classes] == [
        ("chat", 14, 14, 280), ("rag", 6, 6, 180)]  # fmt: skip


def test_classes_are_interleaved_by_the_seed(tokenizer_file) -> None:
    tokenizer = load_tokenizer(tokenizer_file)
    order = [r.request_class for r in build_requests(mix(num_prompts=40), tokenizer)]
    assert Counter(order) == {"chat": 28, "rag": 12}
    assert order != sorted(order, key=["chat", "rag"].index)  # mixed, not one class after the other
    assert order == [r.request_class for r in build_requests(mix(num_prompts=40), tokenizer)]
    assert order != [r.request_class for r in build_requests(mix(num_prompts=40, seed=1), tokenizer)]
    requests = build_requests(mix(num_prompts=40), tokenizer)
    assert {r.output_len for r in requests if r.request_class == "rag"} == {30}
    assert {r.prompt_len for r in requests if r.request_class == "chat"} == {40}
    # a class's prompts are its own: two classes of one shape get different prompts
    twins = build_requests(mix(CHAT, CHAT | {"name": "chat2"}, num_prompts=10), tokenizer)
    assert not {r.prompt for r in twins if r.request_class == "chat"} & {
        r.prompt for r in twins if r.request_class == "chat2"
    }


def test_a_class_reads_its_own_file(tmp_path, tokenizer_file) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"document {i} " * 50, "output_len": 7}) + "\n" for i in range(20)))
    workload = mix(CHAT | {"share": 3}, {"name": "docs", "share": 1, "dataset": "jsonl", "path": str(path)},
                   num_prompts=12)  # fmt: skip
    check(workload)
    requests = build_requests(workload, load_tokenizer(tokenizer_file))
    assert Counter((r.request_class, r.output_len) for r in requests) == {("chat", 20): 9, ("docs", 7): 3}
    with pytest.raises(UsageError, match="docs of the mix: its dataset gives 20 usable prompts, its share is 30"):
        build_requests(workload.model_copy(update={"num_prompts": 120}), load_tokenizer(tokenizer_file))
    missing = mix(CHAT, {"name": "docs", "share": 1, "dataset": "jsonl", "path": str(tmp_path / "none.jsonl")})
    with pytest.raises(UsageError, match="none.jsonl"):
        check(missing)


@pytest.mark.parametrize(
    ("shares", "total", "counts"),
    [
        ([0.7, 0.3], 100, [70, 30]),
        ([7, 3], 100, [70, 30]),  # weights: the same mix
        ([0.1, 0.2, 0.7], 10, [1, 2, 7]),  # 0.1 + 0.2 is not 0.3 in floats; the quotas are exact
        ([1, 1, 1], 100, [34, 33, 33]),  # equal remainders: the class listed first
        ([1, 1, 1], 2, [1, 1, 0]),
        ([0.5, 0.25, 0.25], 7, [3, 2, 2]),  # 3.5, 1.75, 1.75: the largest remainders get the two left
        ([2, 1], 1, [1, 0]),
        ([0.333, 0.333, 0.334], 100, [33, 33, 34]),
        ([1, 2, 3, 4], 7, [1, 1, 2, 3]),  # 0.7, 1.4, 2.1, 2.8: floors 0,1,2,2, then .8 and .7 round up
    ],
)  # fmt: skip
def test_counts_are_split_by_largest_remainder(shares, total, counts) -> None:
    assert class_counts(shares, total) == counts


@given(st.lists(st.floats(0.001, 1000), min_size=1, max_size=8), st.integers(0, 5000))
def test_counts_add_up_and_stay_within_one_of_the_quota(shares, total) -> None:
    counts = class_counts(shares, total)
    assert sum(counts) == total
    for share, count in zip(shares, counts, strict=True):
        assert abs(count - total * share / sum(shares)) < 1 + 1e-6


def test_awkward_shares_are_sent_exactly(tokenizer_file) -> None:
    classes = [{"name": f"c{n}", "share": 1, "input_len": 8, "output_len": n} for n in (3, 4, 5)]
    requests = build_requests(mix(*classes, num_prompts=10), load_tokenizer(tokenizer_file))
    assert Counter(r.output_len for r in requests) == {3: 4, 4: 3, 5: 3}
    with pytest.raises(UsageError, match="class c3 of the mix gets none of the 2 requests.*num_prompts 3 or more"):
        mix_counts(mix(*classes).classes[::-1], 2)
    # a warm-up of fewer requests than classes sends what it can
    warm = build_requests(mix(*classes, num_prompts=2), load_tokenizer(tokenizer_file), every_class=False)
    assert Counter(r.output_len for r in warm) == {3: 1, 4: 1}


def test_slos_are_judged_per_class() -> None:
    workload = mix(CHAT | {"slo": {"p99_ttft_ms": 200}}, RAG | {"slo": {"p99_ttft_ms": 2000, "p99_tpot_ms": 50}})
    overall = {"completed": 100, "p99_ttft_ms": 1500.0, "p99_tpot_ms": 40.0, "output_throughput": 900.0}
    chat = {"name": "chat", "share": 0.7, "num_prompts": 70, "p99_ttft_ms": 150.0, "p99_tpot_ms": 30.0}
    rag = {"name": "rag", "share": 0.3, "num_prompts": 30, "p99_ttft_ms": 2500.0, "p99_tpot_ms": 45.0}
    result = BenchmarkResult.from_vllm_json(overall | {"classes": [chat, rag]})
    # the objective's SLO is the whole benchmark's; each class's own is judged on that class's metrics
    checks = result.slo_checks(workload, {"p99_tpot_ms": 50})
    assert [(c.key, c.missed) for c in checks] == [("slo:p99_tpot_ms", False), ("slo:chat:p99_ttft_ms", False),
                                                   ("slo:rag:p99_ttft_ms", True), ("slo:rag:p99_tpot_ms", False)]  # fmt: skip
    (miss,) = result.slo_misses(workload, {"p99_tpot_ms": 50})
    assert (miss.request_class, miss.metric, miss.violation, miss.text()) == ("rag", "p99_ttft_ms", 0.25,
                                                                              "rag: p99_ttft_ms 2500.0 > 2000")  # fmt: skip
    violations = result.slo_violations(workload, {"p99_tpot_ms": 50})
    assert violations == pytest.approx({"slo:p99_tpot_ms": -0.2, "slo:chat:p99_ttft_ms": -0.25,
                                        "slo:rag:p99_ttft_ms": 0.25, "slo:rag:p99_tpot_ms": -0.1})  # fmt: skip
    assert list(violations) == slo_keys(workload.classes, {"p99_tpot_ms": 50})  # named before anything is measured
    # a class without a result (a result from a model that does not split classes) misses its SLOs, capped
    bare = BenchmarkResult.from_vllm_json(overall)
    assert bare.slo_violations(workload, {}, cap=1.0) == {"slo:chat:p99_ttft_ms": 1.0, "slo:rag:p99_ttft_ms": 1.0,
                                                          "slo:rag:p99_tpot_ms": 1.0}  # fmt: skip
    # a workload that is not a mix: the objective's SLOs on the overall, as before
    assert BenchmarkResult.from_vllm_json(overall).slo_violations(Workload(), {"p99_ttft_ms": 1000}) == {
        "slo:p99_ttft_ms": 0.5
    }


def test_a_class_slo_is_judged_on_the_measured_class(tmp_path, tokenizer_file) -> None:
    workload = mix(CHAT | {"slo": {"p99_ttft_ms": 60_000}}, RAG | {"slo": {"p99_e2el_ms": 1}}, num_prompts=20)
    with served(tmp_path, ttft_ms=5, itl_ms=1) as server:
        result = run_benchmark(ClientOptions(server.base_url, "s"), workload, load_tokenizer(tokenizer_file))
    assert [c.key for c in result.slo_misses(workload, {})] == ["slo:rag:p99_e2el_ms"]  # over 29 ITLs of 1 ms


SCHEMA_ERRORS = [
    ({"dataset": "mix"}, "dataset mix needs its request classes"),
    ({"classes": [CHAT]}, "classes are for dataset mix"),
    ({"dataset": "mix", "classes": []}, "dataset mix needs its request classes"),
    ({"dataset": "mix", "classes": [CHAT, CHAT]}, "chat named twice"),
    ({"dataset": "mix", "classes": [CHAT | {"share": 0}]}, "greater than 0"),
    ({"dataset": "mix", "classes": [CHAT | {"share": -0.3}]}, "greater than 0"),
    ({"dataset": "mix", "classes": [CHAT | {"name": "chat bot"}]}, "not a plain name"),
    ({"dataset": "mix", "classes": [CHAT | {"dataset": "sharegpt"}]}, "sharegpt dataset needs a file"),
    ({"dataset": "mix", "classes": [CHAT | {"path": "x.jsonl"}]}, "`path` is for a sharegpt or jsonl class"),
    ({"dataset": "mix", "path": "x.json", "classes": [CHAT]}, "a mix reads its files from its classes"),
    ({"dataset": "mix", "classes": [CHAT | {"slo": {"p42_ttft_ms": 5}}]}, "p42_ttft_ms"),
    ({"dataset": "mix", "classes": [CHAT | {"range_ratio": 1}]}, "less than 1"),
    ({"dataset": "mix", "classes": [CHAT | {"weight": 1}]}, "weight"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "fragment"), SCHEMA_ERRORS)
def test_schema_errors(fields, fragment) -> None:
    with pytest.raises(ValidationError, match=fragment):
        Workload(**fields)


def test_a_space_file_names_the_class_at_fault(tmp_path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("engines: {vllm: {fixed: {model: m}}}\nworkload:\n  dataset: mix\n  classes:\n"
                    "    - {name: chat, share: 0.7, input_len: 1000, output_len: 200}\n"
                    "    - {name: rag, share: 0, input_len: 8000, output_len: 300}\n")  # fmt: skip
    with pytest.raises(UsageError, match=r"workload\.classes\[1\]\.share"):
        load_space(path)
    path.write_text(path.read_text().replace("share: 0,", "share: 0.3, slo: {p99_ttft_ms: 4000},"))
    classes = load_space(path).workload.classes
    assert [(c.name, c.share, c.input_len, c.slo) for c in classes] == [("chat", 0.7, 1000, {}),
                                                                        ("rag", 0.3, 8000, {"p99_ttft_ms": 4000})]  # fmt: skip


def test_bench_prints_each_class_and_json_has_them(tmp_path, tokenizer_file) -> None:
    runner = CliRunner()
    flags = ["--tokenizer", str(tokenizer_file), "--num-prompts", "10", "--class", "name=chat,share=0.7,input_len=40,"
             "output_len=20", "--class", "name=rag,share=0.3,input_len=300,output_len=30,p99_ttft_ms=60000"]  # fmt: skip
    with served(tmp_path, ttft_ms=2, itl_ms=1) as server:
        printed = runner.invoke(app, ["bench", "--base-url", server.base_url, "--model", "s", *flags])
        as_json = runner.invoke(app, ["bench", "--base-url", server.base_url, "--model", "s", "--json", *flags])
        bad = runner.invoke(app, ["bench", "--base-url", server.base_url, "--model", "s", "--class", "name=a,share=x"])
    assert printed.exit_code == 0, printed.output
    assert "---------------- Class chat ------------------" in printed.stdout
    assert "7 of 10 (70.0%)" in printed.stdout and "3 of 10 (30.0%)" in printed.stdout
    assert "SLO rag:p99_ttft_ms:" in printed.stdout and "met (rag: p99_ttft_ms" in printed.stdout
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert [(c["name"], c["num_prompts"], c["completed"]) for c in data["classes"]] == [("chat", 7, 7), ("rag", 3, 3)]
    assert bad.exit_code == 2 and bad.stderr.startswith("autotune: error: --class #1 share: ")
    assert sent(tmp_path) == {20: 14, 30: 6}


def test_a_class_flag_is_the_class() -> None:
    request_class = RequestClass(name="rag", share=0.3, input_len=8000, output_len=300, slo={"p99_ttft_ms": 4000})
    assert class_flag(request_class) == "name=rag,share=0.3,input_len=8000,output_len=300,p99_ttft_ms=4000.0"
    assert RequestClass(**parse_class(class_flag(request_class))) == request_class
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_class("chat:0.7")


def test_the_simulator_rescales_each_class() -> None:
    result = {"duration": 1.0, "output_throughput": 100.0, "p99_ttft_ms": 5.0,
              "classes": [{"name": "a", "share": 1.0, "num_prompts": 3, "output_throughput": 100.0, "p99_ttft_ms": 5.0}]}  # fmt: skip
    scaled = to_model_time(result, 0.1)
    assert (scaled["output_throughput"], scaled["classes"][0]["output_throughput"]) == pytest.approx((10.0, 10.0))
    assert scaled["classes"][0]["p99_ttft_ms"] == pytest.approx(50.0) and scaled["classes"][0]["num_prompts"] == 3


def test_the_simulated_engine_splits_a_mix_too() -> None:
    workload = mix(CHAT | {"input_len": 1000, "output_len": 200}, RAG | {"input_len": 8000, "output_len": 300},
                   num_prompts=40, max_concurrency=8)  # fmt: skip
    requests = build_requests(workload, word_tokenizer())
    config = ServerConfig(engine="vllm", model=V32, tp=8)
    result = BenchmarkResult.from_vllm_json(direct_benchmark(analytic_profile(config, H200X8), workload, requests, "s"))
    chat, rag = result.classes
    assert (chat.num_prompts, chat.total_input_tokens, rag.num_prompts, rag.total_input_tokens) == (
        28,
        28_000,
        12,
        96_000,
    )
    assert rag.mean_ttft_ms > chat.mean_ttft_ms  # 8000-token prompts take longer to prefill, in the model too


def test_space_validate_refuses_a_mix_that_cannot_be_sent(tmp_path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("engines: {vllm: {fixed: {model: m}}}\nworkload:\n  dataset: mix\n  num_prompts: 3\n  classes:\n"
                    "    - {name: chat, share: 0.9}\n    - {name: rag, share: 0.1}\n")  # fmt: skip
    result = CliRunner().invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 2
    assert "workload.classes: class rag of the mix gets none of the 3 requests" in result.stderr
    assert "fix: num_prompts 10 or more" in result.stderr
    path.write_text(path.read_text().replace("share: 0.1}", f"share: 0.1, dataset: jsonl, path: {tmp_path}/no.jsonl}}"))
    path.write_text(path.read_text().replace("num_prompts: 3", "num_prompts: 30"))
    result = CliRunner().invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 2 and "workload.classes: class rag: cannot read dataset" in result.stderr
