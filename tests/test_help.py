"""Every command's --help: the space argument spelled SPACE everywhere, flags shown as flags (no `<bool>`), --gpus
with one meaning; `study list` on a study with no feasible trial."""

from __future__ import annotations

import json
import re

import optuna
import pytest
import typer
from typer.testing import CliRunner

from autotune.cli import app, options

runner = CliRunner()
WIDE = {"COLUMNS": "200", "TERM": "dumb"}


def _commands() -> list[list[str]]:
    """The path of every command of the CLI (groups included), e.g. ["study", "run"]."""
    paths: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        paths.append(path)
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name, sub in command.commands.items():
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def _help(path: list[str]) -> str:
    done = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert done.exit_code == 0, done.output
    return done.output


def test_the_cli_has_the_commands_this_test_walks() -> None:
    paths = {" ".join(p) for p in _commands()}
    assert {"study run", "space show", "doctor", "command", "init", "study list"} <= paths


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "autotune")
def test_help_spells_the_space_argument_once_and_shows_flags_as_flags(path: list[str]) -> None:
    text = _help(path)
    assert "<bool>" not in text  # a flag takes no value
    for spelling in ("space_ref", "{file}", "[[SPACE]]", "[space", "FILE]", "{FILE}"):
        assert spelling not in text, f"{' '.join(path)} --help spells the space argument {spelling!r}"
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    arguments = re.findall(r"[\[{]([A-Za-z_]+)[\]}]", usage.split("[OPTIONS]", 1)[-1])
    assert set(arguments) <= {"SPACE", "ARGS", "DATASET"}, usage  # COMMAND [ARGS]... of a group; dataset fetch


def test_space_commands_take_SPACE() -> None:
    for path in (["study", "run"], ["space", "show"], ["space", "validate"], ["doctor"], ["command"]):
        usage = next(line for line in _help(path).splitlines() if "Usage:" in line)
        assert re.search(r"[\[{]SPACE[\]}]", usage), usage


def test_flags_take_no_value_in_help() -> None:
    text = _help(["study", "best"])
    json_line = next(line for line in text.splitlines() if "--json" in line)
    assert "<" not in json_line.split("--json", 1)[1].split("machine")[0]
    assert "<int" in next(line for line in text.splitlines() if "--port" in line)  # a value option keeps its type


def test_gpus_has_one_meaning() -> None:
    one_line = " ".join(options.GPUS_HELP.split())
    for path in (["init"], ["study", "run"], ["command"]):
        text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", _help(path)).split())
        assert one_line in text, f"{' '.join(path)} --gpus"
    counted = runner.invoke(app, ["init", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "4"])
    listed = runner.invoke(app, ["init", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "0,1,2,3"])
    assert counted.exit_code == listed.exit_code == 0, counted.output + listed.output
    assert "4 × 141 GB" in listed.stdout and counted.stdout == listed.stdout
    rendered = runner.invoke(app, ["command", "--set", "engine=vllm", "--set", "model=meta-llama/Llama-3.1-8B-Instruct",
                                   "--set", "tp=4", "--gpus", "0,1,2,3", "--json"])  # fmt: skip
    assert rendered.exit_code == 0, rendered.output


def test_study_list_says_when_no_trial_is_feasible(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    for name, constraints in (("all-rejected", {"launch": 1.0}), ("one-measured", {"launch": 0.0})):
        study = optuna.create_study(study_name=name, storage=f"sqlite:///{tmp_path / name}.db", direction="maximize")
        study.add_trial(optuna.trial.create_trial(value=0.0, constraints={"launch": 1.0}))
        study.add_trial(optuna.trial.create_trial(value=0.0 if constraints["launch"] else 812.5,
                                                  constraints=constraints))  # fmt: skip
    rows = {row["study"]: row for row in json.loads(runner.invoke(app, ["study", "list", "--json"]).stdout)}
    assert rows["all-rejected"]["best"] is None and rows["one-measured"]["best"] == 812.5
    table = runner.invoke(app, ["study", "list"], env=WIDE).stdout
    rejected_line = next(line for line in table.splitlines() if "all-rejected" in line)
    assert "no feasible trial" in rejected_line and "0.00" not in rejected_line
    assert "812.50" in next(line for line in table.splitlines() if "one-measured" in line)


def test_readme_states_measured_durations_for_the_main_job_and_the_tests() -> None:
    """Before each command the README says how long it took and on what machine. The numbers are measurements, not
    behaviour (a test may not time anything): what is checked is that they are stated, with the machine, and for the
    tests that CI measures the whole of `.ci/run`; re-measuring changes the README, not this test."""
    from tests.conftest import REPO

    setup = (REPO / "README.md").read_text().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "about two minutes" not in setup
    main_job, tests = setup.split("Tests", 1)
    main_job, tests = main_job.split("```", 1)[0], tests.split("```", 1)[0]  # said before the command
    assert re.search(r"\d+–\d+ s measured on a [^.]*2-core machine", main_job), main_job
    assert re.search(r"\d+ minutes[^.]* on a [^.]*2-core machine", tests), tests
    assert re.search(r"`\.ci/run`[^.]* \d+ minutes", tests), tests  # CI's measure: set-up, the suite, lint
