"""The ``autotune`` command line. Errors become one line on stderr and an exit code (1 runtime, 2 usage).

Each subcommand's module is imported only when that command runs (autotune.cli.lazy_group), and this module imports
nothing heavy (Optuna, pydantic-settings) at its top: ``autotune --version`` and ``autotune --help`` stay fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from autotune import __version__
from autotune.cli.lazy_group import LazyGroup
from autotune.errors import AutotuneError


class _OneLineErrors(LazyGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            if _debug():
                raise
            print(f"autotune: error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # a disk full or read-only under a study: one line with the fix, as our own errors
            from autotune.search.storage import unwritable  # Optuna: imported only when an OSError needs it

            if (error := unwritable(exc)) is None or _debug():
                raise
            print(f"autotune: error: {error}", file=sys.stderr)
            raise typer.Exit(error.exit_code) from None

    def parse_args(self, ctx, args):
        # before the root's own options (its --help is one of them); not its subcommands': reading them would import
        # every one, so each gets it when it is loaded (on_load)
        _flags_take_no_value(self, ctx, subcommands=False)
        return super().parse_args(ctx, args)

    def on_load(self, command, ctx):
        _flags_take_no_value(command, ctx)


def _debug() -> bool:
    from autotune.settings import Settings  # pydantic-settings: read only when an error is being reported

    return Settings().debug


def _flags_take_no_value(command, ctx, subcommands: bool = True) -> None:
    """Recent typer's rich help prints a flag's type as ``<bool>``, as if it took a value (``--json <bool>``); click's
    plain help prints none. A flag (``--json``, ``--simulate/--no-simulate``, ``--help``) of every command gets an empty
    metavar, which the help shows in place of the type, in every typer: click's public ``Parameter.metavar``, set on
    the options ``Command.get_params`` gives (the help option included)."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    if not subcommands:
        return
    for sub in getattr(command, "commands", {}).values():  # a group's (click's public ``Group.commands``)
        _flags_take_no_value(sub, ctx)


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    suggest_commands=False,  # typer's guess reads every command (imports them all); usage.py words its own guess
    help="Bayesian autotuner for LLM inference servers (vLLM, SGLang, TensorRT-LLM). Start with `autotune study run` "
    "(a simulated study, no GPU needed), then `autotune init --model HUB_ID_OR_DIR` for your own model.",
)


def _print_version(value: bool) -> None:
    if value:
        print(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    pass


def main() -> None:
    app()
