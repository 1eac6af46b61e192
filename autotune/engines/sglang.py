"""SGLang: ``python3 -m sglang.launch_server --model-path MODEL [flags]``."""

from __future__ import annotations

from packaging.version import Version

from autotune.config import ServerConfig
from autotune.engines.base import ArgvBuilder, Engine, LaunchSpec, Rule, RuleContext, log_patterns
from autotune.engines.defaults import InitDefaults, LayoutChoice, ServingDefaults
from autotune.engines.image import ContainerImage
from autotune.engines.layout import Layout
from autotune.engines.models import ModelInfo
from autotune.engines.rules import CONTEXT_WITHIN_MODEL, EP_DIVIDES_TP, GPU_COUNT, WEIGHTS_FIT
from autotune.errors import FailureKind

# 0.5.23 renamed --nsa-*-backend to --dsa-*-backend, replaced --enable-dp-attention with --attn-dp-size N and
# --disable-cuda-graph with --cuda-graph-backend-{decode,prefill} disabled, and added --dcp-size.
_RENAMES_SINCE = Version("0.5.23")
_KV_DTYPE = {"fp8": "fp8_e4m3"}  # SGLang has no plain "fp8" (argparse: invalid choice)
_NSA_KV_DTYPES = frozenset({"auto", "bf16", "fp8", "fp8_e4m3"})
_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def _dp_divides_tp(ctx: RuleContext) -> str | None:
    tp, dp = ctx.config.tp or 1, ctx.config.dp or 1
    if ctx.config.dp_attention and tp % dp:
        return f"with DP attention dp={dp} must divide tp={tp} (SGLang fails with a bare AssertionError)"
    return None


def _nsa_kv_dtype(ctx: RuleContext) -> str | None:
    kv = ctx.config.kv_cache_dtype
    if ctx.model and ctx.model.sparse_attention and kv and kv not in _NSA_KV_DTYPES:
        return f"DeepSeek NSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype, not {kv}"
    return None


def _nsa_needs_deep_gemm(ctx: RuleContext) -> str | None:
    if ctx.model and ctx.model.sparse_attention and ctx.config.deep_gemm is False:
        return (
            f"with SGLANG_ENABLE_JIT_DEEPGEMM=0 the NSA indexer of {ctx.model.name} cannot run (server does not start)"
        )
    return None


def _eagle_topk_page_size(ctx: RuleContext) -> str | None:
    spec = ctx.config.speculation
    if spec and spec.topk > 1 and ctx.model and ctx.model.sparse_attention:
        return f"speculative_eagle_topk > 1 with page_size > 1 is unstable; {ctx.model.name} forces page size 64"
    return None


def _eagle_draft_tokens(ctx: RuleContext) -> str | None:
    spec = ctx.config.speculation
    if spec and spec.topk == 1 and spec.num_draft_tokens not in (None, spec.num_steps + 1):
        return (
            f"with topk 1 SGLang forces draft tokens = steps+1 = {spec.num_steps + 1}, "
            f"so {spec.num_draft_tokens} would not be what runs"
        )
    return None


def _dcp_needs_new_version(ctx: RuleContext) -> str | None:
    if (ctx.config.dcp or 1) > 1 and ctx.version < _RENAMES_SINCE:
        return f"SGLang {ctx.version} has no decode context parallelism (--dcp-size arrived in 0.5.23)"
    return None


def _context_within_model(ctx: RuleContext) -> str | None:
    if ctx.config.env.get(_LONGER_CONTEXT_ENV) == "1":
        return None
    reason = CONTEXT_WITHIN_MODEL.test(ctx)
    return reason and f"{reason}; SGLang needs env {_LONGER_CONTEXT_ENV}=1 for that"


def _init_attention(info: ModelInfo) -> tuple[list[str | None], str]:
    if info.sparse_attention:
        return [None, "nsa"], "sparse attention (NSA)"
    if info.latent_attention:
        return [None, "flashmla", "fa3", "triton"], "MLA backends"
    return [None, "fa3", "flashinfer", "triton"], "null: SGLang picks"


def _init_moe_layouts(gpus: int) -> list[LayoutChoice]:
    # SGLang: DP attention ranks live inside the TP group
    ep = f"experts spread over all {gpus} GPUs"
    return [({"tp": gpus}, f"tensor parallel over {gpus}"), ({"tp": gpus, "ep": gpus}, f"TP + {ep}"),
            ({"tp": gpus, "dp": gpus, "dp_attention": True}, "DP attention: one attention replica per GPU"),
            ({"tp": gpus, "dp": gpus, "dp_attention": True, "ep": gpus}, f"DP attention + {ep}")]  # fmt: skip


class SglangEngine(Engine):
    name = "sglang"
    label = "SGLang"
    default_executable = ("python3", "-m", "sglang.launch_server")
    default_version = "0.5.23"
    image = ContainerImage("lmsysorg/sglang:v{version}")
    package = "sglang"
    accepts = frozenset({
        "served_model_name", "tp", "pp", "dp", "ep", "dp_attention", "dcp", "attention_backend",
        "prefill_attention_backend", "decode_attention_backend", "kv_cache_dtype", "max_model_len", "max_num_seqs",
        "max_num_batched_tokens", "gpu_memory_utilization", "speculative", "cuda_graph", "deep_gemm", "dtype",
        "reasoning_parser", "tool_call_parser", "chat_template",
    })  # fmt: skip
    refusal_notes = {"tokenizer_mode": "SGLang has no tokenizer-mode flag"}
    init_defaults = InitDefaults("fp8_e4m3", _init_attention, (None, "mtp:1", "mtp:3"), moe_layouts=_init_moe_layouts)
    # chunked prefill 8192, mem_fraction_static ~0.88, an overlap scheduler that hides most of the CPU work of a step
    # (off with speculative decoding, which also resets max_running_requests to 48)
    serving_defaults = ServingDefaults(
        4096, 8192, 0.88, 0.5e-3, speculative_max_running=48, speculative_step_overhead_s=2e-3,
        oom_message="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    )  # fmt: skip
    failure_patterns = log_patterns(
        (FailureKind.OOM, r"Not enough memory\. Please try to increase --mem-fraction-static"),
        (
            FailureKind.UNSUPPORTED,
            r"DeepSeek NSA only supports|speculative_eagle_topk > 1 with page_size > 1"
            r"|does not support dp attention|expert parallel size must be 1 or the same|Triton kernel MoE is only supported"
            r"|SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
        ),
    )
    rules = (
        GPU_COUNT,
        WEIGHTS_FIT,
        Rule(
            "context-within-model",
            "context length within the model's (unless overridden by env)",
            _context_within_model,
        ),
        Rule("dp-attention-divides-tp", "with DP attention, dp divides tp", _dp_divides_tp),
        EP_DIVIDES_TP,
        Rule("nsa-kv-dtype", "NSA models take bf16 or fp8_e4m3 KV cache", _nsa_kv_dtype),
        Rule("nsa-needs-deepgemm", "NSA models need DeepGEMM", _nsa_needs_deep_gemm),
        Rule("eagle-topk-page-size", "EAGLE topk>1 needs page size 1 (not NSA models)", _eagle_topk_page_size),
        Rule("eagle-draft-tokens", "EAGLE topk 1 means draft tokens = steps+1", _eagle_draft_tokens),
        Rule("dcp-needs-0.5.23", "decode context parallelism needs SGLang ≥ 0.5.23", _dcp_needs_new_version),
    )

    def layout(self, config: ServerConfig) -> Layout:
        """With DP attention the dp attention ranks live inside the tp × pp group (its GPUs; DP attention is off
        when dp is 1); without it each of the dp replicas gets its own tp × pp GPUs: tp × pp × dp in all."""
        tp, pp, dp = config.tp or 1, config.pp or 1, config.dp or 1
        expert_parallel = (config.ep or 1) > 1
        if config.dp_attention:
            return Layout.of(tp * pp, dp, expert_parallel)
        return Layout.of(tp * pp * dp, dp, expert_parallel, independent_replicas=dp > 1)

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        cfg, renamed = config, version >= _RENAMES_SINCE
        out = ArgvBuilder([*self.executable, "--model-path", cfg.model_id])
        out.option("--revision", cfg.model_revision)
        out.option("--tp-size", cfg.tp)
        out.option("--pp-size", cfg.pp)
        out.option("--dp-size", cfg.dp)
        out.option("--ep-size", cfg.ep)
        if cfg.dp_attention and renamed:
            out.option("--attn-dp-size", cfg.dp or 1)
        else:
            out.switch("--enable-dp-attention", cfg.dp_attention)
        out.option("--dcp-size", cfg.dcp)
        out.option("--attention-backend", cfg.attention_backend)
        nsa = "dsa" if renamed else "nsa"
        out.option(f"--{nsa}-prefill-backend", cfg.prefill_attention_backend)
        out.option(f"--{nsa}-decode-backend", cfg.decode_attention_backend)
        out.option("--kv-cache-dtype", _KV_DTYPE.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype))
        out.option("--context-length", cfg.max_model_len)
        out.option("--max-running-requests", cfg.max_num_seqs)
        out.option("--chunked-prefill-size", cfg.max_num_batched_tokens)
        out.option("--mem-fraction-static", cfg.gpu_memory_utilization)
        if (spec := cfg.speculation) is not None:
            out.option("--speculative-algorithm", "EAGLE")  # SGLang runs MTP (NEXTN) as EAGLE
            out.option("--speculative-num-steps", spec.num_steps)
            out.option("--speculative-eagle-topk", spec.topk)
            out.option("--speculative-num-draft-tokens", spec.num_draft_tokens or spec.num_steps + 1)
        if cfg.cuda_graph is False and renamed:
            out.option("--cuda-graph-backend-decode", "disabled")
            out.option("--cuda-graph-backend-prefill", "disabled")
        else:
            out.switch("--disable-cuda-graph", cfg.cuda_graph is False)
        out.setenv("SGLANG_ENABLE_JIT_DEEPGEMM", cfg.deep_gemm)
        out.option("--dtype", cfg.dtype)
        out.option("--reasoning-parser", cfg.reasoning_parser)
        out.option("--tool-call-parser", cfg.tool_call_parser)
        out.option("--chat-template", cfg.chat_template)
        out.option("--served-model-name", cfg.served_model_name)
        if port is not None:
            out.option("--host", host)
            out.option("--port", port)
        return LaunchSpec(tuple(out.argv), out.env)
