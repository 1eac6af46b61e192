"""Little's law on the landscape tables: how far each table's throughput is above what its own latencies allow.

    .venv/bin/python benchmarks/littles_law.py [TABLE.yaml ...]   (default: every landscape under benchmarks/landscapes)

With ``c`` requests in flight, each of ``in + out`` tokens taking ``TTFT + (out - 1) · TPOT``, a server carries at
most ``c · (in + out) / (TTFT + (out - 1) · TPOT)`` tokens per second (the tables are mean-field: their latencies are
means). A row above that bound is not a measurement any server could make. For each table and workload it prints
the feasible (``ok``) rows, how many are over 1.5× the bound, the largest ratio with its row, and how many rows the
table model cuts (any row over the bound with at most ``min(concurrency, num_prompts)`` requests in flight). The load sweep
assumes throughput grows with load (``autotune/search/sweep.py``): a light load far over the bound is a point the
sweep may never measure. The table model replays such a row cut to the bound (``autotune.sim.models.within_littles_law``,
since 2026-12-05); this script reads the tables as written. Benchmarks are not tests: it prints, it does not assert.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.sim.models import littles_law_bound  # noqa: E402
from autotune.space.schema import Workload  # noqa: E402

OVER = 1.5  # rows above this many times the bound are counted


def workload_lengths(space: dict) -> dict[str, tuple[int, int]]:
    """Each workload's (input, output) tokens by the name the table's ``workload`` column uses ("" for one)."""
    listed = space.get("workloads") or [space["workload"]]
    return {("" if "workloads" not in space else w["name"]): (w["input_len"], w["output_len"]) for w in listed}


def check(space_path: Path) -> list[str]:
    space = yaml.safe_load(space_path.read_text())
    lengths = workload_lengths(space)
    counts: dict[str, list] = defaultdict(lambda: [0, 0, 0.0, None, 0])  # rows, over, worst ratio, worst row, cut
    # what the table model cuts, by its own bound (the workload as the space writes it, at the row's concurrency)
    workloads = {("" if "workloads" not in space else w["name"]): Workload.model_validate(w)
                 for w in space.get("workloads") or [space["workload"]]}  # fmt: skip
    with (REPO / space["simulate"]["table"]).open() as table:
        for row in csv.DictReader(table):
            if row["status"] != "ok":
                continue
            name = row.get("workload") or ""
            if "workloads" not in space and name and name != space["workload"].get("name"):
                continue  # a one-workload space on a several-workload table: its own workload's rows
            inp, out = lengths.get(name) or lengths[""]
            seconds = (float(row["mean_ttft_ms"]) + (out - 1) * float(row["mean_tpot_ms"])) / 1000
            ratio = float(row["total_token_throughput"]) / (int(row["max_concurrency"]) * (inp + out) / seconds)
            sent = (workloads.get(name) or workloads[""]).model_copy(
                update={"max_concurrency": int(row["max_concurrency"])}
            )
            bound = littles_law_bound(sent, float(row["mean_ttft_ms"]), float(row["mean_tpot_ms"]))
            entry = counts[name]
            entry[4] += bound is not None and float(row["total_token_throughput"]) > bound
            entry[0] += 1
            entry[1] += ratio > OVER
            if ratio > entry[2]:
                entry[2], entry[3] = ratio, row
    lines = []
    for name, (rows, over, worst, row, cut) in counts.items():
        where = {k: v for k, v in (row or {}).items() if v and k in ("tp", "dp", "ep", "dp_attention",
                 "max_num_batched_tokens", "max_concurrency")}  # fmt: skip
        lines.append(f"{space['simulate']['table']} {name or space['workload'].get('name', '')}: {over}/{rows} rows "
                     f"over {OVER}x the bound; worst {worst:.1f}x at {where}; the table model cuts {cut} "
                     f"(at most min(concurrency, num_prompts) in flight)")  # fmt: skip
    return lines


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted((REPO / "benchmarks" / "landscapes").glob("**/*.yaml"))
    seen = set()
    for path in paths:
        space = yaml.safe_load(path.read_text())
        table = (space.get("simulate") or {}).get("table") if isinstance(space, dict) else None  # not pairs.yaml
        if not table or table in seen:  # a table once, by the first space that replays it (mix/ before transfer/)
            continue
        seen.add(table)
        for line in check(path):
            print(line)


if __name__ == "__main__":
    main()
