"""The landscapes of the search-efficiency benchmark (benchmarks/landscapes/), what each one is, and its half of the
design/evaluation split.

The split is fixed by a rule on the name alone (``split_of``), stated here and in benchmarks/landscapes/README.md:
the last hex digit of the SHA-256 of the landscape's name, even = *design* (the search may be tuned on it), odd =
*evaluation* (reported by ``benchmarks/search_efficiency.py --split eval``; no change is tuned on it). A name decides
its half before any of its numbers exist, so no one can move a landscape to the half that suits a change.

The first six are the benchmark as it was before the split (their tables are the "before" numbers); the rest were
added for issue #48: more models (dense and MoE, FP8 and BF16 weights), all three engines, workloads from short chat
(500/100) to long prompts (8000/200) and long generations (1000/4000), SLOs tight and loose.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

Split = Literal["design", "eval"]
SPLITS: tuple[Split, ...] = ("design", "eval")
RELATIVE = "benchmarks/landscapes"  # where autotune finds the tables: it runs from the repository root


def split_of(name: str) -> Split:
    """The landscape's half: the last hex digit of sha256(name) even = design, odd = eval."""
    return "design" if int(hashlib.sha256(name.encode()).hexdigest()[-1], 16) % 2 == 0 else "eval"


@dataclass(frozen=True)
class Landscape:
    """One landscape: a model on one engine, a workload, an SLO and the knobs varied (first value = default)."""

    name: str
    model: str  # Hugging Face id, as aiconfigurator-core ships its config
    engine: str
    input_len: int
    output_len: int
    ttft_ms: float  # SLO on p99 TTFT
    tpot_ms: float  # SLO on p99 TPOT
    layouts: tuple[dict[str, Any], ...]
    kv_cache_dtype: tuple[str | None, ...] = (None, "fp8")
    max_num_batched_tokens: tuple[int, ...] = (8192, 2048, 4096, 16384)
    speculative: tuple[str | None, ...] = ()
    note: str = ""
    version: str | None = None  # an engine release aiconfigurator has a database of: the space's engine version and
    # the database estimated on (None: the seed study's release in the space, the pinned database)
    folder: str = RELATIVE  # where NAME.yaml and NAME.csv go, from the repository root


# Parallel layouts, tied (TP / DP / EP / DP attention picked together), valid for each engine in autotune.
SGLANG_MOE = (  # SGLang: DP attention ranks live inside the TP-8 group
    {"tp": 8},
    {"tp": 8, "ep": 8},
    {"tp": 8, "dp": 2, "dp_attention": True},
    {"tp": 8, "dp": 2, "dp_attention": True, "ep": 8},
    {"tp": 8, "dp": 4, "dp_attention": True},
    {"tp": 8, "dp": 4, "dp_attention": True, "ep": 8},
    {"tp": 8, "dp": 8, "dp_attention": True},
    {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8},
)
SGLANG_SMALL_MOE = (  # a small MoE on SGLang: also replicas (dp without DP attention: independent copies)
    {"tp": 8},
    {"tp": 8, "ep": 8},
    {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8},
    {"tp": 4, "dp": 2},
    {"tp": 2, "dp": 4},
    {"tp": 1, "dp": 8},
    {"tp": 4, "dp": 2, "ep": 4},
)
SGLANG_DENSE = (  # dense on SGLang: dp replicas of the TP group; the last two leave half the GPUs idle
    {"tp": 8},
    {"tp": 4, "dp": 2},
    {"tp": 2, "dp": 4},
    {"tp": 1, "dp": 8},
    {"tp": 4},
    {"tp": 2, "dp": 2},
)
TRTLLM_MOE = (  # TRT-LLM: attention DP spans the whole TP group
    {"tp": 8},
    {"tp": 8, "ep": 8},
    {"tp": 8, "dp": 8, "dp_attention": True},
    {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8},
)
TRTLLM_MOE_HALF = (  # plus half-machine instances (TRT-LLM has no DP replicas: 4 GPUs stay idle)
    *TRTLLM_MOE,
    {"tp": 4},
    {"tp": 4, "ep": 4},
    {"tp": 4, "dp": 4, "dp_attention": True, "ep": 4},
)
TRTLLM_SMALL_MOE = (  # a small model: instances of 8 down to 1 GPU
    *TRTLLM_MOE_HALF,
    {"tp": 2},
    {"tp": 2, "ep": 2},
    {"tp": 1},
)
TRTLLM_DENSE = (  # dense on TRT-LLM: one instance of 8, 4, 2 or 1 GPUs (no replicas), or attention DP over 8
    {"tp": 8},
    {"tp": 8, "dp": 8, "dp_attention": True},
    {"tp": 4},
    {"tp": 2},
    {"tp": 1},
)
VLLM_MOE = (  # vLLM: -dp without EP shards the experts over tp×dp; with EP it is DP attention. (tp 2 and tp 1
    {"tp": 8},  # without EP are left out: the weights-fit rule rejects 235 and 470 GB of BF16 weights per GPU)
    {"tp": 8, "ep": 8},
    {"tp": 4, "dp": 2},
    {"tp": 4, "dp": 2, "ep": 8, "dp_attention": True},
    {"tp": 2, "dp": 4, "ep": 8, "dp_attention": True},
    {"tp": 1, "dp": 8, "ep": 8, "dp_attention": True},
)
VLLM_WIDE_MOE = (  # vLLM, an MoE whose experts fit spread over DP × TP without EP (vLLM's default) at any split
    *VLLM_MOE,
    {"tp": 2, "dp": 4},
    {"tp": 1, "dp": 8},
)
VLLM_DENSE = (  # dense: -dp runs full replicas of the TP group; the last two leave half the GPUs idle
    {"tp": 8},
    {"tp": 4, "dp": 2},
    {"tp": 2, "dp": 4},
    {"tp": 1, "dp": 8},
    {"tp": 4},
    {"tp": 2, "dp": 2},
)

MBT6 = (8192, 1024, 2048, 4096, 16384, 32768)
MBT8 = (8192, 512, 1024, 2048, 4096, 12288, 16384, 32768)
MBT5 = (8192, 1024, 2048, 4096, 16384)
DSV3, Q235, Q235_FP8 = "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-FP8"
L8B, L70B, GPT_OSS = "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B", "openai/gpt-oss-120b"
Q32, Q32_FP8, Q30 = "Qwen/Qwen3-32B", "Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-30B-A3B"
MTP = (None, "mtp:1")
SGLANG_KV = (None, "fp8_e4m3")  # SGLang names its FP8 KV cache fp8_e4m3

ORIGINAL = (  # the benchmark before issue #48: six landscapes, SLOs cutting 11–22% of the points
    Landscape(
        "dsv3-sglang-4000x200", DSV3, "sglang", 4000, 200, 2000, 40, SGLANG_MOE,
        kv_cache_dtype=SGLANG_KV, max_num_batched_tokens=(8192, 2048, 4096, 16384, 32768),
        speculative=MTP, note="long prompts, short answers; DP attention vs TP, EP, MTP",
    ),
    Landscape(
        "dsv3-trtllm-1000x1000", DSV3, "trtllm", 1000, 1000, 750, 40, TRTLLM_MOE,
        max_num_batched_tokens=MBT6, speculative=MTP, note="decode-heavy; attention DP, EP, MTP",
    ),
    Landscape(
        "qwen3-235b-trtllm-2000x500", Q235, "trtllm", 2000, 500, 1000, 25, TRTLLM_MOE_HALF,
        max_num_batched_tokens=(8192, 1024, 2048, 4096, 12288, 16384, 32768),
        note="BF16 weights (470 GB); half-machine instances run out of memory as the load grows",
    ),
    Landscape(
        "qwen3-235b-vllm-8000x1000", Q235, "vllm", 8000, 1000, 1000, 60, VLLM_MOE,
        max_num_batched_tokens=MBT8, note="long prompts and answers: the KV cache runs out at high load",
    ),
    Landscape(
        "llama3.1-70b-vllm-1000x1000", L70B, "vllm", 1000, 1000, 500, 25, VLLM_DENSE,
        max_num_batched_tokens=(8192, 512, 1024, 2048, 4096, 16384, 32768, 65536),
        note="dense, BF16 (141 GB); replicas vs tensor parallelism",
    ),
    Landscape(
        "qwen3-30b-a3b-trtllm-8000x500", Q30, "trtllm", 8000, 500, 500, 15, TRTLLM_SMALL_MOE,
        max_num_batched_tokens=MBT6, note="small MoE; TRT-LLM has no DP replicas, so small TP groups leave GPUs idle",
    ),
)  # fmt: skip

# Added for issue #48. SLOs: "tight" cuts about 5–12% of the points feasible (a sharp landscape: few configurations
# near the optimum), "loose" about 30–50% (a flat one: many near it), chosen with make_landscapes.py --explore.
WIDE = (
    Landscape("dsv3-vllm-1000x1000", DSV3, "vllm", 1000, 1000, 500, 20, VLLM_WIDE_MOE, max_num_batched_tokens=MBT5,
              speculative=MTP, note="tight SLO; vLLM, FP8 MoE: experts over DP × TP without EP (tp=2, dp=4; tp=1, dp=8)"),
    Landscape("dsv3-vllm-8000x200", DSV3, "vllm", 8000, 200, 2000, 40, VLLM_WIDE_MOE, max_num_batched_tokens=MBT5,
              note="tight SLO; vLLM, long prompts, short answers"),
    Landscape("dsv3-sglang-500x100", DSV3, "sglang", 500, 100, 750, 30, SGLANG_MOE, speculative=MTP,
              kv_cache_dtype=SGLANG_KV, note="loose SLO; short chat"),
    Landscape("dsv3-trtllm-8000x200", DSV3, "trtllm", 8000, 200, 2000, 80, TRTLLM_MOE, max_num_batched_tokens=MBT6,
              speculative=MTP, note="tight SLO; TRT-LLM, long prompts"),
    Landscape("qwen3-235b-sglang-1000x4000", Q235, "sglang", 1000, 4000, 300, 30, SGLANG_MOE,
              kv_cache_dtype=SGLANG_KV, note="tight SLO; BF16 MoE, long generations: the KV cache grows for long"),
    Landscape("qwen3-235b-fp8-vllm-500x100", Q235_FP8, "vllm", 500, 100, 5000, 80, VLLM_WIDE_MOE,
              note="loose SLO; FP8 weights (236 GB), short chat"),
    Landscape("qwen3-235b-fp8-trtllm-1000x4000", Q235_FP8, "trtllm", 1000, 4000, 500, 25, TRTLLM_MOE_HALF,
              note="tight SLO; FP8 weights, long generations; half-machine instances fit"),
    Landscape("llama3.1-8b-sglang-500x100", L8B, "sglang", 500, 100, 1000, 15, SGLANG_DENSE,
              kv_cache_dtype=SGLANG_KV,
              note="loose SLO; small dense, short chat: replicas"),
    Landscape("llama3.1-8b-trtllm-8000x200", L8B, "trtllm", 8000, 200, 750, 6, TRTLLM_DENSE,
              max_num_batched_tokens=MBT6, note="tight SLO; small dense on TRT-LLM (no replicas), long prompts"),
    Landscape("llama3.1-70b-sglang-1000x4000", L70B, "sglang", 1000, 4000, 750, 25, SGLANG_DENSE,
              kv_cache_dtype=SGLANG_KV,
              note="tight SLO; dense BF16, long generations"),
    Landscape("llama3.1-70b-trtllm-500x100", L70B, "trtllm", 500, 100, 2000, 50, TRTLLM_DENSE,
              note="loose SLO; dense BF16 on TRT-LLM, short chat"),
    Landscape("qwen3-32b-vllm-8000x200", Q32, "vllm", 8000, 200, 500, 50, VLLM_DENSE, max_num_batched_tokens=MBT6,
              note="tight SLO; dense BF16, long prompts"),
    Landscape("qwen3-32b-fp8-trtllm-1000x4000", Q32_FP8, "trtllm", 1000, 4000, 1000, 15, TRTLLM_DENSE,
              note="loose SLO; dense FP8, long generations"),
    Landscape("qwen3-32b-fp8-sglang-500x100", Q32_FP8, "sglang", 500, 100, 500, 20, SGLANG_DENSE,
              kv_cache_dtype=SGLANG_KV,
              note="loose SLO; dense FP8, short chat"),
    Landscape("qwen3-30b-a3b-vllm-1000x4000", Q30, "vllm", 1000, 4000, 500, 8, VLLM_WIDE_MOE,
              note="loose SLO; small MoE on vLLM, long generations"),
    Landscape("qwen3-30b-a3b-sglang-500x100", Q30, "sglang", 500, 100, 100, 6, SGLANG_SMALL_MOE,
              kv_cache_dtype=SGLANG_KV,
              note="tight SLO; small MoE on SGLang, short chat: replicas vs DP attention"),
    Landscape("gpt-oss-120b-vllm-1000x1000", GPT_OSS, "vllm", 1000, 1000, 300, 8, VLLM_WIDE_MOE,
              note="loose SLO; an MoE the prior has no shape for, named or not"),
    Landscape("gpt-oss-120b-trtllm-8000x200", GPT_OSS, "trtllm", 8000, 200, 1500, 15, TRTLLM_SMALL_MOE,
              max_num_batched_tokens=MBT6, note="tight SLO; an MoE the prior has no shape for, long prompts"),
)  # fmt: skip
LANDSCAPES = ORIGINAL + WIDE


def landscape_paths(folder: Path, split: Split | Literal["all"]) -> list[Path]:
    """The single-workload landscapes (NAME.yaml) directly in ``folder`` of ``split`` (``all``: both halves)."""
    return [p for p in sorted(folder.glob("*.yaml")) if split == "all" or split_of(p.stem) == split]


def unnamed_model(name: str) -> str:
    """The model of landscape ``name`` renamed: a local path that names no model autotune has a profile or a shape
    of, as a user's own fine-tune would be (the prior and the model-specific rules know nothing of it)."""
    return f"/models/finetune-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def unnamed_copy(path: Path, repo: Path, folder: Path) -> Path:
    """The landscape at ``path`` with its model renamed (``unnamed_model``), written as ``folder/NAME.yaml``: the
    same knobs, table (made absolute from ``repo``: the copy lives elsewhere), workload and SLO."""
    document = yaml.safe_load(path.read_text())
    for section in document["engines"].values():
        section["fixed"]["model"] = unnamed_model(path.stem)
    table = Path(document["simulate"]["table"])
    document["simulate"]["table"] = str(table if table.is_absolute() else repo / table)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / path.name
    copy.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120))
    return copy
