"""``autotune study``: the study loop (issue #4 builds it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Run and inspect tuning studies.")


@app.command()
def run(space: Annotated[Path | None, typer.Argument(help="search-space YAML")] = None) -> None:
    """Run a study (not built yet: it prints what to use meanwhile and exits 1)."""
    print(
        "autotune: study run is not built yet; for now `autotune space show FILE` and `autotune command FILE` "
        "render and check configurations of a space",
        file=sys.stderr,
    )
    raise typer.Exit(1)
