"""`autotune init` names the study after the file it writes (`-o my.yaml`: `my`), or `--name NAME`, so two files
written for one model run as two studies (both of one name, the second `study run` was refused: the study was made
with another space); a simulated file's name, unless given by --name, ends in -simulated, apart from the real one's;
after writing, init prints the next command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import load_space
from tests.study.conftest import autotune

LLAMA = ["init", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpus", "8", "--gpu-memory-gb", "141"]
runner = CliRunner()


def init(*args: str) -> str:
    done = runner.invoke(app, [*LLAMA, *args])
    assert done.exit_code == 0, done.output
    return done.stderr


def test_two_files_for_one_model_run_as_two_studies(tmp_path) -> None:
    short, long = tmp_path / "short.yaml", tmp_path / "long.yaml"
    init("--simulate", "--workload", "random:128:16", "-o", str(short))
    init("--simulate", "--workload", "random:2048:16", "-o", str(long))
    studies = tmp_path / "studies"
    for space in (short, long):
        done = autotune("study", "run", str(space), "--n-trials", "1", "--seed", "1", studies=studies)
        assert done.returncode == 0, done.stderr
    assert (load_space(short).name, load_space(long).name) == ("short-simulated", "long-simulated")
    assert {path.stem for path in studies.glob("*.db")} == {"short-simulated", "long-simulated"}


def test_the_name_comes_from_name_else_the_file_else_the_model(tmp_path) -> None:
    stderr = init("-o", str(tmp_path / "my.yaml"))
    assert load_space(tmp_path / "my.yaml").name == "my"
    assert f"next: autotune doctor {tmp_path / 'my.yaml'}" in stderr.splitlines()
    (tmp_path / "sim").mkdir()
    init("--simulate", "-o", str(tmp_path / "sim" / "my.yaml"))
    assert load_space(tmp_path / "sim" / "my.yaml").name == "my-simulated"  # apart from the real file's study
    init("--simulate", "-o", str(tmp_path / "my-simulated.yaml"))
    assert load_space(tmp_path / "my-simulated.yaml").name == "my-simulated"
    init("--name", "llama-prod", "-o", str(tmp_path / "other.yaml"))
    assert load_space(tmp_path / "other.yaml").name == "llama-prod"
    init("--name", "llama-try", "--simulate", "-o", str(tmp_path / "try.yaml"))
    assert load_space(tmp_path / "try.yaml").name == "llama-try"  # --name is taken as given
    printed = runner.invoke(app, [*LLAMA, "--simulate"])  # no file: the model and GPU count
    assert printed.exit_code == 0 and "\nname: llama-3.3-70b-instruct-8gpu-simulated\n" in printed.stdout


@pytest.mark.parametrize(("args", "fragment"), [(["--name", "../x"], "--name '../x'"),
                                                (["-o", "my space.yaml"], "--name NAME")])  # fmt: skip
def test_a_name_that_is_no_study_name_is_refused(tmp_path, args, fragment) -> None:
    args = [arg if arg != "my space.yaml" else str(tmp_path / arg) for arg in args]
    done = runner.invoke(app, [*LLAMA, *args])
    assert done.exit_code == 2 and fragment in done.stderr and "fix:" in done.stderr, done.output
    assert not (tmp_path / "my space.yaml").exists()
