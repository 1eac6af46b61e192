"""``autotune init``: write a search space for your model and machine."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.options import GPUS_HELP
from autotune.errors import UsageError
from autotune.search.names import ALLOWED, is_study_name
from autotune.serving.gpus import parse_gpus
from autotune.space.files import load_space
from autotune.space.init import Request, write_space


def init(
    model: Annotated[
        str,
        typer.Option(
            help="a local model directory (its config.json is read) or a known model id, e.g. deepseek-ai/DeepSeek-V3.2"
        ),
    ],
    gpus: Annotated[str, typer.Option(help=f"the node's GPUs (the space is written for that many): {GPUS_HELP}")] = "8",
    gpu_memory_gb: Annotated[float, typer.Option(min=1, help="memory of one GPU, in GB (H200: 141, H100: 80)")] = 141,
    gpu: Annotated[str | None, typer.Option(help="GPU model, e.g. H200 (for the simulator and the record)")] = None,
    engine: Annotated[
        list[str] | None, typer.Option(help="engine to include: vllm, sglang or trtllm; repeatable (default: vllm)")
    ] = None,
    workload: Annotated[
        list[str] | None,
        typer.Option(
            help="sharegpt, or random:IN:OUT for random prompts of IN tokens in and OUT out (default "
            "random:1024:256); repeatable: every launch is measured on each, the study tunes their mix"
        ),
    ] = None,
    seed_suite: Annotated[
        bool,
        typer.Option(
            help="the seed study's six workloads (ShareGPT, very long, long, medium, short prompts, generation-heavy), "
            "lengths scaled to the model's context: one launch command for all"
        ),
    ] = False,
    slo: Annotated[
        list[str] | None, typer.Option(help="latency limit METRIC=MS, e.g. p99_tpot_ms=50; repeatable")
    ] = None,
    simulate: Annotated[
        bool,
        typer.Option(
            help="add a `simulate` section: trials run on autotune's simulator (no GPU, SIMULATED); the study's "
            "name ends in -simulated (unless given by --name)"
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="file to write, its stem the study's name (default: print the space)"),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="the study's name, the space's `name:` (default: the output file's stem, e.g. my for -o my.yaml; "
            "without -o the model and GPU count)"
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="overwrite the output file if it exists")] = False,
) -> None:
    """Write a search space for your model and machine: the layouts that fit, the knobs that apply, each commented
    with why. The file validates; check it with `autotune space show FILE`, run it with `autotune study run FILE`."""
    if name is not None and not is_study_name(name):
        raise UsageError(f"--name {name!r}: a study name is {ALLOWED}; fix: e.g. --name my-study")
    if name is None and output is not None and not is_study_name(output.stem):
        raise UsageError(f"-o {output}: its stem {output.stem!r} names the study, and a study name is {ALLOWED}; "
                         "fix: --name NAME, or another -o")  # fmt: skip
    request = Request(model=model, gpus=len(parse_gpus(gpus)), gpu_memory_gb=gpu_memory_gb, engines=tuple(engine or ["vllm"]),
                      workloads=tuple(workload or ()), seed_suite=seed_suite, slo=tuple(slo or ()), gpu=gpu,
                      simulate=simulate, name=name, output_stem=output.stem if output is not None else None)  # fmt: skip
    text = write_space(request)
    if output is None:
        print(text, end="")
        return
    if output.exists() and not force:
        raise UsageError(f"{output} exists; fix: --force to overwrite it, or another -o")
    output.write_text(text)
    space = load_space(output)  # what init writes must validate; a failure here is a bug worth a loud error
    print(f"wrote {output}: {', '.join(f'{e}: {space.launch_size(e)} launch configurations' for e in space.engines)}"
          f" × {len(space.load_levels(next(iter(space.engines))))} loads; study {space.name}", file=sys.stderr)  # fmt: skip
    print(f"next: autotune doctor {shlex.quote(str(output))}", file=sys.stderr)
