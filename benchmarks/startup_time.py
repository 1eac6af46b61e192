"""CPU time of ``autotune --version`` and ``autotune --help``: the cost every command pays before it does anything.

    .venv/bin/python benchmarks/startup_time.py [--runs 5] [--source DIR]

Each command runs ``--runs`` times as its own process (``python -m autotune``, a cold interpreter each time); what is
reported is the median of its CPU time (user + system, from ``getrusage`` of the finished child), not wall time, which
the other processes on a shared machine would distort. Two anchors, measured in the same run and on the same machine,
make the numbers comparable across machines: ``python -c pass`` (the interpreter alone) and ``python -c 'import
optuna'`` (what every command paid before the root CLI loaded its subcommands lazily). ``--source DIR`` measures
another checkout's ``autotune`` (e.g. an older commit unpacked with ``git archive``) with this interpreter.
Benchmarks are not tests: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANCHORS = {"python -c pass": ["-c", "pass"], "python -c 'import optuna'": ["-c", "import optuna"]}
COMMANDS = {"autotune --version": ["-m", "autotune", "--version"], "autotune --help": ["-m", "autotune", "--help"]}


def cpu_seconds(arguments: list[str], source: Path) -> float:
    """User + system CPU seconds of one ``python ARGUMENTS`` process, importing autotune from ``source``."""
    env = {**os.environ, "PYTHONPATH": str(source), "COLUMNS": "80"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # in the checkout: `python -m` puts the working directory ahead of PYTHONPATH
    subprocess.run([sys.executable, *arguments], env=env, cwd=source, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cpu(arguments: list[str], source: Path, runs: int) -> float:
    cpu_seconds(arguments, source)  # warms the page cache and the bytecode cache: not counted
    return statistics.median(cpu_seconds(arguments, source) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per command; the median is reported")
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout whose autotune is measured")
    args = parser.parse_args()
    anchors = {name: median_cpu(arguments, args.source, args.runs) for name, arguments in ANCHORS.items()}
    bare, optuna = anchors.values()
    print(f"source {args.source}, median CPU (user + sys) of {args.runs} runs each")
    for name, seconds in anchors.items():
        print(f"  {name:28} {seconds:6.3f} s")
    for name, arguments in COMMANDS.items():
        seconds = median_cpu(arguments, args.source, args.runs)
        print(f"  {name:28} {seconds:6.3f} s   {seconds / bare:5.1f}× python -c pass, "
              f"{seconds / optuna:4.2f}× import optuna")  # fmt: skip


if __name__ == "__main__":
    main()
