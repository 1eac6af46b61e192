"""vLLM: ``vllm serve MODEL [flags]``."""

from __future__ import annotations

import json

from packaging.version import Version

from autotune.config import ServerConfig
from autotune.engines.base import ArgvBuilder, Engine, LaunchSpec, Rule, RuleContext, log_patterns
from autotune.engines.defaults import InitDefaults, LayoutChoice, ServingDefaults
from autotune.engines.image import ContainerImage
from autotune.engines.layout import Layout
from autotune.engines.models import ModelInfo
from autotune.engines.rules import CONTEXT_WITHIN_MODEL, GPU_COUNT, only_mtp_rule, weights_fit_rule
from autotune.errors import FailureKind

# VLLM_ATTENTION_BACKEND is deprecated in 0.13 and silently ignored from 0.14 on; the flag replaces it.
_ATTENTION_FLAG_SINCE = Version("0.14")
# FlashMLA sparse returns the softmax LSE for decode only after 0.13, which DCP needs.
_SPARSE_DCP_SINCE = Version("0.14")
_SPARSE_BACKENDS = frozenset({"FLASHMLA_SPARSE"})
_KV_DTYPE = {"bf16": "bfloat16"}


def _batched_tokens_cover_seqs(ctx: RuleContext) -> str | None:
    seqs, tokens = ctx.config.max_num_seqs, ctx.config.max_num_batched_tokens
    if seqs and tokens and tokens < seqs:
        return f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs})"
    return None


def _expert_parallel_spans_tp_dp(ctx: RuleContext) -> str | None:
    cfg = ctx.config
    ep, group = cfg.ep or 1, (cfg.tp or 1) * (cfg.dp or 1)
    if ep > 1 and ep != group:
        return f"vLLM's expert-parallel size is always tp×dp = {group}; ep={ep} cannot be expressed"
    return None


def _dp_attention_is_dp_with_ep(ctx: RuleContext) -> str | None:
    cfg = ctx.config
    if cfg.dp_attention and not ((cfg.dp or 1) > 1 and (cfg.ep or 1) > 1):
        return "vLLM has no DP-attention flag: DP attention is what dp>1 with expert parallelism (ep>1) means"
    return None


def _dcp_divides_tp(ctx: RuleContext) -> str | None:
    tp, dcp = ctx.config.tp or 1, ctx.config.dcp or 1
    if tp % dcp:
        return f"dcp={dcp} must divide tp={tp}"
    return None


def _sparse_attention_backend(ctx: RuleContext) -> str | None:
    backend = (ctx.config.attention_backend or "").upper()
    if ctx.model and ctx.model.sparse_attention and backend and backend not in _SPARSE_BACKENDS:
        return (
            f"{ctx.model.name} uses sparse attention; backend {backend} is dense "
            f"(vLLM: 'Selected backend … is not valid for this configuration. Reason: [sparse not supported]'); "
            f"use one of {sorted(_SPARSE_BACKENDS)}"
        )
    return None


def _sparse_dcp(ctx: RuleContext) -> str | None:
    if ctx.model and ctx.model.sparse_attention and (ctx.config.dcp or 1) > 1 and ctx.version < _SPARSE_DCP_SINCE:
        return (
            f"vLLM {ctx.version}: DCP requires attention impls to return the softmax lse for decode, "
            f"but FlashMLASparseImpl (the only backend for {ctx.model.name}) does not; fixed after 0.13"
        )
    return None


def _init_attention(info: ModelInfo) -> tuple[list[str | None], str]:
    if info.sparse_attention:
        return [None, "FLASHMLA_SPARSE"], "sparse attention: only the sparse MLA backend"
    if info.latent_attention:
        return [None, "FLASHMLA", "CUTLASS_MLA", "TRITON_MLA"], "MLA backends"
    return [None, "FLASH_ATTN", "FLASHINFER"], "null: vLLM picks"


def _init_moe_layouts(gpus: int) -> list[LayoutChoice]:
    # vLLM: EP spans tp×dp; DP attention is dp>1 with EP
    ep = f"experts spread over all {gpus} GPUs"
    # without EP, vLLM's expert layers form one tensor-parallel group of DP × TP ranks: DP copies of the attention
    # over TP GPUs each, the experts spread over all of them
    over_dp = [({"tp": tp, "dp": gpus // tp}, f"{gpus // tp} attention copies of TP {tp}, experts over all {gpus} GPUs")
               for tp in (2, 4) if tp < gpus and gpus % tp == 0]  # fmt: skip
    return [({"tp": gpus}, f"tensor parallel over {gpus}"), ({"tp": gpus, "ep": gpus}, f"TP + {ep}"),
            ({"tp": 1, "dp": gpus, "ep": gpus, "dp_attention": True}, f"DP attention + {ep}"), *over_dp]  # fmt: skip


class VllmEngine(Engine):
    name = "vllm"
    label = "vLLM"
    default_executable = ("vllm",)
    default_version = "0.33.0"
    image = ContainerImage("vllm/vllm-openai:v{version}", entrypoint=("vllm", "serve"))
    package = "vllm"
    api_key_env = "VLLM_API_KEY"
    accepts = frozenset({
        "served_model_name", "tp", "pp", "dp", "ep", "dp_attention", "dcp", "attention_backend", "kv_cache_dtype",
        "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "speculative",
        "cuda_graph", "deep_gemm", "dtype", "reasoning_parser", "tool_call_parser", "chat_template", "tokenizer_mode",
    })  # fmt: skip
    refusal_notes = {
        "prefill_attention_backend": "vLLM has one attention backend for prefill and decode; use attention_backend",
        "decode_attention_backend": "vLLM has one attention backend for prefill and decode; use attention_backend",
    }
    init_defaults = InitDefaults("fp8", _init_attention, (None, "mtp:1", "mtp:2"), moe_layouts=_init_moe_layouts)
    # V1 on ≥70 GB GPUs: max_num_seqs 1024, max_num_batched_tokens 8192, gpu_memory_utilization 0.9; it refuses to
    # start unless one request of max_model_len fits the KV cache
    serving_defaults = ServingDefaults(1024, 8192, 0.9, 2e-3, needs_one_full_request=True)
    failure_patterns = log_patterns(
        (
            FailureKind.OOM,
            r"To serve at least one request with the models's max seq len|No available memory for the cache blocks",
        ),
        (FailureKind.BAD_FLAG, r"Unknown attention backend|requires --tool-call-parser"),
        (
            FailureKind.UNSUPPORTED,
            r"is not valid for this configuration|DCP requires attention impls|must be greater than or equal to max_num_seqs"
            r"|greater than the derived max_model_len|enable_expert_parallel must be True",
        ),
    )
    rules = (
        GPU_COUNT,
        weights_fit_rule(experts_over_dp=True),  # vLLM spreads an MoE's experts over DP × TP without EP
        CONTEXT_WITHIN_MODEL,
        Rule("batched-tokens-cover-seqs", "max_num_batched_tokens ≥ max_num_seqs", _batched_tokens_cover_seqs),
        Rule("ep-spans-tp-dp", "expert parallelism spans tp×dp (vLLM has no EP size)", _expert_parallel_spans_tp_dp),
        Rule("dp-attention-is-dp-ep", "DP attention means dp>1 with EP on vLLM", _dp_attention_is_dp_with_ep),
        Rule("dcp-divides-tp", "decode context parallel size divides tp", _dcp_divides_tp),
        Rule("sparse-attention-backend", "sparse-attention models need a sparse backend", _sparse_attention_backend),
        Rule("sparse-dcp", "DCP with sparse attention needs vLLM > 0.13", _sparse_dcp),
        only_mtp_rule("vLLM"),
    )

    def layout(self, config: ServerConfig) -> Layout:
        """-dp runs dp full replicas of the TP group (tp × pp × dp GPUs); with EP (or DP attention) they share the
        experts."""
        tp, pp, dp = config.tp or 1, config.pp or 1, config.dp or 1
        return Layout.of(tp * pp * dp, dp, bool(config.dp_attention or (config.ep or 1) > 1))

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        cfg, out = config, ArgvBuilder([*self.executable, "serve", config.model_id])
        out.option("--revision", cfg.model_revision)  # the tokenizer at the same revision, as autotune counts with
        out.option("--tokenizer-revision", cfg.model_revision)
        out.option("-tp", cfg.tp)
        out.option("-pp", cfg.pp)
        out.option("-dp", cfg.dp)
        out.switch("--enable-expert-parallel", (cfg.ep or 1) > 1)
        out.option("-dcp", cfg.dcp)
        if version < _ATTENTION_FLAG_SINCE:
            out.setenv("VLLM_ATTENTION_BACKEND", cfg.attention_backend)
        else:
            out.option("--attention-backend", cfg.attention_backend)
        out.option("--kv-cache-dtype", _KV_DTYPE.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype))
        out.option("--max-model-len", cfg.max_model_len)
        out.option("--max-num-seqs", cfg.max_num_seqs)
        out.option("--max-num-batched-tokens", cfg.max_num_batched_tokens)
        out.option("--gpu-memory-utilization", cfg.gpu_memory_utilization)
        if (spec := cfg.speculation) is not None:
            payload = {"method": "mtp", "num_speculative_tokens": spec.num_steps}
            out.option("--speculative-config", json.dumps(payload, separators=(",", ":")))
        out.switch("--enforce-eager", cfg.cuda_graph is False)
        out.setenv("VLLM_USE_DEEP_GEMM", cfg.deep_gemm)
        out.option("--dtype", cfg.dtype)
        out.option("--reasoning-parser", cfg.reasoning_parser)
        if cfg.tool_call_parser:
            out.option("--tool-call-parser", cfg.tool_call_parser)
            out.switch("--enable-auto-tool-choice", True)
        out.option("--chat-template", cfg.chat_template)
        out.option("--tokenizer-mode", cfg.tokenizer_mode)
        out.option("--served-model-name", cfg.served_model_name)
        if port is not None:
            out.option("--host", host)
            out.option("--port", port)
        return LaunchSpec(tuple(out.argv), out.env)
