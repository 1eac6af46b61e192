"""Rules never refuse what the engine runs (issue #48, item 4): every configuration a landscape's oracle measured as
running (a row with status ok, in every table under benchmarks/landscapes/, mix/ and transfer/ included) passes the
static rules of its engine."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.config import KNOBS, Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.errors import UnsupportedConfig
from autotune.space.files import load_space
from autotune.space.schema import SearchSpace
from tests.conftest import REPO

LANDSCAPES = REPO / "benchmarks" / "landscapes"
TABLES = sorted(LANDSCAPES.rglob("*.csv"))


def row_config(space: SearchSpace, row: dict[str, str]) -> ServerConfig:
    """The launch configuration of a table row: the space's fixed knobs (model, engine version), the row's knobs
    (an empty cell: the knob unset)."""
    engine = next(iter(space.engines))
    base = space.point(engine, {}).server.model_dump()
    knobs = {k: (v.strip() or None) for k, v in row.items() if k in KNOBS}
    return ServerConfig.model_validate(base | knobs)


def refused_rows(space: SearchSpace, rows: list[dict[str, str]], hardware: Hardware) -> list[str]:
    """Each row measured as running that the engine's static rules refuse: its knobs and the rule's reason."""
    engine = get_engine(next(iter(space.engines)))
    refused = []
    for row in rows:
        if row["status"].strip() not in ("", "ok"):
            continue
        try:
            engine.check(row_config(space, row), hardware)
        except UnsupportedConfig as exc:
            refused.append(f"{ {k: v for k, v in row.items() if k in KNOBS and v} }: {exc.rule}: {exc.reason}")
    return refused


def _table(path: Path) -> tuple[SearchSpace, list[dict[str, str]]]:
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    return load_space(path.with_suffix(".yaml")), rows


def test_every_landscape_table_has_its_space() -> None:
    assert len(TABLES) >= 20 + 4  # the single-workload landscapes and mix/'s four
    assert all(path.with_suffix(".yaml").is_file() for path in TABLES)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(LANDSCAPES)))
def test_rules_accept_every_configuration_the_oracle_ran(path: Path) -> None:
    space, rows = _table(path)
    running = [row for row in rows if row["status"].strip() in ("", "ok")]
    assert running, f"{path.name}: no row runs"
    assert refused_rows(space, rows, space.hardware) == [], f"{path.name}: of {len(running)} rows that run"


def test_a_refused_row_is_reported() -> None:
    """The check above can fail: DeepSeek-V3 at tp=2 alone on vLLM (345 GB of weights per GPU) runs in no table,
    and a row claiming it does is refused by weights-fit."""
    space, rows = _table(LANDSCAPES / "dsv3-vllm-1000x1000.csv")
    fake = dict(rows[0]) | {"tp": "2", "dp": "", "ep": "", "dp_attention": "", "status": "ok"}
    refused = refused_rows(space, [fake], space.hardware)
    assert len(refused) == 1 and "weights-fit" in refused[0]


def test_vllm_deepseek_layout_without_expert_parallel_is_measured_and_accepted() -> None:
    """The layout the lead's weights-fit fix admits (vLLM spreads the experts over DP × TP without EP): measured as
    running in the vLLM DeepSeek-V3 landscape, and accepted."""
    space, rows = _table(LANDSCAPES / "dsv3-vllm-1000x1000.csv")
    layout = [r for r in rows if (r["tp"], r["dp"], r["ep"]) == ("2", "4", "") and r["status"] == "ok"]
    assert layout
    assert refused_rows(space, layout, space.hardware) == []
