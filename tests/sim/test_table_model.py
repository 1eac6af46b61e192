"""The table model's rows: matched by knobs, load and (in a table with a ``workload`` column) the workload's name."""

from __future__ import annotations

import pytest

from autotune.config import ServerConfig
from autotune.engines import broken_rules
from autotune.errors import StartupFailure, UsageError
from autotune.sim.models import TableModel
from autotune.space.files import load_space
from autotune.space.schema import Workload
from tests.conftest import REPO

HEADER = "max_num_seqs,max_concurrency,{}status,output_throughput,total_token_throughput,mean_ttft_ms,p99_ttft_ms,"
HEADER += "mean_tpot_ms,p99_tpot_ms,message\n"


def config(max_num_seqs: int | None = None) -> ServerConfig:
    return ServerConfig(engine="vllm", model="m", max_num_seqs=max_num_seqs)


def workload(name: str | None = None, concurrency: int = 32) -> Workload:
    fields = {"input_len": 64, "output_len": 16, "max_concurrency": concurrency}
    return Workload.model_validate(fields | ({"name": name} if name else {}))


def throughput(path, server: ServerConfig, load: Workload) -> float:
    return TableModel(str(path), server).evaluate(load, [None] * 8, "m")["total_token_throughput"]


@pytest.fixture
def mixed(tmp_path):
    table = tmp_path / "mixed.csv"
    table.write_text(HEADER.format("workload,") + (
        ",32,chat,ok,1000,3000,50,90,20,30,\n"
        ",32,rag,ok,200,5000,300,1500,10,60,\n"  # within Little's law: 32 * 80 / 0.45 s
        ",64,chat,ok,1500,4500,80,120,30,45,\n"
        "8,32,chat,ok,400,1200,500,900,19,25,\n"
        "8,32,rag,oom,,,,,,,KV cache full\n"
    ))  # fmt: skip
    return table


def test_a_table_without_a_workload_column_matches_knobs_and_load_only(tmp_path) -> None:
    table = tmp_path / "single.csv"
    table.write_text(HEADER.format("") + ",32,ok,1000,3000,50,90,20,30,\n8,32,ok,400,1200,500,900,19,25,\n")
    assert throughput(table, config(), workload()) == 3000.0
    assert throughput(table, config(8), workload("anything")) == 1200.0  # a workload's name is not read
    with pytest.raises(StartupFailure, match="no row") as failure:
        throughput(table, config(), workload(concurrency=64))
    assert failure.value.kind.value == "no_data"


def test_a_workload_column_selects_the_rows_of_the_workload_measured(mixed) -> None:
    assert throughput(mixed, config(), workload("chat")) == 3000.0
    assert throughput(mixed, config(), workload("rag")) == 5000.0
    assert throughput(mixed, config(), workload("chat", concurrency=64)) == 4500.0
    assert throughput(mixed, config(8), workload("chat")) == 1200.0
    with pytest.raises(StartupFailure, match="KV cache full") as failure:  # a failure on one workload only
        throughput(mixed, config(8), workload("rag"))
    assert failure.value.kind.value == "oom"
    with pytest.raises(StartupFailure, match="no row") as failure:  # a load the workload was not measured at
        throughput(mixed, config(), workload("rag", concurrency=64))
    assert failure.value.kind.value == "no_data"


@pytest.mark.parametrize("name", ["summaries", None])
def test_a_workload_the_table_has_no_rows_for_is_the_spaces_error(mixed, name) -> None:
    with pytest.raises(UsageError, match=r"rows for the workloads chat, rag, none for .*fix: name the space"):
        throughput(mixed, config(), workload(name))


def test_a_table_without_p99_columns_gives_the_mean_as_p99(tmp_path) -> None:
    table = tmp_path / "means.csv"
    table.write_text("max_concurrency,status,output_throughput,total_token_throughput,mean_ttft_ms,mean_tpot_ms\n"
                     "32,ok,1000,3000,50,20\n")  # fmt: skip
    result = TableModel(str(table), config()).evaluate(workload(), [None] * 8, "m")
    assert (result["p99_ttft_ms"], result["p99_tpot_ms"], result["median_ttft_ms"]) == (50.0, 20.0, 50.0)


MIX_LANDSCAPES = sorted((REPO / "benchmarks" / "landscapes" / "mix").glob("*.yaml"))


@pytest.mark.parametrize("space_path", MIX_LANDSCAPES, ids=lambda p: p.stem)
def test_every_point_of_a_shipped_mix_landscape_has_its_row(space_path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the landscapes name their tables from the repository root
    space = load_space(space_path)
    engine = next(iter(space.engines))
    assert [w.name for w in space.mix_workloads()] == ["sharegpt", "very-long", "long", "medium", "short", "generation"]
    servers = [p.server for p in space.enumerate(engine, launches_only=True)]
    accepted = [s for s, rule in zip(servers, broken_rules(engine, servers, space.hardware), strict=True) if not rule]
    kinds = set()
    for server in accepted:
        for work in space.mix_workloads():
            for load in space.workload_load_levels(engine, work):
                try:
                    throughput(space.simulate.table, server, work.model_copy(update=load))
                    kinds.add("ok")
                except StartupFailure as failure:
                    kinds.add(failure.kind.value)
    assert "ok" in kinds and "no_data" not in kinds


def test_a_row_above_what_its_own_latencies_allow_is_cut_to_littles_law(tmp_path) -> None:
    # 4 requests in flight of 1000 + 11 tokens, each taking 90 + 10 * 10 ms = 0.19 s: at most 4 * 1011 / 0.19 tok/s
    table = tmp_path / "t.csv"
    table.write_text(HEADER.format("") + ",4,ok,2000,60000,90,90,10,10,\n,8,ok,400,40000,90,90,10,10,\n")
    load = Workload(input_len=1000, output_len=11, max_concurrency=4)
    result = TableModel(str(table), config()).evaluate(load, [None] * 8, "m")
    bound = 4 * 1011 / 0.19
    assert result["total_token_throughput"] == pytest.approx(bound)
    assert result["output_throughput"] == pytest.approx(2000 * bound / 60000)  # in the same proportion
    assert result["mean_ttft_ms"] == 90.0  # the latencies stand
    # within the bound (8 in flight: 42568 tok/s), a row is replayed as it is
    assert throughput(table, config(), load.model_copy(update={"max_concurrency": 8})) == 40000.0
    # at most num_prompts are in flight, whatever the concurrency
    few = load.model_copy(update={"max_concurrency": 8, "num_prompts": 2})
    assert throughput(table, config(), few) == pytest.approx(2 * 1011 / 0.19)
    # a dataset of its own lengths is not bounded (the table cannot know them)
    assert throughput(table, config(), load.model_copy(update={"dataset": "sharegpt", "path": "x"})) == 60000.0
