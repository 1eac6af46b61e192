"""Landscape pairs for the warm-start benchmark (benchmarks/transfer_efficiency.py), made with aiconfigurator 0.12.

Run it like make_landscapes.py (aiconfigurator lives in its own venv; that docstring says how to make it)::

    /tmp/aic/bin/python benchmarks/make_transfer_landscapes.py            # about a minute
    /tmp/aic/bin/python benchmarks/make_transfer_landscapes.py --explore  # also how candidate SLOs cut the new ones

It writes into ``benchmarks/landscapes/transfer/``: the new single-workload landscapes (NAME.yaml + NAME.csv, made by
make_landscapes.py's ``build``: the same estimates, mapping and corrections), single-workload spaces cut from a
six-workload table of ``benchmarks/landscapes/mix/`` (NAME.yaml only: the table stays where it is; the space keeps
the workload's name, SLO and loads, so the table model reads that workload's rows), ``pairs.yaml`` (the pairs the
benchmark runs: A, then B) and ``README.md`` (the pairs' table: each side's optimum and its configuration, whether
it moved, and what A's optimum gives on B).

The pairs, each "the same tuning problem, one thing changed":

- **workload**: the same model, engine and knobs, another workload: DeepSeek-V3 on SGLang, ShareGPT → long prompts
  (4000/200; the optimum moves), and on TRT-LLM, ShareGPT → medium prompts (2000/100; it does not).
- **upgrade**: the same space on two engine releases. aiconfigurator 0.12 ships, for h200_sxm, two queryable
  database versions of trtllm (1.3.0rc20 "current", 1.3.0rc23 "next") and of sglang (0.5.14, 0.5.16), one of vllm
  (0.24.0). The "next" ones hold only what was recollected (trtllm 1.3.0rc23: MoE kernels of Nemotron-3 Super and
  Ultra, sparse attention and MSA; sglang 0.5.16: KDA and MSA) and serve every other kernel from "current" by
  backward fill, so DeepSeek-V3, Qwen3 and Llama give identical numbers on both. The one model whose measured kernels
  differ between two shipped versions and that runs on both is Nemotron-3 Ultra (550B-A55B, FP8) on TRT-LLM: its
  landscape on 1.3.0rc20 and on 1.3.0rc23 is the pair (a real database upgrade, small: a few percent per point). Its
  space names the release as the engine version, so the warm-started study sees another version (rules re-checked,
  out-of-memory failures not applied), as ``study upgrade`` would.
- **sibling**: Qwen3-235B-A22B → Qwen3-30B-A3B on TRT-LLM, the same knobs and workload (2000/500):
  qwen3-235b-trtllm-2000x500 of ``benchmarks/landscapes/`` → a new landscape of the smaller model.

The new SLOs were chosen with ``--explore`` as make_landscapes.py's were (11–22% of the points feasible, as few
configurations within 1% of the optimum as the grid allows): Nemotron-3 Ultra's on the 1.3.0rc20 table (the
1.3.0rc23 landscape keeps it: an upgrade does not change the SLO), p99 TTFT 750 ms / TPOT 30 ms; Qwen3-30B-A3B's
200 / 8 ms (under the 235B's 1000 / 25, 73% of its points are feasible and 3 configurations within 1%: hardly a
search problem).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml
from _harness import Landscape as Table
from _harness import single_workload_document
from make_landscapes import LANDSCAPES, TRTLLM_MOE, Landscape, build, explore, statistics

REPO = Path(__file__).resolve().parents[1]
RELATIVE = "benchmarks/landscapes/transfer"
OUT = REPO / RELATIVE
ULTRA = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8"
MBT7 = (8192, 1024, 2048, 4096, 12288, 16384, 32768)
QWEN_235B = next(land for land in LANDSCAPES if land.name == "qwen3-235b-trtllm-2000x500")
ULTRA_NOTE = "550B-A55B FP8 weights, a hybrid Mamba-attention MoE; TRT-LLM {}"
NEW = (
    *(Landscape(f"nemotron3-ultra-trtllm-2000x500-{v[-4:]}", ULTRA, "trtllm", 2000, 500, 750, 30, TRTLLM_MOE,
                max_num_batched_tokens=MBT7, note=ULTRA_NOTE.format(v), version=v, folder=RELATIVE)
      for v in ("1.3.0rc20", "1.3.0rc23")),
    dataclasses.replace(QWEN_235B, name="qwen3-30b-a3b-trtllm-2000x500", model="Qwen/Qwen3-30B-A3B", folder=RELATIVE,
                        ttft_ms=200, tpot_ms=8, note="Qwen3-235B-A22B's sibling with its knobs and workload "
                        "(qwen3-235b-trtllm-2000x500); the SLO by the landscapes' rule"),
)  # fmt: skip
CUTS = (("dsv3-sglang-six", "sharegpt"), ("dsv3-sglang-six", "long"), ("dsv3-trtllm-six", "sharegpt"),
        ("dsv3-trtllm-six", "medium"))  # fmt: skip
PAIRS = (  # name, what changes, A, B (paths from the repository root)
    ("workload-dsv3-sglang", "workload: ShareGPT → long prompts (4000/200)",
     f"{RELATIVE}/dsv3-sglang-six-sharegpt.yaml", f"{RELATIVE}/dsv3-sglang-six-long.yaml"),
    ("workload-dsv3-trtllm", "workload: ShareGPT → medium prompts (2000/100)",
     f"{RELATIVE}/dsv3-trtllm-six-sharegpt.yaml", f"{RELATIVE}/dsv3-trtllm-six-medium.yaml"),
    ("upgrade-nemotron3-ultra", "engine: TRT-LLM 1.3.0rc20 → 1.3.0rc23 (aiconfigurator's two databases)",
     f"{RELATIVE}/nemotron3-ultra-trtllm-2000x500-rc20.yaml", f"{RELATIVE}/nemotron3-ultra-trtllm-2000x500-rc23.yaml"),
    ("sibling-qwen3", "model: Qwen3-235B-A22B → Qwen3-30B-A3B",
     "benchmarks/landscapes/qwen3-235b-trtllm-2000x500.yaml", f"{RELATIVE}/qwen3-30b-a3b-trtllm-2000x500.yaml"),
)  # fmt: skip


def cut(mix: str, workload: str) -> None:
    """Write the one-workload space of ``workload`` cut from mix landscape ``mix`` (its table stays in mix/)."""
    document = yaml.safe_load((REPO / "benchmarks/landscapes/mix" / f"{mix}.yaml").read_text())
    single = single_workload_document(document, workload)
    single["name"] = f"{mix}-{workload}"
    single["description"] += f"; only its {workload} workload"
    header = (
        f"# {mix}-{workload}: generated by benchmarks/make_transfer_landscapes.py from mix/{mix}.yaml; do not "
        f"edit by hand.\n# Run from the repository root: autotune study run {RELATIVE}/{mix}-{workload}.yaml\n"
    )
    (OUT / f"{mix}-{workload}.yaml").write_text(header + yaml.safe_dump(single, sort_keys=False, allow_unicode=True,
                                                                       width=120))  # fmt: skip


README_HEAD = """# Landscape pairs for warm start (aiconfigurator 0.12, 8×H200)

Generated by `benchmarks/make_transfer_landscapes.py` (its docstring says how to run it and why these pairs); do not
edit by hand. `benchmarks/transfer_efficiency.py` runs them (`pairs.yaml`: A, then B): a study on A, then on B a cold
study and one warm-started from A's. Files:

- `nemotron3-ultra-trtllm-2000x500-rc20` / `-rc23` (yaml + csv): NVIDIA Nemotron-3 Ultra 550B-A55B FP8 on TRT-LLM,
  estimated on aiconfigurator's trtllm databases 1.3.0rc20 and 1.3.0rc23 (the space's engine version is the release).
  aiconfigurator 0.12 ships two trtllm and two sglang database versions for h200_sxm, but the newer ones only add
  recollected kernels (trtllm 1.3.0rc23: Nemotron-3 MoE, sparse attention, MSA) and serve the rest from the older by
  backward fill: for DeepSeek-V3, Qwen3 and Llama the two versions give identical numbers. Nemotron-3 Ultra is the
  model whose landscape really changes (by a few percent per point).
- `qwen3-30b-a3b-trtllm-2000x500` (yaml + csv): Qwen3-30B-A3B with the knobs, workload and SLO of
  `../qwen3-235b-trtllm-2000x500` (its sibling).
- `dsv3-*-six-WORKLOAD.yaml`: one workload of a six-workload landscape of `../mix/` (its name, SLO and loads), on
  that landscape's table.

Points are estimated exactly as for `../README.md`'s landscapes (the same code). Moved: B's optimum is another launch
configuration than A's (the load aside). A's optimum on B: the best SLO-feasible value of A's optimal launch
configuration on B (over B's loads), as a share of B's optimum (0: infeasible there): what copying A's answer gives.
"""


def _stats_text(s: dict) -> str:
    return (f"{s['configs']} configurations × 8 loads, {s['feasible']:.1%} of the points feasible, {s['oom']:.1%} "
            f"out of memory, {s['within_1pct']} configurations within 1% of the optimum, runner-up "
            f"{s['runner_up']:.1%}")  # fmt: skip


def readme(rows: list[dict], stats: dict[str, dict]) -> str:
    lines = [README_HEAD, "| pair | what changes | A | B | A's optimum (its configuration) | B's optimum (its "
             "configuration) | moved | A's optimum on B |", "|" + "---|" * 8]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['pair']} | {r['change']} | `{r['a']}` | `{r['b']}` | {r['a_optimum']:,.0f} "
                     f"({r['a_config']}) | {r['b_optimum']:,.0f} ({r['b_config']}) | {'yes' if r['moved'] else 'no'} "
                     f"| {r['a_on_b']:.1%} |")  # fmt: skip
    lines += ["", "The new landscapes:", ""]
    lines += [f"- **{land.name}** (`{land.model}`, {land.engine} {land.version or '1.2.0rc5'}, "
              f"{land.input_len}/{land.output_len}, SLO p99 TTFT {land.ttft_ms:g} ms / TPOT {land.tpot_ms:g} ms): "
              f"{land.note}; {_stats_text(stats[land.name])}." for land in NEW]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--explore", action="store_true", help="print how candidate SLOs cut the new landscapes")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    stats: dict[str, dict] = {}
    for land in NEW:
        knobs, rows, rejected = build(land)
        stats[land.name] = statistics(land, knobs, rows, land.ttft_ms, land.tpot_ms)
        size = (OUT / f"{land.name}.csv").stat().st_size
        print(
            f"{land.name}: {len(rows)} points ({rejected} configurations rejected by rules), {size / 1024:.0f} KB; "
            f"{_stats_text(stats[land.name])}"
        )
        if args.explore:
            explore(land, knobs, rows)
    for mix, workload in CUTS:
        cut(mix, workload)
    (OUT / "pairs.yaml").write_text(yaml.safe_dump([{"pair": p, "change": c, "a": a, "b": b} for p, c, a, b in PAIRS],
                                                   sort_keys=False, allow_unicode=True))  # fmt: skip
    rows = []
    for pair, change, a, b in PAIRS:
        first, second = Table(REPO / a), Table(REPO / b)
        rows.append({"pair": pair, "change": change, "a": Path(a).stem, "b": Path(b).stem,
                     "a_optimum": first.optimum, "a_config": first.label(first.optimum_key),
                     "b_optimum": second.optimum, "b_config": second.label(second.optimum_key),
                     "moved": first.optimum_key != second.optimum_key,
                     "a_on_b": second.best_of(first.optimum_key) / second.optimum})  # fmt: skip
        print(f"{pair}: moved {rows[-1]['moved']}, A's optimum on B {rows[-1]['a_on_b']:.1%}")
    (OUT / "README.md").write_text(readme(rows, stats))


if __name__ == "__main__":
    main()
