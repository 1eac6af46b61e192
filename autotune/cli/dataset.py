"""``autotune dataset fetch NAME``: download a public dataset a space names into the cache every study reads."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from autotune.bench import fetch as datasets
from autotune.cli.options import JsonOpt

app = typer.Typer(no_args_is_help=True, help="Datasets a workload names: where they come from, fetched once.")


@app.command(name="fetch")
def fetch_command(
    name: Annotated[str, typer.Argument(metavar="DATASET", help=f"the dataset: {', '.join(datasets.DATASETS)}")],
    as_json: JsonOpt = False,
) -> None:
    """Download DATASET into the cache ($AUTOTUNE_CACHE_DIR, default ~/.cache/autotune), where every study whose
    workload names its file finds it; a dataset already there is not downloaded again."""
    console = Console(stderr=True)
    with Progress(TextColumn(name), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console,
                  transient=True) as progress:  # fmt: skip
        task = progress.add_task(name, total=None)
        path = datasets.fetch(name, on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    if as_json:
        print(json.dumps({"dataset": name, "path": str(path), "bytes": path.stat().st_size}))
    else:
        print(path)


@app.command(name="list")
def list_command(as_json: JsonOpt = False) -> None:
    """The datasets `fetch` knows: name, file, where it is published, and whether the cache has it."""
    rows = [{"name": r.name, "file": r.file_name, "url": r.url, "approx_mb": r.approx_mb,
             "cached": datasets.cached_file(r.file_name).exists()} for r in datasets.DATASETS.values()]  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    for row in rows:
        state = "cached" if row["cached"] else f"not fetched (~{row['approx_mb']} MB)"
        print(f"{row['name']}: {row['file']}, {state}; from {row['url']}")
