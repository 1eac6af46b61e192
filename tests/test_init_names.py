"""`autotune init --simulate` names its study apart from the real file's, so `study best --study NAME` of the real
study (the README's line) can never show the simulated one."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import load_space
from tests.conftest import REPO

LLAMA = ["init", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpus", "8", "--gpu-memory-gb", "141"]


def test_the_simulated_and_the_real_init_file_name_different_studies(tmp_path) -> None:
    runner = CliRunner()
    (tmp_path / "sim").mkdir()
    real, simulated = tmp_path / "my.yaml", tmp_path / "sim" / "my.yaml"  # one file name: the study names differ
    assert runner.invoke(app, [*LLAMA, "-o", str(real)]).exit_code == 0
    assert runner.invoke(app, [*LLAMA, "--simulate", "-o", str(simulated)]).exit_code == 0
    real_name, simulated_name = load_space(real).name, load_space(simulated).name
    assert load_space(simulated).simulate is not None and load_space(real).simulate is None
    assert real_name == "my" and simulated_name == "my-simulated"
    # the README's `study best --study NAME` names the study of the real file
    readme = (REPO / "README.md").read_text()
    named = [name for name in re.findall(r"autotune study best --study (\S+)", readme) if name != "NAME"]
    assert named == [real_name]
