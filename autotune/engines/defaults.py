"""What an adapter says about its engine beyond the launch: the defaults `autotune init` offers, and the engine's own
defaults and quirks that the simulator imitates. Both are data on the adapter, so a new engine brings its own and no
other module lists engines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.engines.models import ModelInfo

# (layout knobs, why) as `autotune init` writes them under `layout: tied:`
LayoutChoice = tuple[dict[str, object], str]


def _no_moe_layouts(gpus: int) -> list[LayoutChoice]:
    return []


@dataclass(frozen=True)
class InitDefaults:
    """What `autotune init` writes for the engine (an adapter without them makes init refuse it, saying why).

    Attributes:
        kv_cache_fp8: the engine's name for an FP8 KV cache.
        attention: the attention-backend choices for a model (None first: the engine picks) and why.
        speculative: the speculative-decoding choices for a checkpoint with an MTP head.
        data_parallel_copies: whether ``dp`` alone means copies of the model (TRT-LLM has only attention DP).
        moe_layouts: the extra layouts of an MoE model on a node of that many GPUs (expert parallel, DP attention).
    """

    kv_cache_fp8: str
    attention: Callable[[ModelInfo], tuple[list[str | None], str]]
    speculative: tuple[str | None, ...] = (None, "mtp:1")
    data_parallel_copies: bool = True
    moe_layouts: Callable[[int], list[LayoutChoice]] = field(default=_no_moe_layouts)


@dataclass(frozen=True)
class ServingDefaults:
    """The engine's own defaults where a knob is left unset, and the quirks the simulator imitates.

    Attributes:
        max_running: requests batched at once (``max_num_seqs`` unset).
        batched_tokens: tokens per step (``max_num_batched_tokens`` unset).
        memory_fraction: share of GPU memory taken (``gpu_memory_utilization`` unset).
        step_overhead_s: the CPU time of one scheduler step that the GPU waits for.
        speculative_max_running: the requests batched at once with speculative decoding (None: as without).
        speculative_step_overhead_s: the step overhead with speculative decoding (None: as without).
        needs_one_full_request: the engine refuses to start unless one request of the full context fits the KV cache.
        oom_message: the engine's start-up message when the memory left for the KV cache is none (None: CUDA's).
    """

    max_running: int = 1024
    batched_tokens: int = 8192
    memory_fraction: float = 0.9
    step_overhead_s: float = 2e-3
    speculative_max_running: int | None = None
    speculative_step_overhead_s: float | None = None
    needs_one_full_request: bool = False
    oom_message: str | None = None
