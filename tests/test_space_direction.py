"""An objective's direction follows from its metric: a latency is minimised, a throughput maximised; a direction left
out takes the metric's own, and one that contradicts it is refused with one line naming the key and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import get_args

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import load_space
from autotune.space.metrics import LatencyMetric, ThroughputMetric
from tests.conftest import SPACES, provide_first_launch_needs

runner = CliRunner()
TINY = SPACES / "vllm-cpu-tiny.yaml"
LATENCIES, THROUGHPUTS = get_args(LatencyMetric), get_args(ThroughputMetric)


@pytest.fixture(autouse=True)
def _first_launch_needs(tmp_path_factory, monkeypatch) -> None:
    """The tiny space's model tokenizer, where validate looks for it (its first launch is checked)."""
    provide_first_launch_needs(tmp_path_factory.mktemp("node"), monkeypatch, TINY)


def space_with(tmp_path: Path, *metrics: dict) -> Path:
    data = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    data["objective"] = {"metrics": list(metrics)}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_latency_without_direction_is_minimised(tmp_path: Path) -> None:
    path = space_with(tmp_path, {"name": "p99_ttft_ms"})
    result = runner.invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert load_space(path).objective.metrics[0].direction == "minimize"


@pytest.mark.parametrize("name", [*LATENCIES, *THROUGHPUTS])
def test_every_metric_takes_its_own_direction(tmp_path: Path, name: str) -> None:
    expected = "minimize" if name in LATENCIES else "maximize"
    assert load_space(space_with(tmp_path, {"name": name})).objective.metrics[0].direction == expected
    stated = load_space(space_with(tmp_path, {"name": name, "direction": expected}))
    assert stated.objective.metrics[0].direction == expected
    from autotune.space.metrics import metric_direction  # the one table the schema reads

    assert metric_direction(name) == expected


@pytest.mark.parametrize(
    ("metric", "fix"),
    [
        (
            {"name": "p99_ttft_ms", "direction": "maximize"},
            "p99_ttft_ms is a latency: minimize it, or leave direction out",
        ),
        ({"name": "output_throughput", "direction": "minimize"}, "output_throughput is a throughput: maximize it"),
    ],
)
def test_a_contradicting_direction_is_one_line(tmp_path: Path, metric: dict, fix: str) -> None:
    path = space_with(tmp_path, {"name": "total_token_throughput"}, metric)
    result = runner.invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"autotune: error: {path}: objective.metrics[1].direction: "), lines[0]
    assert f"fix: {fix}" in lines[0]


def test_the_default_objective_maximises_throughput() -> None:
    from autotune.space.schema import Objective

    (metric,) = Objective().metrics
    assert (metric.name, metric.direction) == ("total_token_throughput", "maximize")
