"""Facts about a model that the static rules need.

Read from the model's ``config.json`` (and the size of its ``*.safetensors`` files) when the model is a local path,
else taken from a small built-in profile of well-known models. An unknown model gets no model-specific rule.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer

from autotune.config import split_revision
from autotune.errors import UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    """What the rules know about a model.

    Attributes:
        architecture: the ``architectures[0]`` of its config (e.g. ``DeepseekV32ForCausalLM``).
        sparse_attention: DeepSeek sparse attention (DSA/NSA): the V3.2 family.
        moe: a mixture-of-experts model.
        parameter_bytes: size of the weights as stored, or None when unknown.
        max_positions: the context the model was built for (``max_position_embeddings``).
        source: where the facts came from.
        latent_attention: multi-head latent attention (MLA: DeepSeek V2/V3), which has its own attention backends.
        mtp: the checkpoint has multi-token-prediction heads (``num_nextn_predict_layers``), so MTP speculation works.
        attention_heads: query heads (a tensor-parallel size must divide them), or None when unknown.
    """

    name: str
    architecture: str
    sparse_attention: bool
    moe: bool
    parameter_bytes: int | None
    max_positions: int | None
    source: Literal["config.json", "profile"]
    latent_attention: bool = False
    mtp: bool = False
    attention_heads: int | None = None


def _profile(name: str, arch: str, sparse: bool, moe: bool, gbytes: float, positions: int, heads: int) -> ModelInfo:
    deepseek = arch.startswith("DeepseekV3")  # MLA, and one MTP layer in every published checkpoint
    return ModelInfo(name, arch, sparse, moe, int(gbytes * 1e9), positions, "profile", deepseek, deepseek, heads)


# Sizes are the published checkpoints as stored (DeepSeek: FP8 weights, ~690 GB; Llama/Qwen: BF16).
_PROFILES: dict[str, ModelInfo] = {
    p.name.lower(): p
    for p in (
        _profile("DeepSeek-V3.2", "DeepseekV32ForCausalLM", True, True, 690, 163840, 128),
        _profile("DeepSeek-V3.2-Exp", "DeepseekV32ForCausalLM", True, True, 690, 163840, 128),
        _profile("DeepSeek-V3.1", "DeepseekV3ForCausalLM", False, True, 690, 163840, 128),
        _profile("DeepSeek-V3", "DeepseekV3ForCausalLM", False, True, 690, 163840, 128),
        _profile("DeepSeek-R1", "DeepseekV3ForCausalLM", False, True, 690, 163840, 128),
        _profile("Llama-3.1-8B-Instruct", "LlamaForCausalLM", False, False, 16.1, 131072, 32),
        _profile("Llama-3.1-70B-Instruct", "LlamaForCausalLM", False, False, 141, 131072, 64),
        _profile("Llama-3.3-70B-Instruct", "LlamaForCausalLM", False, False, 141, 131072, 64),
        _profile("Qwen3-8B", "Qwen3ForCausalLM", False, False, 16.4, 40960, 32),
        _profile("Qwen3-32B", "Qwen3ForCausalLM", False, False, 65.5, 40960, 64),
        _profile("Qwen3-30B-A3B", "Qwen3MoeForCausalLM", False, True, 61.1, 40960, 32),
        _profile("Qwen3-235B-A22B", "Qwen3MoeForCausalLM", False, True, 470, 40960, 64),
        # FP8 checkpoints: linear weights in FP8, embeddings and lm_head left in bf16 (estimated from the shapes)
        _profile("Qwen3-8B-FP8", "Qwen3ForCausalLM", False, False, 9.4, 40960, 32),
        _profile("Qwen3-32B-FP8", "Qwen3ForCausalLM", False, False, 34.3, 40960, 64),
        _profile("Qwen3-30B-A3B-FP8", "Qwen3MoeForCausalLM", False, True, 31.2, 40960, 32),
        _profile("Qwen3-235B-A22B-FP8", "Qwen3MoeForCausalLM", False, True, 236, 40960, 64),
    )
}


def known_models() -> list[str]:
    """The models with a built-in profile (what works without a local config.json)."""
    return [p.name for p in _PROFILES.values()]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer in ``path`` (a tokenizer.json, or a model directory holding one).

    Raises:
        UsageError: no tokenizer.json there.
    """
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(
            f"no tokenizer.json at {path}; fix: pass --tokenizer with a local model directory or tokenizer.json"
        )
    return Tokenizer.from_file(str(file))


def _from_config_dir(path: Path) -> ModelInfo:
    config = json.loads((path / "config.json").read_text())
    architecture = (config.get("architectures") or ["unknown"])[0]
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    return ModelInfo(
        name=path.name,
        architecture=architecture,
        sparse_attention="index_topk" in config or architecture == "DeepseekV32ForCausalLM",
        moe=any(k in config for k in ("n_routed_experts", "num_local_experts", "num_experts")),
        parameter_bytes=weights or None,
        max_positions=config.get("max_position_embeddings"),
        source="config.json",
        latent_attention="kv_lora_rank" in config,
        mtp=bool(config.get("num_nextn_predict_layers")),
        attention_heads=config.get("num_attention_heads"),
    )


@lru_cache(maxsize=64)
def resolve_model(model: str) -> ModelInfo | None:
    """The facts for ``model`` (a local path or a hub id), or None when autotune knows nothing about it.

    A local directory with a config.json wins; otherwise the last path component is looked up in the profiles,
    case-insensitively, so ``/workspace/DeepSeek-v3.2`` and ``deepseek-ai/DeepSeek-V3.2`` are the same model.
    """
    path = Path(split_revision(model)[0])
    if (path / "config.json").is_file():
        try:
            return _from_config_dir(path)
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s/config.json (%s); no model-specific rules apply", model, exc)
            return None
    info = _PROFILES.get(path.name.lower())
    if info is None:
        log.info("model %r is not a local path and has no built-in profile: no model-specific rules apply", model)
    return info
