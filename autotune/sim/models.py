"""The performance models behind the simulated engine, chosen by the space's ``simulate.performance_model``.

- ``analytic`` (default): autotune.sim.analytic, a step-time model; the only one that can drive the server mode.
- ``table``: replay of measured results from a CSV (see ``TableModel``); direct mode.
- ``aiconfigurator``: NVIDIA's measured-kernel model (optional extra, autotune.sim.aiconfig); direct mode.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from autotune.bench.datasets import BenchRequest
from autotune.config import KNOBS, Hardware, ServerConfig
from autotune.errors import FailureKind, StartupFailure, UsageError
from autotune.sim.analytic import AnalyticProfile, analytic_profile
from autotune.sim.direct import direct_benchmark
from autotune.space.schema import Simulation, Workload

RESULT_COLUMNS = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                  "p99_tpot_ms")  # fmt: skip
# client-side columns: the load, and (optional) the name of the space's workload the row was measured on
CLIENT_COLUMNS = ("max_concurrency", "workload")


class PerformanceModel(Protocol):
    def evaluate(self, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict: ...


class AnalyticModel:
    """The analytic step-time model, run through the scheduler in virtual time."""

    def __init__(self, config: ServerConfig, hardware: Hardware) -> None:
        self.profile: AnalyticProfile = analytic_profile(config, hardware)

    def evaluate(self, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict:
        return direct_benchmark(self.profile, workload, requests, model_name)


@lru_cache(maxsize=8)
def read_table(path: str) -> tuple[tuple[str, ...], tuple[dict[str, str], ...]]:
    try:
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            rows = tuple(reader)
            columns = tuple(reader.fieldnames or ())
    except OSError as exc:
        raise UsageError(f"cannot read the performance table {path}: {exc.strerror}; fix: simulate.table") from None
    unknown = [
        c for c in columns if c not in KNOBS and c not in (*CLIENT_COLUMNS, "status", "message", *RESULT_COLUMNS)
    ]
    if unknown or "status" not in columns or "output_throughput" not in columns:
        raise UsageError(
            f"{path}: columns must be knob names (`autotune knobs`), max_concurrency, workload, status, message and "
            f"result columns "
            f"({', '.join(RESULT_COLUMNS)}); unknown: {unknown or 'none'}, status/output_throughput present: "
            f"{'status' in columns}/{'output_throughput' in columns}"
        )
    if not rows:
        raise UsageError(f"{path}: the performance table has no rows; fix: simulate.table")
    return columns, rows


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@lru_cache(maxsize=8)
def table_index(path: str) -> tuple[tuple[str, ...], dict[tuple[str, ...], dict[str, str]], frozenset[str]]:
    """The table's key columns (knobs, then the client columns it has), its rows by key (the first row of a key wins;
    cells compared stripped and case-blind) and the workload names of its ``workload`` column (empty without one)."""
    columns, rows = read_table(path)
    keys = (*(c for c in columns if c in KNOBS), *(c for c in CLIENT_COLUMNS if c in columns))
    index: dict[tuple[str, ...], dict[str, str]] = {}
    for row in rows:
        index.setdefault(tuple(row[c].strip().lower() for c in keys), row)
    names = frozenset(row["workload"].strip() for row in rows) if "workload" in columns else frozenset()
    return keys, index, names


class TableModel:
    """Replays a CSV of measured results: a row matches when every knob column it has equals the configuration's
    value (an empty cell: the knob unset), ``max_concurrency`` equals the workload's and, in a table with a
    ``workload`` column (one row per configuration, load and workload), that column is the workload's name (as the
    space's ``workloads:`` names it). A knob the file has no column for matches any value; a configuration no row
    matches is ``no_data``; a workload the table has no rows for is the space's error. ``status`` is ``ok`` or a
    FailureKind; an optional ``message`` column gives a failure in the engine's words (what learned rules read)."""

    def __init__(self, path: str, config: ServerConfig) -> None:
        self.path, self.config = path, config
        self.columns, self.rows = read_table(path)

    def _match(self, workload: Workload) -> dict[str, str]:
        keys, index, names = table_index(self.path)
        wanted = {c: _cell(getattr(self.config, c)) for c in keys if c in KNOBS}
        if "max_concurrency" in keys:
            wanted["max_concurrency"] = _cell(workload.max_concurrency)
        if "workload" in keys:
            name = getattr(workload, "name", None)
            if name not in names:
                raise UsageError(
                    f"{self.path}: the table has rows for the workloads {', '.join(sorted(names))}, none for "
                    f"{name!r}; fix: name the space's workloads as the table's `workload` column does"
                )
            wanted["workload"] = name
        row = index.get(tuple(wanted[c].strip().lower() for c in keys))
        if row is None:
            raise StartupFailure(FailureKind.NO_DATA, f"table {self.path}: no row for {wanted}")
        return row

    def evaluate(self, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict:
        row = self._match(workload)
        status = row["status"].strip() or "ok"
        if status != "ok":
            try:
                kind = FailureKind(status)
            except ValueError:
                raise UsageError(f"{self.path}: status {status!r} is not ok or a failure kind") from None
            message = (row.get("message") or "").strip()
            raise StartupFailure(kind, f"table {self.path}: measured {status}" + (f": {message}" if message else ""))
        result = {c: float(row[c]) if row.get(c, "").strip() else math.nan for c in RESULT_COLUMNS}
        for stat in ("median", "p99"):  # a table gives means; the mean stands in where a table has no column
            for metric in ("ttft", "tpot"):
                if f"{stat}_{metric}_ms" not in self.columns:  # (a mean-field model's p99 is its mean)
                    result[f"{stat}_{metric}_ms"] = result[f"mean_{metric}_ms"]
        return within_littles_law(result, workload) | {
            "completed": len(requests), "failed": 0,
            "client": {"simulated": True, "mode": "direct", "performance_model": "table"},
        }  # fmt: skip


def littles_law_bound(workload: Workload, mean_ttft_ms: float, mean_tpot_ms: float) -> float | None:
    """The most total tokens per second a closed-loop client can measure: ``c`` requests in flight (the workload's
    concurrency, at most its prompts), each of ``input_len + output_len`` tokens and taking ``TTFT + (output_len - 1)
    · TPOT``. None where the lengths or the concurrency are not fixed by the workload (a dataset of its own lengths,
    an open-loop rate) or the latencies are missing."""
    if workload.dataset != "random" or workload.max_concurrency is None:
        return None
    seconds = (mean_ttft_ms + (workload.output_len - 1) * mean_tpot_ms) / 1000
    if not seconds > 0:  # NaN or zero latencies bound nothing
        return None
    in_flight = min(workload.max_concurrency, workload.num_prompts)
    return in_flight * (workload.input_len + workload.output_len) / seconds


def within_littles_law(result: dict, workload: Workload) -> dict:
    """A table row as a client could measure it: throughput above what the row's own latencies allow (Little's law,
    ``littles_law_bound``) is cut to that bound, output throughput in the same proportion. Why: tables made from a
    model's output rate times (in + out) / out multiply any error in that rate by up to 321 (32000/100 prompts):
    rows 32x over the bound led a landscape's optimum, a point no server could reach and no sweep would find. The
    latencies are kept: they are what the row's requests waited."""
    bound = littles_law_bound(workload, result["mean_ttft_ms"], result["mean_tpot_ms"])
    total = result["total_token_throughput"]
    if bound is None or not total > bound:
        return result
    return result | {"total_token_throughput": bound, "output_throughput": result["output_throughput"] * bound / total}


def build_model(simulation: Simulation, config: ServerConfig, hardware: Hardware) -> PerformanceModel:
    """The space's performance model for ``config``.

    Raises:
        StartupFailure: the configuration would not start in the model.
    """
    if simulation.performance_model == "table":
        return TableModel(str(Path(simulation.table or "")), config)
    if simulation.performance_model == "aiconfigurator":
        from autotune.sim.aiconfig import AiconfiguratorModel

        return AiconfiguratorModel(config, hardware)
    return AnalyticModel(config, hardware)
