"""Multi-workload performance landscapes (the seed study's six workloads), made with aiconfigurator 0.12.

Run it like make_landscapes.py (aiconfigurator lives in its own venv; its docstring says how to make it)::

    /tmp/aic/bin/python benchmarks/make_mix_landscapes.py  # all four: about two minutes, seconds once cached

For each landscape NAME it writes ``benchmarks/landscapes/mix/NAME.csv`` (one row per launch configuration, workload
and ``max_concurrency``: the table model selects a workload's rows by its ``workload`` column) and
``benchmarks/landscapes/mix/NAME.yaml`` (the space: ``workloads:`` with the six, each with its own SLO), then
``benchmarks/landscapes/mix/README.md`` with the statistics of all of them. The points are estimated exactly as in
make_landscapes.py (``estimate``: agg mode, h200_sxm, pinned database versions, the same two corrections); the raw
estimates are kept in ``--cache``, so that a second run needs no aiconfigurator call.

The workloads are the seed study's (../shared/reference/seed-study.md), as random prompts of fixed lengths:
ShareGPT at its mean lengths (219 in / 197 out, autotune.testing.seedset.SHAREGPT_LIKE), very long 32000/100, long
4000/200, medium 2000/100, short 128/4 and generation-heavy 1000/2000, with the seed's prompt counts. The loads are
the single-workload landscapes' eight concurrencies, except for the two workloads the seed sends 100 prompts of
(very long, generation-heavy): 8…64 and 100 (all at once, as the seed does).

Files are kept small: no p99 columns (the model is mean-field, p99 = mean, and the table model takes the mean where a
table has no p99 column), numbers to 0.1 (to 0.01 below 100), messages cut as make_landscapes.py cuts them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from make_landscapes import (
    LAYOUT_KNOBS,
    LOADS,
    MIX_HEADING,
    MIX_NOTE,
    SGLANG_MOE,
    TRTLLM_MOE,
    TRTLLM_MOE_HALF,
    VERSIONS,
    VLLM_DENSE,
    Landscape,
    _cell,
    _one_line,
    estimate,
    space_document,
)

from autotune.engines import broken_rules
from autotune.space.files import load_space
from autotune.space.schema import Workload

REPO = Path(__file__).resolve().parents[1]
RELATIVE = "benchmarks/landscapes/mix"
OUT = REPO / RELATIVE
CACHE = Path(tempfile.gettempdir()) / "autotune-mix-landscapes.json"
FEW_LOADS = (8, 16, 32, 64, 100)
RESULTS = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "mean_tpot_ms")


@dataclass(frozen=True)
class SeedWorkload:
    name: str
    input_len: int
    output_len: int
    num_prompts: int  # the seed's
    loads: tuple[int, ...] = LOADS
    range_ratio: float = 0.0


SIX = (
    SeedWorkload("sharegpt", 219, 197, 1000, range_ratio=0.9),
    SeedWorkload("very-long", 32000, 100, 100, FEW_LOADS),
    SeedWorkload("long", 4000, 200, 500),
    SeedWorkload("medium", 2000, 100, 500),
    SeedWorkload("short", 128, 4, 1000),
    SeedWorkload("generation", 1000, 2000, 100, FEW_LOADS),
)


@dataclass(frozen=True)
class MixLandscape:
    """A model on an engine with its knobs (as a single-workload Landscape), and each workload's SLO (p99 TTFT, TPOT
    in ms; chosen by ``choose_slo``)."""

    land: Landscape
    slo: dict[str, tuple[float, float]] = field(default_factory=dict)


def _land(name: str, model: str, engine: str, layouts, **knobs) -> Landscape:
    return Landscape(name, model, engine, 1000, 1000, 1, 1, layouts, **knobs)  # lengths, SLO: unused


MBT6 = (8192, 1024, 2048, 4096, 16384, 32768)
LANDS = (
    _land("dsv3-sglang-six", "deepseek-ai/DeepSeek-V3", "sglang", SGLANG_MOE, kv_cache_dtype=(None, "fp8_e4m3"),
          max_num_batched_tokens=(8192, 2048, 4096, 16384, 32768), speculative=(None, "mtp:1"),
          note="the seed's engine; DP attention vs TP, EP, MTP"),
    _land("dsv3-trtllm-six", "deepseek-ai/DeepSeek-V3", "trtllm", TRTLLM_MOE, max_num_batched_tokens=MBT6,
          speculative=(None, "mtp:1"), note="attention DP, EP, MTP"),
    _land("qwen3-235b-trtllm-six", "Qwen/Qwen3-235B-A22B", "trtllm", TRTLLM_MOE_HALF, max_num_batched_tokens=MBT6,
          note="BF16 weights (470 GB); half-machine instances run out of memory"),
    _land("llama3.1-70b-vllm-six", "meta-llama/Meta-Llama-3.1-70B", "vllm", VLLM_DENSE, max_num_batched_tokens=MBT6,
          note="dense, BF16 (141 GB); replicas vs tensor parallelism"),
)  # fmt: skip
# Each workload's SLO: of this grid, the pair (TTFT, TPOT) under which the space's defaults are feasible at some load
# and the share of the workload's (configuration, load) points that are feasible is closest to SLO_SHARE (ties: the
# smaller TTFT, then TPOT). A rule, not a hand pick: nothing in it looks at where the optima fall.
SLO_SHARE = 0.25
TTFT_GRID = (250, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 20000, 30000)
TPOT_GRID = (10, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200, 300, 400, 500)


def choose_slo(land: Landscape, rows: list[dict[str, str]]) -> dict[str, tuple[float, float]]:
    """Each workload's SLO by the rule above."""
    knobs = knobs_of(land)
    default = tuple(rows[0][k] for k in knobs)  # the space's defaults come first
    chosen = {}
    for work in SIX:
        mine = [r for r in rows if r["workload"] == work.name]
        ok = [(float(r["mean_ttft_ms"]), float(r["mean_tpot_ms"]), tuple(r[k] for k in knobs) == default)
              for r in mine if r["status"] == "ok"]  # fmt: skip
        candidates = []
        for ttft in TTFT_GRID:
            for tpot in TPOT_GRID:
                met = [is_default for t, p, is_default in ok if t <= ttft and p <= tpot]
                if any(met):
                    candidates.append((abs(len(met) / len(mine) - SLO_SHARE), ttft, tpot))
        chosen[work.name] = min(candidates)[1:]
    return chosen


def knobs_of(land: Landscape) -> list[str]:
    return [*LAYOUT_KNOBS, "kv_cache_dtype", "max_num_batched_tokens", *(["speculative"] if land.speculative else [])]


def configs(land: Landscape) -> tuple[list, Any]:
    """The launch configurations the static rules accept (the space's defaults first), and the space's hardware."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        document = space_document(land) | {"simulate": {"mode": "direct"}}  # (the table is not written yet)
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        space = load_space(path)
    servers = [p.server for p in space.enumerate(land.engine, launches_only=True)]
    verdicts = broken_rules(land.engine, servers, space.hardware)
    return [s for s, rule in zip(servers, verdicts, strict=True) if rule is None], space.hardware


def estimates(land: Landscape, cache: dict) -> list[dict[str, str]]:
    """Every (configuration, workload, load) row of ``land``, estimated (or read from ``cache``, which it fills)."""
    knobs = knobs_of(land)
    servers, hardware = configs(land)
    rows = []
    for work in SIX:
        for server in servers:
            for load in work.loads:
                row = {k: _cell(getattr(server, k)) for k in knobs} | {"workload": work.name,
                                                                       "max_concurrency": str(load)}  # fmt: skip
                key = json.dumps([land.name, row], sort_keys=True)
                if key not in cache:
                    workload = Workload(input_len=work.input_len, output_len=work.output_len, max_concurrency=load,
                                        num_prompts=work.num_prompts)  # fmt: skip
                    cache[key] = estimate(server, hardware, workload)
                found = cache[key]
                row |= {"status": found["status"], **{k: _number(found.get(k)) for k in RESULTS}}
                rows.append(row | {"message": _one_line(found["message"])})
    return rows


def _number(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def best_by_workload(rows: list[dict[str, str]], knobs: list[str], slo: dict) -> dict[tuple, dict[str, float]]:
    """Each configuration's best SLO-feasible total throughput (and its load) per workload; absent = infeasible."""
    best: dict[tuple, dict[str, float]] = {}
    for row in rows:
        key = tuple(row[k] for k in knobs)
        best.setdefault(key, {})
        ttft, tpot = slo[row["workload"]]
        if row["status"] == "ok" and float(row["mean_ttft_ms"]) <= ttft and float(row["mean_tpot_ms"]) <= tpot:
            value = float(row["total_token_throughput"])
            if value > best[key].get(row["workload"], 0.0):
                best[key][row["workload"]] = value
                best[key][row["workload"] + "@"] = float(row["max_concurrency"])
    return best


def mix_value(per_workload: dict[str, float], baseline: dict[str, float]) -> float | None:
    """The geometric mean of a configuration's best feasible throughput per workload relative to the baseline's (equal
    weights); None where it is infeasible on a workload."""
    if any(w.name not in per_workload for w in SIX):
        return None
    return math.exp(sum(math.log(per_workload[w.name] / baseline[w.name]) for w in SIX) / len(SIX))


def statistics(mix: MixLandscape, rows: list[dict[str, str]]) -> dict:
    knobs = knobs_of(mix.land)
    best = best_by_workload(rows, knobs, mix.slo)
    default = next(iter(best))  # the space's defaults come first
    baseline = best[default]
    label = {key: ", ".join(f"{k}={v}" for k, v in zip(knobs, key, strict=True) if v) for key in best}
    stats: dict[str, Any] = {"configs": len(best), "default_feasible_on": [w.name for w in SIX if w.name in baseline]}
    stats["feasible"] = {w.name: _share(rows, w.name, mix.slo) for w in SIX}
    stats["own"] = {}
    for w in SIX:
        key = max(best, key=lambda k, n=w.name: best[k].get(n, 0.0))
        stats["own"][w.name] = (
            best[key].get(w.name, 0.0),
            f"{label[key]}, max_concurrency={best[key].get(w.name + '@', 0):g}",
        )
    if len(stats["default_feasible_on"]) < len(SIX):
        return stats
    values = {key: v for key in best if (v := mix_value(best[key], baseline)) is not None}
    ranked = sorted(values.values(), reverse=True)
    optimum_key = max(values, key=values.__getitem__)
    loads = ", ".join(f"{w.name} {best[optimum_key][w.name + '@']:g}" for w in SIX)
    sharegpt = max(best, key=lambda k: best[k].get("sharegpt", 0.0))
    stats |= {"mix_feasible": len(values), "optimum": ranked[0], "optimum_config": label[optimum_key],
              "optimum_loads": loads, "optimum_on": dict(best[optimum_key]), "within_1pct": sum(v >= 0.99 * ranked[0] for v in ranked),
              "runner_up": ranked[1] / ranked[0] if len(ranked) > 1 else 0.0,
              "sharegpt_best_on_mix": (values.get(sharegpt) or 0.0) / ranked[0], "sharegpt_best": label[sharegpt],
              "own_on_mix": {w.name: (values.get(max(best, key=lambda k, n=w.name: best[k].get(n, 0.0))) or 0.0)
                             / ranked[0] for w in SIX}}  # fmt: skip
    return stats


def _share(rows: list[dict[str, str]], name: str, slo: dict) -> float:
    mine = [r for r in rows if r["workload"] == name]
    ttft, tpot = slo[name]
    ok = [
        r for r in mine if r["status"] == "ok" and float(r["mean_ttft_ms"]) <= ttft and float(r["mean_tpot_ms"]) <= tpot
    ]
    return len(ok) / len(mine)


def mix_space_document(mix: MixLandscape) -> dict[str, Any]:
    """The autotune space of ``mix``: the single-workload landscape's knobs, ``workloads:`` with the six."""
    land = mix.land
    document = space_document(land)
    document["description"] = (f"SIMULATED {land.model} on {land.engine}, 8×H200, the seed study's six workloads: an "
                               f"aiconfigurator 0.12 landscape replayed from a table ({land.note})")  # fmt: skip
    document["simulate"]["table"] = f"{RELATIVE}/{land.name}.csv"
    del document["workload"]
    workloads = []
    for work in SIX:
        ttft, tpot = mix.slo[work.name]
        entry: dict[str, Any] = {"name": work.name, "dataset": "random", "input_len": work.input_len,
                                 "output_len": work.output_len}  # fmt: skip
        if work.range_ratio:
            entry["range_ratio"] = work.range_ratio
        entry |= {"num_prompts": work.num_prompts, "seed": 42, "slo": {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot}}
        if work.loads != LOADS:
            entry["loads"] = {"max_concurrency": list(work.loads)}
        workloads.append(entry)
    document["workloads"] = workloads
    document["objective"] = {"metrics": [{"name": "total_token_throughput"}], "mix": "geomean"}
    return document


def write(mix: MixLandscape, rows: list[dict[str, str]]) -> None:
    name = mix.land.name
    header = (f"# {name}: generated by benchmarks/make_mix_landscapes.py (aiconfigurator 0.12); do not edit by hand.\n"
              f"# Run from the repository root: autotune study run {RELATIVE}/{name}.yaml\n")  # fmt: skip
    document = yaml.safe_dump(mix_space_document(mix), sort_keys=False, allow_unicode=True, width=120)
    (OUT / f"{name}.yaml").write_text(header + document)
    columns = [*knobs_of(mix.land), "workload", "max_concurrency", "status", *RESULTS, "message"]
    with open(OUT / f"{name}.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


README_HEAD = """# Multi-workload landscapes (aiconfigurator 0.12, 8×H200): the seed study's six workloads

Generated by `benchmarks/make_mix_landscapes.py` (run it with `/tmp/aic/bin/python benchmarks/make_mix_landscapes.py`;
`benchmarks/make_landscapes.py`'s docstring says how to make that venv); do not edit these files by hand. Each is a
pair, as in `benchmarks/landscapes/` (whose README says how the points are estimated: the same code makes these):

- `NAME.csv`: one row per (launch configuration, `workload`, `max_concurrency`); the table model selects a workload's
  rows by its name (the `workload` column). No p99 columns: the model is mean-field (p99 = mean), and the table model
  takes the mean where a table has no p99 column.
- `NAME.yaml`: the space that replays it, with `workloads:` (the six, each with its own SLO and, for the two the seed
  sends 100 prompts of, its own loads) and `objective.mix: geomean`. Run from the repository root:
  `autotune study run benchmarks/landscapes/mix/NAME.yaml`. `benchmarks/mix_efficiency.py` runs them all.

The six workloads (seed-study.md), as random prompts of fixed lengths (input/output tokens, the seed's prompt count):
ShareGPT at its mean lengths 219/197 (1000; `autotune.testing.seedset.SHAREGPT_LIKE`), very long 32000/100 (100),
long 4000/200 (500), medium 2000/100 (500), short 128/4 (1000), generation-heavy 1000/2000 (100). Loads:
`max_concurrency` ∈ {8, 16, 32, 64, 128, 256, 512, 1024}, except very long and generation-heavy: {8, 16, 32, 64, 100}.

Each workload's SLO (p99 TTFT / TPOT, ms) is chosen by a rule (`choose_slo`), not by hand: of a grid of TTFT × TPOT
bounds, the pair under which the space's defaults (the engine's default launch, the study's baseline) are feasible at
some load and the share of the workload's (configuration, load) points that are feasible is closest to 25%. Nothing
in the rule looks at where the optima fall.
A configuration's mix value is the geometric mean over the six workloads of its best SLO-feasible total token
throughput (over the loads) relative to the defaults' (the default `objective.mix: geomean`, equal weights); a
configuration infeasible on one workload is infeasible for the mix. These are simulated numbers from a model, not
measurements.
"""


def readme(summaries: list[tuple[MixLandscape, dict]]) -> str:
    lines = [README_HEAD, "| landscape | model | engine | configs | mix-feasible | mix optimum (× defaults) "
             "| mix optimum's configuration | within 1% | runner-up | ShareGPT-only best | its mix value |",
             "|" + "---|" * 11]  # fmt: skip
    for mix, s in summaries:
        land = mix.land
        lines.append(f"| {land.name} | `{land.model}` | {land.engine} {VERSIONS[land.engine]} | {s['configs']} "
                     f"| {s['mix_feasible']} | {s['optimum']:.3f} | {s['optimum_config']} | {s['within_1pct']} "
                     f"| {s['runner_up']:.1%} | {s['sharegpt_best']} | {s['sharegpt_best_on_mix']:.1%} |")  # fmt: skip
    lines += ["", "Per workload: its SLO, the share of its points that meet it, its own optimum (total tok/s) and "
              "configuration, that configuration's mix value (as a share of the mix optimum; 0 = infeasible on some "
              "workload), and what the mix optimum gives on the workload (as a share of the workload's own optimum: "
              "the price of one launch command for all six).", "",
              "| landscape | workload | SLO TTFT / TPOT | feasible | own optimum | own optimum's configuration "
              "| its mix value | mix optimum on it |", "|" + "---|" * 8]  # fmt: skip
    for mix, s in summaries:
        for work in SIX:
            value, where = s["own"][work.name]
            ttft, tpot = mix.slo[work.name]
            on = s["optimum_on"].get(work.name, 0.0) / value
            lines.append(f"| {mix.land.name} | {work.name} {work.input_len}/{work.output_len} | {ttft:g} / {tpot:g} "
                         f"| {s['feasible'][work.name]:.0%} | {value:,.0f} | {where} "
                         f"| {s['own_on_mix'][work.name]:.1%} | {on:.1%} |")  # fmt: skip
    lines += [
        "",
        "Configurations: the single-workload landscapes' layouts, KV dtypes and prefill chunks (MTP for "
        "DeepSeek). The mix optimum's loads, per workload:",
        "",
    ]
    lines += [f"- **{mix.land.name}** ({mix.land.note}): {s['optimum_loads']}." for mix, s in summaries]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="landscapes to make (default: all)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="raw estimates, kept between runs")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    cache = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    summaries = []
    for land in LANDS:
        if args.names and land.name not in args.names:
            continue
        rows = estimates(land, cache)
        args.cache.write_text(json.dumps(cache))
        mix = MixLandscape(land, choose_slo(land, rows))
        stats = statistics(mix, rows)
        summaries.append((mix, stats))
        feasible = ", ".join(f"{k} {v:.0%}" for k, v in stats["feasible"].items())
        print(f"{mix.land.name}: {stats['configs']} configs, {len(rows)} rows; feasible {feasible}; defaults "
              f"feasible on {len(stats['default_feasible_on'])}/6")  # fmt: skip
        if "optimum" in stats:
            write(mix, rows)
            size = (OUT / f"{mix.land.name}.csv").stat().st_size
            print(f"  mix-feasible {stats['mix_feasible']}, optimum {stats['optimum']:.3f}× defaults at "
                  f"{stats['optimum_config']} ({stats['optimum_loads']}); within 1% {stats['within_1pct']}, "
                  f"runner-up {stats['runner_up']:.1%}; ShareGPT-only best {stats['sharegpt_best']} scores "
                  f"{stats['sharegpt_best_on_mix']:.1%}; own bests on the mix "
                  f"{ {k: round(v, 3) for k, v in stats['own_on_mix'].items()} }; {size / 1024:.0f} KB")  # fmt: skip
    if not args.names and all("optimum" in s for _, s in summaries):
        text = readme(summaries)
        (OUT / "README.md").write_text(text)
        main_readme = OUT.parent / "README.md"  # its section there: make_landscapes.py's note and the summary
        summary = text.split("\n| landscape |", 1)[1].split("\n\n", 1)[0]
        head = main_readme.read_text().split(MIX_HEADING)[0]
        main_readme.write_text(f"{head}{MIX_NOTE}\n\n| landscape |{summary}\n")


if __name__ == "__main__":
    main()
