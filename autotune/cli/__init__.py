"""The ``autotune`` command line. Errors become one line on stderr and an exit code (1 runtime, 2 usage)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from autotune import __version__
from autotune.errors import AutotuneError
from autotune.settings import Settings


class _OneLineErrors(TyperGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            if Settings().debug:
                raise
            print(f"autotune: error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None


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
    from autotune.cli import bench, command, dashboard, doctor, init, space, study
    from autotune.cli.knobs import knobs_command

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
