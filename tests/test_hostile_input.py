"""Hostile values in a study's records (a knob's value, an ``extra_args`` or ``env`` entry, a failure reason) reach the
terminal, the dashboard and a spreadsheet as text: control characters as escapes, rich markup as written, a code fence
that stays closed, a CSV cell that is not a formula; an error echoes the user's input as typed."""

from __future__ import annotations

import csv

import optuna
import pytest
from markdown_it import MarkdownIt
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.best_view import print_best
from autotune.evidence.notes import trial_note
from autotune.evidence.trials_csv import write_trials_csv
from autotune.space.schema import Objective
from autotune.text import csv_cell, lowercase_first, terminal_safe

runner = CliRunner()
NAME = "hostile"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\r\x9b\u202e"  # a title, a bell, a clear screen, a CR, a C1 CSI, a bidi override
MARKUP = "[bold red]LOUD[/] :warning:"
FORMULA = '=HYPERLINK("http://evil.example","click")'
INJECTED = "[click me](http://evil.example)"
FENCE_BREAKER = f"a\n```\n{INJECTED}\n```"  # closes a ``` fence, puts a live link after it, opens another
PARAMS = {"attention_backend": MARKUP + ESCAPES, "tag": FORMULA, "note": "@SUM(1+1)", "flag": "-cmd|' /C calc'!A0"}
LAUNCH = {"argv": ["vllm", "serve", "m", "--port", "8000", "--x", FENCE_BREAKER + ESCAPES], "env": {"E": ESCAPES},
          "secret_env": [], "files": {}}  # fmt: skip
CONFIG = {"engine": "vllm", "model": "m", "extra_args": ["--x", FENCE_BREAKER + ESCAPES], "env": {"E": ESCAPES}}


TAGS = [FORMULA, "+1"]  # the tag of each trial: the same choices in both (Optuna's rule)


def _trial(value: float, params: dict, attrs: dict) -> optuna.trial.FrozenTrial:
    choices = {name: TAGS if name == "tag" else [v] for name, v in params.items()}
    return optuna.trial.create_trial(
        value=value, params=params, distributions={name: CategoricalDistribution(choices[name]) for name in params},
        constraints={"launch": 0.0},
        user_attrs={"engine": "vllm", "outcome": "measured", "launched": True, "node_minutes": 1.0,
                    "config": CONFIG, "launch": LAUNCH, "benchmarks": []} | attrs,
    )  # fmt: skip


@pytest.fixture
def study(tmp_path, monkeypatch) -> optuna.Study:
    """A study whose best trial launches with hostile extra_args and env values, and whose knobs hold markup, control
    characters and spreadsheet formulas; a failed trial's reason holds control characters too."""
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    study = optuna.create_study(study_name=NAME, storage=f"sqlite:///{tmp_path / NAME}.db", direction="maximize")
    metrics = {"total_token_throughput": 1500.0, "output_throughput": 700.0, "mean_tpot_ms": 20.0, "p99_tpot_ms": 25.0,
               "p99_ttft_ms": 100.0}  # fmt: skip
    measured = {"load": {"max_concurrency": 8}, "value": 1500.0, "feasible": True, "metrics": metrics}
    study.add_trial(_trial(1500.0, PARAMS, {"baseline": True, "benchmarks": [measured], "load": measured["load"]}))
    failed = {"failure_kind": "crash", "failure_reason": "=1+1 " + MARKUP + ESCAPES, "outcome": "crash"}
    study.add_trial(_trial(0.0, {**PARAMS, "tag": "+1"}, failed | {"launched": True}))
    return study


def _assert_shown_not_obeyed(text: str) -> None:
    """No control character reaches the terminal raw; each is there as its escape."""
    for raw, shown in (("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\r", "\\r"), ("\x9b", "\\x9b"), ("\u202e", "\\u202e")):
        assert raw not in text, f"{raw!r} printed raw:\n{text!r}"
        assert shown in text, f"{shown} missing:\n{text}"


def test_terminal_safe_shows_controls_as_escapes_and_keeps_lines() -> None:
    assert terminal_safe("a\x1b[31mb\x07c\x7f\x85\u2066d") == "a\\x1b[31mb\\x07c\\x7f\\x85\\u2066d"
    assert terminal_safe("line one\n\tline two → é") == "line one\n\tline two → é"  # text and layout kept


@pytest.mark.parametrize("value", ["=1+1", "+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1"])
def test_csv_cell_makes_a_formula_text(value: str) -> None:
    assert csv_cell(value) == "'" + value
    assert csv_cell(-3.5) == -3.5 and csv_cell("vllm") == "vllm" and csv_cell(None) is None


def test_lowercase_first_keeps_the_quoted_input() -> None:
    assert lowercase_first("Value error, '-Bad' starts with '-'") == "'-Bad' starts with '-'"
    assert lowercase_first("Input should be 'Auto'") == "input should be 'Auto'"


def test_study_show_prints_values_as_text(study) -> None:
    for args in ([], ["--trial", "0"], ["--trial", "1"]):
        done = runner.invoke(app, ["study", "show", "--study", NAME, *args], env={"COLUMNS": "200", "TERM": "dumb"})
        assert done.exit_code == 0, done.output
        _assert_shown_not_obeyed(done.stdout)
        assert "[bold red]LOUD[/]" in done.stdout and ":warning:" in done.stdout, done.stdout  # markup as written
    assert "=1+1 [bold red]LOUD[/]" in done.stdout  # the failed trial's reason, whole


def test_best_launch_at_the_end_of_a_run_is_shown_not_obeyed(study, capsys) -> None:
    print_best(study)
    printed = capsys.readouterr().out
    _assert_shown_not_obeyed(printed)
    assert INJECTED in printed  # the value itself is all there, on its lines


def test_dashboard_note_keeps_a_fence_breaking_value_inside_its_code_block(study) -> None:
    note = trial_note(study.trials[0], Objective())
    tokens = MarkdownIt("commonmark").parse(note)
    inline = [child.type for token in tokens for child in token.children or []]
    assert "link_open" not in inline, note  # the injected link is not rendered live
    launch = next(token for token in tokens if token.type == "fence" and token.info == "sh")
    assert INJECTED in launch.content and "```" in launch.content, note  # it is shown, inside the launch block


def test_report_csv_has_no_formula_cells(study, tmp_path) -> None:
    path = tmp_path / "trials.csv"
    write_trials_csv(study, path)
    rows = list(csv.DictReader(path.open(newline="")))
    assert [row["param:tag"] for row in rows] == ["'" + FORMULA, "'+1"]
    assert rows[0]["param:note"] == "'@SUM(1+1)" and rows[0]["param:flag"].startswith("'-cmd|")
    assert rows[1]["failure_reason"].startswith("'=1+1")
    texts = [
        cell for row in rows for name, cell in row.items() if name.startswith("param:") or name == "failure_reason"
    ]
    assert not [cell for cell in texts if cell.startswith(("=", "+", "-", "@"))]
    assert rows[0]["value"] == "1500.0"  # numbers stay numbers


@pytest.mark.parametrize("knob", ["model", "chat_template"])
def test_an_error_echoes_the_input_in_its_own_case(knob: str) -> None:
    done = runner.invoke(app, ["command", "--set", "engine=vllm", "--set", "model=m", "--set", f"{knob}=-Bad"])
    assert done.exit_code == 2, done.output
    line = done.stderr.strip()
    assert "'-Bad'" in line and "'-bad'" not in line and "\n" not in line, line
    assert "value error" not in line.lower(), line  # pydantic's prefix is not part of the message
