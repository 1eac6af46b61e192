"""Held-out-style performance landscapes for search-efficiency benchmarks, made with aiconfigurator 0.12.

Run (aiconfigurator lives in its own venv, not the project's; it needs no GPU and no network)::

    python3 -m venv /tmp/aic
    /tmp/aic/bin/pip install -q 'aiconfigurator==0.12.0' 'aiconfigurator-core==0.12.0'
    /tmp/aic/bin/pip install -q -e .
    /tmp/aic/bin/python benchmarks/make_landscapes.py            # all landscapes, about a minute
    /tmp/aic/bin/python benchmarks/make_landscapes.py --explore  # also print how candidate SLOs would cut each one
    /tmp/aic/bin/python benchmarks/make_landscapes.py --reuse-tables  # the spaces and README from the tables there

The landscapes (and their design/evaluation split) are defined in ``benchmarks/landscape_catalog.py``.

For each landscape NAME it writes ``benchmarks/landscapes/NAME.yaml`` (an autotune search space on the simulated
engine with ``performance_model: table``) and ``benchmarks/landscapes/NAME.csv`` (the table: every launch
configuration the space's static rules accept × every ``max_concurrency`` level), then
``benchmarks/landscapes/README.md`` with the statistics of all of them.

Each point is one aiconfigurator estimate (``cli_estimate``, agg mode, h200_sxm, pinned database versions), mapped
from our canonical knobs by ``autotune.sim.aiconfig.AiconfiguratorModel`` with two corrections. An unset
``kv_cache_dtype`` is the engines' ``auto``, i.e. a bf16 KV cache, so it is passed as ``bfloat16`` (the mapping passes
nothing, and aiconfigurator then infers the KV dtype from the checkpoint: FP8 for DeepSeek-V3's FP8 weights). And
under DP attention SGLang divides ``--chunked-prefill-size`` (our ``max_num_batched_tokens``) by ``dp``, so the
per-rank prefill budget aiconfigurator takes (``ctx_tokens``) is ``max_num_batched_tokens // dp`` there.
SGLang's ``dp`` without DP attention runs independent copies of the model: aiconfigurator estimates one copy, and its
throughput is multiplied by ``dp`` (as ``AiconfiguratorModel.evaluate`` does; no landscape before issue #48 has
such a layout, so their tables are unchanged).

Status of a row: ``ok``, or the FailureKind that AiconfiguratorModel raises (``oom`` for aiconfigurator's "OOM: ..."
RuntimeError, ``unsupported`` for its ValueError, ``no_data`` for PerfDataNotAvailableError, ``crash`` otherwise).
aiconfigurator's non-fatal ``kv_cache_warning`` (the batch does not fit the KV-cache budget, so a real engine would
queue or preempt and not run the load it was asked for) is recorded as ``oom`` too. Failure rows carry aiconfigurator's
text in the ``message`` column. aiconfigurator is a mean-field model: its one TTFT and TPOT per point stand in for the
mean and the p99 alike.
"""

from __future__ import annotations

import argparse
import csv
import logging
import warnings
from pathlib import Path
from typing import Any

import yaml
from landscape_catalog import (  # noqa: F401  (re-exported: make_mix_landscapes and make_transfer_landscapes)
    LANDSCAPES,
    RELATIVE,
    SGLANG_MOE,
    TRTLLM_MOE,
    TRTLLM_MOE_HALF,
    VLLM_DENSE,
    Landscape,
    split_of,
)

from autotune.config import Hardware, ServerConfig
from autotune.engines import broken_rules
from autotune.errors import FailureKind
from autotune.sim.aiconfig import AiconfiguratorModel
from autotune.sim.analytic import engine_layout
from autotune.space.files import parse_space
from autotune.space.schema import Workload

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / RELATIVE
HARDWARE = {"gpus": 8, "gpu_memory_gb": 141, "gpu": "H200"}
VERSIONS = {"vllm": "0.13.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc5"}  # the seed study's engine releases
LOADS = (8, 16, 32, 64, 128, 256, 512, 1024)
NUM_PROMPTS = 200
RESULTS = ("output_throughput", "total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")
LAYOUT_KNOBS = ("tp", "dp", "ep", "dp_attention")
MESSAGE_CHARS = 160  # aiconfigurator's messages are long; the start names the cause
TIGHT, USUAL, LOOSE = (0.05, 0.12), (0.11, 0.22), (0.30, 0.50)  # --explore's bands of the feasible share


def space_document(land: Landscape) -> dict[str, Any]:
    """The autotune search space of ``land``, as the YAML document it is written as."""
    params: dict[str, Any] = {"layout": {"tied": [dict(o) for o in land.layouts], "default": dict(land.layouts[0])}}
    params["kv_cache_dtype"] = {"choices": list(land.kv_cache_dtype), "default": land.kv_cache_dtype[0]}
    params["max_num_batched_tokens"] = {
        "choices": list(land.max_num_batched_tokens),
        "default": land.max_num_batched_tokens[0],
    }
    if land.speculative:
        params["speculative"] = {"choices": list(land.speculative), "default": land.speculative[0]}
    return {
        "name": land.name,
        "description": f"SIMULATED {land.model} on {land.engine}, 8×H200, random {land.input_len}/{land.output_len}: "
        f"an aiconfigurator 0.12 landscape replayed from a table ({land.note})",
        "trials": 50,
        "simulate": {"performance_model": "table", "mode": "direct", "table": f"{land.folder}/{land.name}.csv"},
        "hardware": dict(HARDWARE),
        "engines": {land.engine: {"version": land.version or VERSIONS[land.engine], "fixed": {"model": land.model},
                                  "params": params}},
        "params": {"max_concurrency": {"choices": list(LOADS), "default": 64}},
        "workload": {"dataset": "random", "input_len": land.input_len, "output_len": land.output_len,
                     "num_prompts": NUM_PROMPTS, "seed": 42},
        "objective": {"metrics": [{"name": "total_token_throughput"}],
                      "slo": {"p99_ttft_ms": land.ttft_ms, "p99_tpot_ms": land.tpot_ms}},
    }  # fmt: skip


def _estimator():
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # aiconfigurator logs a fallback note for nearly every kernel table it loads
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError

    return cli_estimate, PerfDataNotAvailableError


def _arguments(model: AiconfiguratorModel, config: ServerConfig, workload: Workload,
               version: str | None = None) -> dict[str, Any]:  # fmt: skip
    arguments = model._arguments(workload)
    if version:
        arguments["backend_version"] = version  # another of the databases aiconfigurator ships than the pinned one
    if not (config.kv_cache_dtype or "").startswith("fp8"):
        arguments["kvcache_quant_mode"] = "bfloat16"  # the engines' auto; aiconfigurator would take the checkpoint's
    if config.engine == "sglang" and config.dp_attention and config.max_num_batched_tokens:
        # SGLang divides --chunked-prefill-size by dp_size under DP attention (server_args: "The chunked prefill
        # size is adjusted to ..."); aiconfigurator's ctx_tokens is per attention-DP rank
        arguments["ctx_tokens"] = config.max_num_batched_tokens // (config.dp or 1)
    return arguments


def estimate(
    config: ServerConfig, hardware: Hardware, workload: Workload, version: str | None = None
) -> dict[str, Any]:
    """One table row's status, message and results for ``config`` under ``workload`` (on database ``version``)."""
    cli_estimate, no_data = _estimator()
    model = AiconfiguratorModel(config, hardware)
    try:
        result = cli_estimate(model.model, model.system, **_arguments(model, config, workload, version))
    except no_data as exc:
        return {"status": FailureKind.NO_DATA.value, "message": str(exc)}
    except RuntimeError as exc:
        kind = FailureKind.OOM if str(exc).startswith("OOM") else FailureKind.CRASH
        return {"status": kind.value, "message": str(exc)}
    except ValueError as exc:
        return {"status": FailureKind.UNSUPPORTED.value, "message": str(exc)}
    if result.kv_cache_warning:
        return {"status": FailureKind.OOM.value, "message": f"kv_cache_warning: {result.kv_cache_warning}"}
    raw = result.raw
    layout = engine_layout(config)  # SGLang's dp without DP attention: independent copies, estimated one at a time
    replicas = layout.ranks if layout.independent_replicas else 1
    output = float(raw["tokens/s/gpu"]) * int(raw["num_total_gpus"]) * replicas
    total = output * (workload.input_len + workload.output_len) / workload.output_len
    ttft, tpot = float(result.ttft), float(result.tpot)
    values = (output, total, ttft, ttft, tpot, tpot)
    return {"status": "ok", "message": ""} | {k: round(v, 2) for k, v in zip(RESULTS, values, strict=True)}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def build(land: Landscape, reuse_table: bool = False) -> tuple[list[str], list[dict[str, str]], int]:
    """Write NAME.yaml, evaluate every accepted point, write NAME.csv; returns the columns, rows and rejected count.

    ``reuse_table``: take the rows of the NAME.csv already there instead of estimating them again (a new SLO changes
    only the space, not the table)."""
    path = REPO / land.folder / f"{land.name}.yaml"
    header = (f"# {land.name}: generated by benchmarks/make_landscapes.py (aiconfigurator 0.12); do not edit by hand.\n"
              f"# Run from the repository root: autotune study run {land.folder}/{land.name}.yaml\n")  # fmt: skip
    document = space_document(land)
    path.write_text(header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120))
    space = parse_space(yaml.safe_dump(document | {"simulate": {"mode": "direct"}}), str(path))  # (no table yet)
    hardware = space.hardware
    knobs = [*LAYOUT_KNOBS, "kv_cache_dtype", "max_num_batched_tokens", *(["speculative"] if land.speculative else [])]
    columns = [*knobs, "max_concurrency", "status", *RESULTS, "message"]
    points = list(space.enumerate(land.engine))
    verdicts = list(broken_rules(land.engine, (p.server for p in points), hardware))
    table = REPO / land.folder / f"{land.name}.csv"
    rejected = sum(rule is not None for rule in verdicts)
    if reuse_table and table.exists():
        with open(table, newline="") as file:
            return knobs, list(csv.DictReader(file)), rejected // len(LOADS)
    rows: list[dict[str, str]] = []
    for point, rule in zip(points, verdicts, strict=True):
        if rule is not None:
            continue
        workload = space.workload.model_copy(update=point.client)
        found = estimate(point.server, hardware, workload, land.version)
        row = {k: _cell(getattr(point.server, k)) for k in knobs} | {"max_concurrency": str(workload.max_concurrency)}
        row |= {"status": found["status"], "message": _one_line(found["message"])}
        row |= {k: _cell(found.get(k)) for k in RESULTS}
        rows.append(row)
    with open(table, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return knobs, rows, rejected // len(LOADS)


def _config_label(row: dict[str, str], knobs: list[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in knobs if row[k]) or "defaults"


def statistics(land: Landscape, knobs: list[str], rows: list[dict[str, str]], ttft: float, tpot: float) -> dict:
    """Share of SLO-feasible and OOM points, the optimum, and how many launch configurations come within 1% of it."""
    best_of: dict[tuple[str, ...], tuple[float, dict[str, str]]] = {}
    feasible = 0
    for row in rows:
        key = tuple(row[k] for k in knobs)
        best_of.setdefault(key, (0.0, row))
        if row["status"] == "ok" and float(row["p99_ttft_ms"]) <= ttft and float(row["p99_tpot_ms"]) <= tpot:
            feasible += 1
            value = float(row["total_token_throughput"])
            if value > best_of[key][0]:
                best_of[key] = (value, row)
    optimum, where = max(best_of.values(), key=lambda item: item[0])
    ranked = sorted((v for v, _ in best_of.values()), reverse=True)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {
        "configs": len(best_of),
        "points": len(rows),
        "feasible": feasible / len(rows),
        "oom": statuses.get("oom", 0) / len(rows),
        "statuses": statuses,
        "within_1pct": sum(v >= 0.99 * optimum for v in ranked) if optimum else 0,
        "within_5pct": sum(v >= 0.95 * optimum for v in ranked) if optimum else 0,
        "runner_up": ranked[1] / optimum if optimum and len(ranked) > 1 else 0.0,
        "optimum": optimum,
        "optimum_config": f"{_config_label(where, knobs)}, max_concurrency={where['max_concurrency']}",
    }


def explore(land: Landscape, knobs: list[str], rows: list[dict[str, str]], band: tuple[float, float] = USUAL) -> None:
    """Print how a grid of candidate SLOs cuts the landscape (feasible share, configurations within 1%), those whose
    feasible share is within ``band``."""
    ok = [r for r in rows if r["status"] == "ok"]
    ttfts = sorted({round(float(r["p99_ttft_ms"]), -2) for r in ok})
    tpots = sorted({round(float(r["p99_tpot_ms"])) for r in ok})
    print(
        f"  candidate SLOs (ttft, tpot: feasible%/within 1%/runner-up); measured ttft {ttfts[0]:g}..{ttfts[-1]:g}, "
        f"tpot {tpots[0]:g}..{tpots[-1]:g}"
    )
    for ttft in (50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000):
        cells = []
        for tpot in (3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100):
            stats = statistics(land, knobs, rows, ttft, tpot)
            if band[0] <= stats["feasible"] <= band[1]:
                cells.append(f"{tpot}:{stats['feasible']:.0%}/{stats['within_1pct']}/{stats['runner_up']:.3f}")
        if cells:
            print(f"    ttft {ttft}: " + "  ".join(cells))


README_HEAD = """# Performance landscapes (aiconfigurator 0.12, 8×H200) for search-efficiency benchmarks

Generated by `benchmarks/make_landscapes.py` (run it with `/tmp/aic/bin/python benchmarks/make_landscapes.py`; its
docstring says how to make that venv); do not edit these files by hand. Each landscape is a pair:

- `NAME.csv`: a table for the simulated engine's table model: one row per (launch configuration, `max_concurrency`),
  columns = canonical knobs (`tp, dp, ep, dp_attention, kv_cache_dtype, max_num_batched_tokens[, speculative]`; an
  empty cell = the knob unset), `max_concurrency`, `status` (`ok` or a failure kind), the vllm-bench result columns
  and `message` (aiconfigurator's text for a failure).
- `NAME.yaml`: the autotune space that replays it (`simulate: {performance_model: table, mode: direct}`), with the
  landscape's workload and SLO. Run from the repository root: `autotune study run benchmarks/landscapes/NAME.yaml`.

How they were made: every launch configuration the space's static rules accept (layout tied as TP/DP/EP/DP attention,
KV-cache dtype, prefill chunk = `max_num_batched_tokens`, MTP with one draft token for DeepSeek) × 8 client
concurrencies (8…1024) is one `cli_estimate` of aiconfigurator 0.12 (agg mode, `h200_sxm`, pinned databases: sglang
0.5.14, trtllm 1.3.0rc20, vllm 0.24.0), mapped from our knobs by `autotune.sim.aiconfig.AiconfiguratorModel` (batch
per attention-DP rank = concurrency / ranks, MTP acceptance 0.85), except that an unset KV dtype is passed as bf16 (the
engines' `auto`), that SGLang's prefill chunk per DP-attention rank is `max_num_batched_tokens // dp` (SGLang
divides `--chunked-prefill-size` by dp), and that SGLang's dp replicas without DP attention give one copy's estimate
× dp. aiconfigurator's OOM is `oom`; so is its non-fatal `kv_cache_warning` (the batch does not fit the KV cache); its
ValueError is `unsupported`, missing kernel data `no_data`. It is a mean-field model: p99 = mean.
The SLO of each of the first six was chosen (with `--explore`) so that 11–22% of the (configuration, load) points are
feasible and, where possible, a single configuration comes within 1% of the optimum (the best total token throughput
among SLO-feasible points). Those added for issue #48 have tight SLOs (5–12% feasible: a sharp landscape) or loose
ones (30–50%: a flat one), as `--explore --band tight|loose` showed. These are simulated numbers from a model, not
measurements. The landscapes are defined in `benchmarks/landscape_catalog.py`.

**The design/evaluation split**, fixed by the name alone (`landscape_catalog.split_of`): the last hex digit of
`sha256(name)` even = *design* (the search may be tuned on it), odd = *evaluation* (`benchmarks/search_efficiency.py
--split eval` reports it; no change is tuned on it). `tests/test_landscape_split.py` checks that each half holds at
least 10 landscapes and all three engines.

"""


MIX_HEADING = "## Multi-workload landscapes"
MIX_NOTE = f"""{MIX_HEADING}

`mix/` holds four more, made by `benchmarks/make_mix_landscapes.py` from the same estimates: the seed study's six
workloads (ShareGPT, very long, long, medium, short prompts, generation-heavy) in one table with a `workload` column,
and a space with `workloads:` (each its own SLO) and `objective.mix: geomean`, for DeepSeek-V3 on SGLang and on
TRT-LLM, Qwen3-235B-A22B on TRT-LLM and Llama-3.1-70B on vLLM. `mix/README.md` has their table: the mix optimum and
its configuration, each workload's own optimum, and what the ShareGPT-only best scores on the mix;
`benchmarks/mix_efficiency.py` runs studies on them."""


def readme(summaries: list[tuple[Landscape, dict]]) -> str:
    lines = [README_HEAD.rstrip() + "\n", ""]
    lines.append("| landscape | split | model | engine | workload in/out | SLO p99 TTFT / TPOT (ms) | configs | loads "
                 "| feasible | OOM | other failures | configs within 1% (5%) | runner-up | optimum (total tok/s) "
                 "| optimum's configuration |")  # fmt: skip
    lines.append("|" + "---|" * 15)
    for land, s in summaries:
        other = ", ".join(
            f"{k} {v / s['points']:.0%}" for k, v in sorted(s["statuses"].items()) if k not in ("ok", "oom")
        )
        lines.append(
            f"| {land.name} | {split_of(land.name)} | `{land.model}` | {land.engine} {VERSIONS[land.engine]} "
            f"| {land.input_len}/{land.output_len} "
            f"| {land.ttft_ms:g} / {land.tpot_ms:g} | {s['configs']} | {len(LOADS)} | {s['feasible']:.1%} "
            f"| {s['oom']:.1%} | {other or '—'} | {s['within_1pct']} ({s['within_5pct']}) | {s['runner_up']:.1%} "
            f"| {s['optimum']:,.0f} | {s['optimum_config']} |"
        )
    lines.append("")
    lines.append(f"Loads: `max_concurrency` ∈ {{{', '.join(map(str, LOADS))}}}; {NUM_PROMPTS} random prompts per "
                 "trial in the space (the table ignores it). Runner-up: the second-best configuration's best "
                 "feasible throughput relative to the optimum.")  # fmt: skip
    lines.append("")
    for land, _ in summaries:
        lines.append(f"- **{land.name}**: {land.note}.")
    lines += ["", MIX_NOTE]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="landscapes to make (default: all)")
    parser.add_argument("--explore", action="store_true", help="print how candidate SLOs cut each landscape")
    parser.add_argument(
        "--band",
        choices=("tight", "usual", "loose"),
        default="usual",
        help="--explore's SLOs: those leaving 5-12%%, 11-22%% or 30-50%% of the points feasible",
    )
    parser.add_argument(
        "--reuse-tables",
        action="store_true",
        help="take each NAME.csv already there instead of estimating it again (a new SLO, README)",
    )
    args = parser.parse_args()
    band = {"tight": TIGHT, "usual": USUAL, "loose": LOOSE}[args.band]
    OUT.mkdir(parents=True, exist_ok=True)
    summaries = []
    for land in LANDSCAPES:
        if args.names and land.name not in args.names:
            continue
        knobs, rows, rejected = build(land, args.reuse_tables)
        stats = statistics(land, knobs, rows, land.ttft_ms, land.tpot_ms)
        summaries.append((land, stats))
        size = (OUT / f"{land.name}.csv").stat().st_size
        print(f"{land.name}: {stats['configs']} configs ({rejected} rejected by rules) × {len(LOADS)} loads, "
              f"feasible {stats['feasible']:.1%}, oom {stats['oom']:.1%}, statuses {stats['statuses']}, "
              f"within 1% {stats['within_1pct']} (5% {stats['within_5pct']}), runner-up {stats['runner_up']:.1%}, "
              f"optimum {stats['optimum']:.0f} at {stats['optimum_config']}; {size / 1024:.0f} KB")  # fmt: skip
        if args.explore:
            explore(land, knobs, rows, band)
    if not args.names:
        text, path = readme(summaries), OUT / "README.md"
        if path.exists() and MIX_HEADING in path.read_text():  # make_mix_landscapes.py's section, kept
            text = text.split(MIX_HEADING)[0] + MIX_HEADING + path.read_text().split(MIX_HEADING, 1)[1]
        path.write_text(text)


if __name__ == "__main__":
    main()
