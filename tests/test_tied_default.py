"""A tied parameter's default is matched to its option as a mapping: written in another key order than the option,
it is that option (the space validates, its baseline launches it); one that is no option is refused in one line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import load_space
from tests.conftest import SPACES, provide_first_launch_needs

runner = CliRunner()
TINY = SPACES / "vllm-cpu-tiny.yaml"
OPTIONS = [{"tp": 8, "dp": 1}, {"tp": 4, "dp": 2}]


@pytest.fixture(autouse=True)
def _first_launch_needs(tmp_path_factory, monkeypatch) -> None:
    """The tiny space's model tokenizer, where validate looks for it (its first launch is checked)."""
    provide_first_launch_needs(tmp_path_factory.mktemp("node"), monkeypatch, TINY)


def space_with_layout(tmp_path: Path, default: dict) -> Path:
    data = copy.deepcopy(yaml.safe_load(TINY.read_text()))
    data["params"]["layout"] = {"tied": OPTIONS, "default": default}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_default_in_another_key_order_is_its_option(tmp_path: Path) -> None:
    path = space_with_layout(tmp_path, {"dp": 1, "tp": 8})
    result = runner.invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout and "Traceback" not in result.output
    space = load_space(path)
    layout = space.params["layout"]
    assert list(layout.default.items()) == list(OPTIONS[0].items())  # normalised to the option's own mapping
    assert layout.default_value() in layout.values()
    server = space.default_point("vllm").server
    assert (server.tp, server.dp) == (8, 1)


def test_a_default_of_no_option_is_one_line_listing_them(tmp_path: Path) -> None:
    path = space_with_layout(tmp_path, {"dp": 2, "tp": 8})
    result = runner.invoke(app, ["space", "validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"autotune: error: {path}: params.layout.default: "), lines[0]
    assert "{tp: 8, dp: 1} | {tp: 4, dp: 2}" in lines[0] and "fix:" in lines[0]
