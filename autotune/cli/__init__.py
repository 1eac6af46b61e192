"""The ``autotune`` command line. Errors become one line on stderr and an exit code (1 runtime, 2 usage)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from autotune import __version__
from autotune.cli.usage import OneLineUsage
from autotune.errors import AutotuneError
from autotune.search.storage import unwritable
from autotune.settings import Settings


class _OneLineErrors(OneLineUsage):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            if Settings().debug:
                raise
            print(f"autotune: error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # a disk full or read-only under a study: one line with the fix, as our own errors
            if (error := unwritable(exc)) is None or Settings().debug:
                raise
            print(f"autotune: error: {error}", file=sys.stderr)
            raise typer.Exit(error.exit_code) from None

    def parse_args(self, ctx, args):
        _flags_take_no_value(self, ctx)  # before the root's own options: its --help is one of them
        return super().parse_args(ctx, args)


def _flags_take_no_value(command, ctx) -> None:
    """Recent typer's rich help prints a flag's type as ``<bool>``, as if it took a value (``--json <bool>``); click's
    plain help prints none. A flag (``--json``, ``--simulate/--no-simulate``, ``--help``) of every command gets an empty
    metavar, which the help shows in place of the type, in every typer: click's public ``Parameter.metavar``, set on
    the options ``Command.get_params`` gives (the help option included)."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():  # a group's (click's public ``Group.commands``)
        _flags_take_no_value(sub, ctx)


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Bayesian autotuner for LLM inference servers (vLLM, SGLang, TensorRT-LLM). Start with `autotune study run` "
    "(a simulated study, no GPU needed), then `autotune init` for your own model.",
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


def _register() -> None:
    from autotune.cli import bench, command, dashboard, dataset, doctor, init, space, study, upgrade
    from autotune.cli.knobs import knobs_command

    study.app.command(name="upgrade")(upgrade.upgrade_command)  # here: the upgrade uses study's printing
    app.add_typer(space.app, name="space")
    app.add_typer(dataset.app, name="dataset")
    app.command(name="bench")(bench.bench)
    app.add_typer(study.app, name="study")
    app.command(name="command")(command.command)
    app.command(name="dashboard")(dashboard.dashboard)
    app.command(name="init")(init.init)
    app.command(name="doctor")(doctor.doctor)
    app.command(name="knobs")(knobs_command)


_register()


def main() -> None:
    app()
