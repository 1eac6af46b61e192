"""Datasheet facts the analytic model is built from: accelerators and model shapes.

Nothing here is fitted to measurements: GPU numbers are vendor peak figures, model shapes are read from the
architecture (config.json, or the published sizes of a few well-known models).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: memory (bytes), HBM bandwidth (bytes/s), dense peak (FLOP/s), link bandwidth per direction."""

    name: str
    memory: float
    bandwidth: float
    flops_fp8: float
    flops_bf16: float
    link_bandwidth: float
    collective_latency_s: float = 15e-6


DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec("H200", 141e9, 4.8e12, 1979e12, 989e12, 450e9),
        DeviceSpec("H100", 80e9, 3.35e12, 1979e12, 989e12, 450e9),
        DeviceSpec("B200", 180e9, 8.0e12, 4500e12, 2250e12, 900e9),
        DeviceSpec("A100", 80e9, 2.0e12, 312e12, 312e12, 300e9),
        # a CPU host (hardware gpus: 0), for vLLM-CPU-sized models: a few cores' worth of memory bandwidth and FLOPs
        DeviceSpec("CPU", 16e9, 20e9, 200e9, 200e9, 20e9, 50e-6),
    )
}


@dataclass(frozen=True)
class ModelShape:
    """What a forward pass costs, per token.

    Attributes:
        layers: transformer layers; moe_layers of them hold routed experts.
        hidden: hidden size (activations exchanged between GPUs per token and layer).
        attention_params: attention weights (replicated on every attention-DP rank).
        other_dense_params: embeddings, dense MLPs, shared experts.
        expert_params: one routed expert's weights; ``experts`` of them per MoE layer, ``experts_per_token`` active.
        bytes_per_param: weight precision as stored (FP8 checkpoints: 1).
        kv_bytes: KV-cache bytes per token and layer in bf16.
        latent_kv: MLA: one latent KV shared by all heads, so tensor parallelism replicates it instead of splitting it.
        attention_flops: FLOPs per (query token, context token, layer).
        sparse_topk: DeepSeek sparse attention reads at most this many context tokens per query (None: all).
        mtp_acceptance: probability that an MTP draft token is accepted (the model's published figure).
        max_positions: the model's context.
    """

    name: str
    layers: int
    moe_layers: int
    hidden: int
    attention_params: float
    other_dense_params: float
    expert_params: float
    experts: int
    experts_per_token: int
    bytes_per_param: float
    kv_bytes: float
    latent_kv: bool
    attention_flops: float
    sparse_topk: int | None
    mtp_acceptance: float
    max_positions: int

    @property
    def weight_bytes(self) -> float:
        params = self.attention_params + self.other_dense_params + self.expert_params * self.experts * self.moe_layers
        return params * self.bytes_per_param

    @property
    def active_params(self) -> float:
        moe = self.expert_params * self.experts_per_token * self.moe_layers
        return self.attention_params + self.other_dense_params + moe


def _dense(name: str, layers: int, hidden: int, attention: float, other: float, kv_heads: int, heads: int,
           positions: int, head_dim: int = 128) -> ModelShape:  # fmt: skip
    """A dense bf16 model with grouped-query attention."""
    return ModelShape(name, layers, 0, hidden, attention, other, 0, 0, 0, 2.0, 2 * kv_heads * head_dim * 2, False,
                      2 * 2 * heads * head_dim, None, 0.0, positions)  # fmt: skip


def _qwen3(name: str, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int = 0, experts: int = 0,
           experts_per_token: int = 0, moe_intermediate: int = 0, vocab: int = 151936, positions: int = 40960,
           head_dim: int = 128) -> ModelShape:  # fmt: skip
    """A bf16 Qwen3 model from its config.json: grouped-query attention (not latent), untied embeddings, per-head
    q/k RMSNorm; the MoE ones route every layer (decoder_sparse_step 1, no mlp_only_layers) over ``experts`` of
    3·hidden·moe_intermediate params with no shared expert, the dense ones run a 3·hidden·intermediate MLP."""
    moe_layers = layers if experts else 0
    attention = layers * hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o: heads; k, v: kv_heads
    norms = layers * (2 * hidden + 2 * head_dim) + hidden  # input/post-attention norms, q/k norms; the final norm
    embeddings = 2 * vocab * hidden  # embed_tokens and lm_head (tie_word_embeddings false)
    other = embeddings + norms + layers * 3 * hidden * intermediate + moe_layers * hidden * experts  # + MoE routers
    return ModelShape(name, layers, moe_layers, hidden, attention, other, 3 * hidden * moe_intermediate, experts,
                      experts_per_token, 2.0, 2 * kv_heads * head_dim * 2, False, 2 * 2 * heads * head_dim, None, 0.0,
                      positions)  # fmt: skip


# Qwen3 (config.json on the hub; all: head_dim 128, vocab 151936, max_position_embeddings 40960, bfloat16, untied):
#   235B-A22B: 94 layers, hidden 4096, 64 q / 4 kv heads, 128 experts (8 active) of moe_intermediate_size 1536
#   30B-A3B:   48 layers, hidden 2048, 32 q / 4 kv heads, 128 experts (8 active) of moe_intermediate_size 768
#   32B:       64 layers, hidden 5120, 64 q / 8 kv heads, intermediate_size 25600
#   8B:        36 layers, hidden 4096, 32 q / 8 kv heads, intermediate_size 12288
# That gives 235.1B (22.2B active), 30.5B (3.35B active), 32.8B and 8.19B parameters, as published. The -FP8
# checkpoints are the same shapes with FP8 (128x128 block-scaled) linear weights: 1 byte per param (their bf16
# embeddings and norms are not counted apart). No MTP heads.
_QWEN3 = (
    _qwen3("Qwen3-235B-A22B", 94, 4096, 64, 4, experts=128, experts_per_token=8, moe_intermediate=1536),
    _qwen3("Qwen3-30B-A3B", 48, 2048, 32, 4, experts=128, experts_per_token=8, moe_intermediate=768),
    _qwen3("Qwen3-32B", 64, 5120, 64, 8, intermediate=25600),
    _qwen3("Qwen3-8B", 36, 4096, 32, 8, intermediate=12288),
)

# DeepSeek-V3 family: 61 layers (58 MoE), 256 routed experts of 3·7168·2048 params, 8 active; MLA latent 512+64
# (bf16: 1152 bytes per token and layer); 128 heads of 512+64 dims for the absorbed attention. DeepSeek reports
# 85–90% acceptance for its first MTP token.
_DEEPSEEK_V3 = dict(layers=61, moe_layers=58, hidden=7168, attention_params=11.4e9, other_dense_params=5.6e9,
                    expert_params=44.04e6, experts=256, experts_per_token=8, bytes_per_param=1.0, kv_bytes=1152,
                    latent_kv=True, attention_flops=2 * 2 * 128 * 576, mtp_acceptance=0.85, max_positions=163840)  # fmt: skip
SHAPES: dict[str, ModelShape] = {
    "deepseek-v3.2": ModelShape("DeepSeek-V3.2", sparse_topk=2048, **_DEEPSEEK_V3),
    "deepseek-v3.2-exp": ModelShape("DeepSeek-V3.2-Exp", sparse_topk=2048, **_DEEPSEEK_V3),
    "deepseek-v3": ModelShape("DeepSeek-V3", sparse_topk=None, **_DEEPSEEK_V3),
    "deepseek-v3.1": ModelShape("DeepSeek-V3.1", sparse_topk=None, **_DEEPSEEK_V3),
    "deepseek-r1": ModelShape("DeepSeek-R1", sparse_topk=None, **_DEEPSEEK_V3),
    "llama-3.1-8b-instruct": _dense("Llama-3.1-8B-Instruct", 32, 4096, 1.34e9, 6.7e9, 8, 32, 131072),
    "llama-3.1-70b-instruct": _dense("Llama-3.1-70B-Instruct", 80, 8192, 10.7e9, 59.9e9, 8, 64, 131072),
    # Llama 3.3 70B is Llama 3.1 70B's architecture (same config.json shape), retrained
    "llama-3.3-70b-instruct": _dense("Llama-3.3-70B-Instruct", 80, 8192, 10.7e9, 59.9e9, 8, 64, 131072),
    **{s.name.lower(): s for q in _QWEN3 for s in (q, replace(q, name=f"{q.name}-FP8", bytes_per_param=1.0))},
}


def _shape_from_config(path: Path) -> ModelShape:
    """A dense model's shape from its config.json (the tiny test model, a local Llama or Qwen)."""
    config = json.loads((path / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config.get("num_attention_heads", 1)
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads", heads)
    attention = layers * hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = layers * 3 * hidden * config.get("intermediate_size", 4 * hidden)
    embeddings = config.get("vocab_size", 32000) * hidden * (1 if config.get("tie_word_embeddings") else 2)
    width = 4 if config.get("torch_dtype") == "float32" else 2
    return ModelShape(path.name, layers, 0, hidden, attention, mlp + embeddings, 0, 0, 0, width,
                      2 * kv_heads * head_dim * width, False, 2 * 2 * heads * head_dim, None, 0.0,
                      config.get("max_position_embeddings", 4096))  # fmt: skip


def model_shape(model: str) -> ModelShape | None:
    """The shape of ``model`` (a local directory with config.json, or a known model's name), or None."""
    path = Path(model)
    if (path / "config.json").is_file():
        return _shape_from_config(path)
    name = path.name.lower().removeprefix("meta-")  # Meta's hub names: meta-llama/Meta-Llama-3.1-70B[-Instruct]
    # a base model has its instruct model's architecture (the same config.json shape, other weights)
    return SHAPES.get(name) or SHAPES.get(f"{name}-instruct")


def device_spec(gpu: str | None, gpus: int) -> DeviceSpec:
    """The accelerator named in the space's hardware (``H200``, ``H200 SXM``...), the CPU for ``gpus: 0``."""
    if gpus == 0:
        return DEVICES["CPU"]
    for name, spec in DEVICES.items():
        if gpu and gpu.upper().startswith(name):
            return spec
    return DEVICES["H200"]
