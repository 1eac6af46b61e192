"""A usage error (a bad option value, an unknown option or command, an extra argument, a missing value) is one line
with the fix and exit code 2, like every other error: no usage box (issue #21, item 9)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.conftest import REPO

runner = CliRunner()

CASES = {
    "zero trials": (["study", "run", "--n-trials", "0"], ["--n-trials must be at least 1 (got 0)"]),
    "negative trials": (["study", "run", "--n-trials", "-5"], ["--n-trials must be at least 1 (got -5)"]),
    "not a number": (["study", "run", "--n-trials", "many"], ["--n-trials", "(got many)"]),
    "study name as an argument": (["study", "show", "nope"], ["unexpected argument 'nope'", "--study nope"]),
    "unknown option": (["study", "show", "--stuyd", "x"], ["no such option '--stuyd'", "did you mean --study?"]),
    "missing option value": (["study", "run", "--n-trials"], ["'--n-trials' requires", "--n-trials VALUE"]),
    "missing argument": (["space", "show"], ["missing argument SPACE", "autotune space show --help"]),
    "missing option": (["bench"], ["missing option --base-url"]),
    "unknown command": (["study", "shwo"], ["no such command 'shwo'", "did you mean 'show'?"]),
    "unknown top-level option": (["--verbose"], ["no such option '--verbose'", "autotune --help"]),
    "extra arguments": (["space", "validate", "a", "b"], ["unexpected argument 'b'", "autotune space validate"]),
}


def assert_one_usage_line(exit_code: int, stderr: str, fragments: list[str]) -> None:
    assert exit_code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("autotune: error: ") and "; fix: " in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_a_usage_error_is_one_line_with_the_fix(case: str) -> None:
    args, fragments = CASES[case]
    done = runner.invoke(app, args)
    assert_one_usage_line(done.exit_code, done.stderr, fragments)
    assert done.stdout == ""


def test_a_usage_error_of_the_installed_command_is_one_line() -> None:
    # the program as a user runs it: `python -m autotune`, whose usage line said "python -m autotune study run"
    done = subprocess.run([sys.executable, "-m", "autotune", "study", "run", "--n-trials", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert_one_usage_line(done.returncode, done.stderr, ["--n-trials", "autotune study run --help"])
