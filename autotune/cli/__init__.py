"""The ``autotune`` command line. Errors become one line on stderr and an exit code (1 runtime, 2 usage)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperOption

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


def _flags_take_no_value() -> None:
    """Typer's rich help prints a flag's type as ``<bool>``, as if it took a value (``--json <bool>``); its plain help
    does not. A flag (``--json``, ``--simulate/--no-simulate``, ``--help``) shows no type column, as in click."""
    display_type_rich = TyperOption.display_type_rich
    if getattr(display_type_rich, "flags_take_no_value", False):
        return

    def display(self: TyperOption, ctx) -> str | None:
        return None if self.is_flag else display_type_rich(self, ctx)

    display.flags_take_no_value = True
    TyperOption.display_type_rich = display


_flags_take_no_value()
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
    from autotune.cli import bench, command, dashboard, doctor, init, space, study, upgrade
    from autotune.cli.knobs import knobs_command

    study.app.command(name="upgrade")(upgrade.upgrade_command)  # here: the upgrade uses study's printing
    app.add_typer(space.app, name="space")
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
