"""TensorRT-LLM: ``trtllm-serve MODEL [flags] [--extra_llm_api_options FILE]``.

Knobs without a CLI flag in 1.2 go into the LLM-API YAML, whose keys are validated by TRT-LLM with
extra="forbid": a misspelled key fails, so the keys are written here once and tested.
"""

from __future__ import annotations

import yaml
from packaging.version import Version

from autotune.config import ServerConfig
from autotune.engines.base import ArgvBuilder, Engine, LaunchSpec, Rule, RuleContext, log_patterns
from autotune.engines.defaults import InitDefaults, LayoutChoice, ServingDefaults
from autotune.engines.image import ContainerImage
from autotune.engines.layout import Layout
from autotune.engines.models import ModelInfo
from autotune.engines.rules import (
    CONTEXT_WITHIN_MODEL,
    EP_DIVIDES_TP,
    GPU_COUNT,
    WEIGHTS_FIT,
    no_revision_rule,
    only_mtp_rule,
)
from autotune.errors import FailureKind

EXTRA_OPTIONS_FILE = "extra_llm_api_options.yaml"
# Unknown attn_backend names silently fall back to TRTLLM: the trial would measure something else than it says.
_ATTENTION_BACKENDS = ("TRTLLM", "FLASHINFER", "VANILLA")
_KV_DTYPE = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"}


def _attention_backend_known(ctx: RuleContext) -> str | None:
    backend = ctx.config.attention_backend
    if backend and backend.upper() not in _ATTENTION_BACKENDS:
        return f"attn_backend {backend!r} is not one of {list(_ATTENTION_BACKENDS)} (TRT-LLM would silently use TRTLLM)"
    return None


def _kv_dtype(ctx: RuleContext) -> str | None:
    kv = ctx.config.kv_cache_dtype
    if kv and kv not in _KV_DTYPE:
        return f"kv_cache_config.dtype takes auto or fp8, not {kv}"
    return None


def _dp_is_attention_dp(ctx: RuleContext) -> str | None:
    cfg = ctx.config
    dp, tp = cfg.dp or 1, cfg.tp or 1
    if dp > 1 and not (cfg.dp_attention and dp == tp):
        return f"TRT-LLM has only attention DP: dp={dp} needs dp_attention and dp == tp ({tp})"
    return None


def _init_attention(info: ModelInfo) -> tuple[list[str | None], str]:
    return [None, "TRTLLM", "FLASHINFER"], "TRT-LLM's own kernels or FlashInfer"


def _init_moe_layouts(gpus: int) -> list[LayoutChoice]:
    ep = f"experts spread over all {gpus} GPUs"
    return [({"tp": gpus}, f"tensor parallel over {gpus}"), ({"tp": gpus, "ep": gpus}, f"TP + {ep}"),
            ({"tp": gpus, "ep": gpus, "dp": gpus, "dp_attention": True}, f"attention DP + {ep}")]  # fmt: skip


class TrtllmEngine(Engine):
    name = "trtllm"
    label = "TRT-LLM"
    default_executable = ("trtllm-serve",)
    default_version = "1.2.0"
    image = ContainerImage("nvcr.io/nvidia/tensorrt-llm/release:{version}")
    package, pip_requirement = "tensorrt_llm", "tensorrt-llm"
    accepts = frozenset({
        "tp", "pp", "dp", "ep", "dp_attention", "attention_backend", "kv_cache_dtype", "max_model_len", "max_num_seqs",
        "max_num_batched_tokens", "gpu_memory_utilization", "speculative", "cuda_graph", "deep_gemm",
        "reasoning_parser", "tool_call_parser", "chat_template",
    })  # fmt: skip
    refusal_notes = {
        "served_model_name": "trtllm-serve has no served-model-name flag; clients use the model path",
        "dcp": "TRT-LLM has no decode context parallelism knob",
        "prefill_attention_backend": "TRT-LLM has one attention backend; use attention_backend",
        "decode_attention_backend": "TRT-LLM has one attention backend; use attention_backend",
        "dtype": "TRT-LLM takes the dtype from the model checkpoint",
        "tokenizer_mode": "TRT-LLM has no tokenizer-mode flag",
    }
    init_defaults = InitDefaults("fp8", _init_attention, (None, "mtp:1", "mtp:3"), data_parallel_copies=False,
                                 moe_layouts=_init_moe_layouts)  # fmt: skip
    # max_batch_size 2048, max_num_tokens 8192, 0.9 of free memory for KV
    serving_defaults = ServingDefaults(2048, 8192, 0.9, 1e-3)
    failure_patterns = log_patterns(
        (FailureKind.BAD_FLAG, r"Extra inputs are not permitted"),
        (
            FailureKind.UNSUPPORTED,
            r"DSA cache requires block reuse to be disabled|free_gpu_memory_fraction must be a float",
        ),
    )
    rules = (
        GPU_COUNT,
        WEIGHTS_FIT,
        CONTEXT_WITHIN_MODEL,
        EP_DIVIDES_TP,
        Rule("dp-is-attention-dp", "dp>1 only as attention DP with dp == tp", _dp_is_attention_dp),
        Rule(
            "attention-backend-known",
            f"attn_backend is one of {', '.join(_ATTENTION_BACKENDS)}",
            _attention_backend_known,
        ),
        Rule("kv-cache-dtype", "KV cache dtype is auto or fp8", _kv_dtype),
        only_mtp_rule("TRT-LLM"),
        no_revision_rule("trtllm-serve"),
    )

    def layout(self, config: ServerConfig) -> Layout:
        """Attention DP runs inside the tp × pp group and spans it (one rank per GPU of the TP group); there is no
        separate DP size (dp > 1 is only attention DP, a rule says)."""
        tp, pp = config.tp or 1, config.pp or 1
        return Layout.of(tp * pp, tp if config.dp_attention else 1, (config.ep or 1) > 1)

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        cfg, out = config, ArgvBuilder([*self.executable, config.model])
        out.option("--tp_size", cfg.tp)
        out.option("--ep_size", cfg.ep)
        out.option("--pp_size", cfg.pp)
        out.option("--max_seq_len", cfg.max_model_len)
        out.option("--max_batch_size", cfg.max_num_seqs)
        out.option("--max_num_tokens", cfg.max_num_batched_tokens)
        out.option("--kv_cache_free_gpu_memory_fraction", cfg.gpu_memory_utilization)
        out.setenv("TRTLLM_DG_ENABLED", cfg.deep_gemm)
        out.option("--reasoning_parser", cfg.reasoning_parser)
        out.option("--tool_parser", cfg.tool_call_parser)
        out.option("--chat_template", cfg.chat_template)
        if port is not None:
            out.option("--host", host)
            out.option("--port", port)
        options = self._llm_api_options(cfg)
        files = {}
        if options:
            files[EXTRA_OPTIONS_FILE] = yaml.safe_dump(options, sort_keys=False)
            out.option("--extra_llm_api_options", EXTRA_OPTIONS_FILE)
        return LaunchSpec(tuple(out.argv), out.env, files)

    @staticmethod
    def _llm_api_options(cfg: ServerConfig) -> dict:
        options: dict = {}
        if cfg.dp_attention:
            options["enable_attention_dp"] = True
        if cfg.attention_backend:
            options["attn_backend"] = cfg.attention_backend.upper()
        if cfg.kv_cache_dtype:
            options["kv_cache_config"] = {"dtype": _KV_DTYPE.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype)}
        if cfg.cuda_graph is False:
            options["cuda_graph_config"] = None
        if (spec := cfg.speculation) is not None:
            options["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": spec.num_steps}
        return options
