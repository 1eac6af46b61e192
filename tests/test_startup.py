"""Start-up cost: ``autotune --version`` and ``autotune --help`` import none of the heavy libraries (each subcommand's
module is imported only when it runs), and the root help still shows every command with its own one-line help.
What is checked is which modules a process imported, not how long it took (benchmarks/startup_time.py measures)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.lazy_group import COMMANDS, load_command
from tests.conftest import REPO

runner = CliRunner()
WIDE = {"COLUMNS": "200", "TERM": "dumb"}
# what costs start-up a second of CPU when imported: none of it is needed to print the version or the help
HEAVY = ("optuna", "pandas", "plotly", "httpx", "torch", "numpy", "sqlalchemy", "pydantic_settings", "pydantic.main")
_IMPORTED_AFTER = """
import json, sys
sys.argv = ["autotune", *json.loads(sys.argv[1])]
from autotune.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_imported_by(*args: str) -> set[str]:
    """The modules a fresh interpreter holds after ``autotune ARGS`` ran to its end."""
    done = subprocess.run([sys.executable, "-c", _IMPORTED_AFTER, json.dumps(args)], cwd=REPO, capture_output=True,
                          text=True, check=True, env={"COLUMNS": "80", "PATH": ""})  # fmt: skip
    assert "autotune" in done.stdout, done.stdout  # the command did print its version or help
    return set(json.loads(done.stderr.splitlines()[-1]))


@pytest.mark.parametrize("args", [("--version",), ("--help",), ()], ids=["--version", "--help", "bare"])
def test_version_and_help_import_no_heavy_library_and_no_subcommand(args: tuple[str, ...]) -> None:
    modules = _modules_imported_by(*args)
    heavy = sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))
    assert heavy == [], f"autotune {' '.join(args)} imported {heavy[:5]}"
    subcommands = sorted({entry.module for entry in COMMANDS.values()} & modules)
    assert subcommands == [], f"autotune {' '.join(args)} imported {subcommands}"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_line_is_the_command_s_own_help(name: str) -> None:
    command = load_command(name, COMMANDS[name])
    first_paragraph = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].strip()
    assert COMMANDS[name].summary == first_paragraph, f"update COMMANDS[{name!r}] in autotune/cli/lazy_group.py"
    assert not command.hidden and not command.deprecated  # the stand-in the root's help lists is neither


def test_root_help_is_the_same_with_every_command_loaded() -> None:
    """The help written from the table, and the help written from the real commands (the order included)."""
    lazy = runner.invoke(app, ["--help"], env=WIDE, prog_name="autotune")
    group = typer.main.get_command(app)
    loaded = group.commands  # click's mapping: reading it loads every command
    assert list(loaded) == list(COMMANDS)
    with runner.isolation(env=WIDE) as (stdout, _stderr, _output):
        group.main(["--help"], prog_name="autotune", standalone_mode=False)
        loaded_help = stdout.getvalue().decode()
    assert lazy.exit_code == 0, lazy.output
    assert lazy.stdout == loaded_help
    assert "study      Run and inspect tuning studies." in lazy.stdout


def test_a_loaded_group_keeps_what_the_root_adds_to_it() -> None:
    """``study upgrade`` is registered by the root; loading study in two root groups registers it once; a command
    loaded on demand gets the root's flags-take-no-value fix."""
    for _ in range(2):
        study = typer.main.get_command(app).commands["study"]
        assert list(study.commands).count("upgrade") == 1
    done = runner.invoke(app, ["study", "upgrade", "--help"], env=WIDE)
    assert done.exit_code == 0 and "study upgrade [OPTIONS]" in done.stdout, done.output
    assert "--json" in done.stdout and "<bool>" not in done.stdout  # the root's flag fix reaches a loaded command
