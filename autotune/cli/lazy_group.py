"""The root command's subcommands, each imported only when it is run.

Every subcommand module imports Optuna, pandas or an engine's registry at its top (about a second of CPU), and
``autotune --version`` or ``autotune --help`` needs none of them. The root group therefore knows its commands from a
static table (name, where the command lives, the one line its ``--help`` shows) and imports a command's module on
the first ``get_command`` for it: click's "lazy loading of subcommands" pattern. The root's own ``--help`` lists the
table's lines without importing anything; tests/test_startup.py checks that each line is the real command's, so the
table cannot drift from the commands' docstrings.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any, NamedTuple

import typer
import typer.main
from typer.core import TyperCommand

from autotune.cli.usage import OneLineUsage


class LazyCommand(NamedTuple):
    """Where a subcommand is defined, and the one line the root's ``--help`` shows for it."""

    module: str  # imported when the command is first asked for
    attribute: str  # a ``typer.Typer`` (a group of commands) or a command function, in that module
    summary: str  # the first paragraph of the command's help, as the root's help shows it (newlines kept)


# in the order the root's help lists them (typer's: commands first, then groups); ``__init__`` of this package
# never imports the modules, so each line is the real help's first paragraph, checked by tests/test_startup.py
COMMANDS: dict[str, LazyCommand] = {
    "bench": LazyCommand(
        "autotune.cli.bench", "bench",
        "Benchmark a running OpenAI-compatible server; exit 1 when it is unreachable or every request failed.",
    ),
    "command": LazyCommand(
        "autotune.cli.command", "command",
        "Render one configuration as the engine's launch command; refuse (exit 1) with the rule it breaks.",
    ),
    "dashboard": LazyCommand(
        "autotune.cli.dashboard", "dashboard",
        "Browse a study in optuna-dashboard: trials, metric names, and each trial's server log, benchmark JSON and\n"
        "launch command (Optuna artifacts). Serves on 127.0.0.1 until interrupted.",
    ),
    "init": LazyCommand(
        "autotune.cli.init", "init",
        "Write a search space for your model and machine: the layouts that fit, the knobs that apply, each commented\n"
        "with why. The file validates; check it with `autotune space show FILE`, run it with "
        "`autotune study run FILE`.",
    ),
    "doctor": LazyCommand(
        "autotune.cli.doctor", "doctor",
        "Check what a study of SPACE needs: each engine's executable and version, the workload's dataset, the model's\n"
        "tokenizer (and where it was found), files the engines read, GPUs and their free memory, optional extras, the\n"
        "storage, and the studies directory. Exit 1 when an engine cannot be started or a launch lacks what it needs.",
    ),
    "knobs": LazyCommand(
        "autotune.cli.knobs", "knobs_command",
        "Every knob a space, `autotune command --set` and a study's configurations use: its type, default, meaning,\n"
        "and what each engine renders for it (or why the engine refuses it).",
    ),
    "space": LazyCommand("autotune.cli.space", "app", "List, validate and inspect search spaces."),
    "dataset": LazyCommand(
        "autotune.cli.dataset", "app", "Datasets a workload names: where they come from, fetched once."
    ),
    "study": LazyCommand("autotune.cli.study", "app", "Run and inspect tuning studies."),
}  # fmt: skip


def load_command(name: str, entry: LazyCommand) -> Any:
    """The click command typer builds for ``entry``, as it would if the command were registered on the root: a typer
    app is added as a group (``add_typer``), a function as a command (``app.command``)."""
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    holder = typer.Typer(add_completion=False)
    holder.callback()(_no_options)  # a callback keeps typer from collapsing a lone command into the root
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name=name)(target)
    return typer.main.get_command(holder).commands[name]


def _no_options() -> None:
    pass


class LazyGroup(OneLineUsage):
    """A typer group whose subcommands come from ``COMMANDS``, each imported on its first ``get_command``.

    ``commands`` (click's public mapping) stays complete for code that walks it (the help tests): reading it imports
    every command. The root's own help reads ``list_commands`` and ``get_command``; while it is being written
    ``get_command`` answers with a stand-in that carries the table's line, so ``autotune --help`` imports nothing.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loaded: dict[str, Any] = {}  # before click's __init__, which assigns ``commands``
        self._writing_help = False
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> MutableMapping[str, Any]:
        ctx = self.context_class(self, info_name=self.name)  # a walker has none; on_load reads the help option's
        for name in COMMANDS:
            self.get_command(ctx, name)
        return self._loaded

    @commands.setter
    def commands(self, registered: MutableMapping[str, Any]) -> None:  # click's __init__; the root registers none
        self._loaded.update(registered)

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in self._loaded if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if self._writing_help:
            return TyperCommand(name=cmd_name, help=entry.summary)
        command = self._loaded[cmd_name] = load_command(cmd_name, entry)
        self.on_load(command, ctx)
        return command

    def on_load(self, command: Any, ctx: Any) -> None:
        """What the root does to each command it loads (a subclass's hook)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._writing_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._writing_help = False
