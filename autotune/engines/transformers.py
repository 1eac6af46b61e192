"""Hugging Face ``transformers serve MODEL [flags]`` (transformers 5.x): an OpenAI-compatible server with continuous
batching over paged attention, CUDA graphs and a KV pool sized by a memory share or a block count.

What differs from the serving engines, measured on an H200:
- ``/v1/models`` lists the Hugging Face hub cache, not the served path, so readiness is a one-token completion;
- requests with vLLM's extensions (``ignore_eos``) are refused with HTTP 422, so none are sent, and a chat request's
  length is read from ``max_tokens`` (``max_completion_tokens`` is ignored: answers ran to the model's default);
- the KV pool is allocated at the first requests: an out-of-memory shows in the log during a benchmark.
"""

from __future__ import annotations

import re

from packaging.version import Version

from autotune.config import ServerConfig
from autotune.engines.base import ArgvBuilder, Engine, LaunchSpec, Rule, RuleContext, log_patterns
from autotune.engines.readiness import Readiness, answers_a_request
from autotune.engines.rules import no_revision_rule
from autotune.errors import FailureKind

# the knobs that configure the continuous-batching scheduler (--cb-*): meaningless, and ignored, without it
_CB_KNOBS = ("cuda_graph", "max_num_batched_tokens", "kv_cache_blocks", "gpu_memory_utilization")
_CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")


def _cb_knobs_need_continuous_batching(ctx: RuleContext) -> str | None:
    cfg = ctx.config
    set_knobs = [k for k in _CB_KNOBS if getattr(cfg, k) not in (None, False)]
    if set_knobs and not cfg.continuous_batching:
        return f"{', '.join(set_knobs)} configure continuous batching (--cb-* flags): set continuous_batching: true"
    return None


def _one_gpu(ctx: RuleContext) -> str | None:
    if ctx.gpus > 1:
        return "transformers serve runs one model copy on one device (no tp/pp/dp)"
    return None


class TransformersEngine(Engine):
    name = "transformers"
    label = "transformers serve"
    default_executable = ("transformers",)
    default_version = "5.17.0"
    image = None  # no official image runs `transformers serve`: the command runs on the node
    package, pip_requirement = "transformers", "transformers[serving]"
    readiness_path = "/health"
    request_extensions = frozenset()
    chat_length_field = "max_tokens"  # 5.19 logs "Ignoring unsupported fields ... 'max_completion_tokens'"
    # tp, pp and dp are accepted to be refused by the one-device rule, which says why
    accepts = frozenset({
        "tp", "pp", "dp", "attention_backend", "max_num_batched_tokens", "gpu_memory_utilization", "cuda_graph",
        "continuous_batching", "torch_compile", "kv_cache_blocks", "dtype",
    })  # fmt: skip
    refusal_notes = {
        "served_model_name": "transformers serve answers to the model path; clients use it",
        "prefill_attention_backend": "one attention implementation: use attention_backend",
        "decode_attention_backend": "one attention implementation: use attention_backend",
        "kv_cache_dtype": "transformers serve keeps the KV cache in the model dtype",
        "max_num_seqs": "the continuous-batching scheduler is bounded by tokens (max_num_batched_tokens)",
        "speculative": "transformers serve has no speculative decoding",
        "reasoning_parser": "use extra_args ['--reasoning', 'on'] (it applies the chat template's own)",
        "chat_template": "transformers serve uses the model's chat template",
    }
    init_refusal = "a one-GPU research server: start from `autotune space show transformers-h200`"
    failure_patterns = log_patterns(
        # the attention implementation's package is missing: the configuration cannot run on this machine
        (
            FailureKind.UNSUPPORTED,
            r"FlashAttention2 has been toggled on, but it cannot be used|is not installed|"
            r"does not support an attention implementation|Specified `attn_implementation`",
        ),
        (FailureKind.BAD_FLAG, r"No such option|Invalid value for|Got unexpected extra argument"),
    )
    rules = (
        no_revision_rule("transformers serve"),
        Rule("one-device", "one model copy on one device", _one_gpu),
        Rule(
            "cb-knobs-need-continuous-batching",
            "--cb-* knobs only with continuous batching",
            _cb_knobs_need_continuous_batching,
        ),
    )

    def version_argv(self) -> list[str]:
        if self.module is not None:
            return super().version_argv()
        return [*self.executable, "version"]  # `transformers version` prints it; there is no --version

    def failed_while_alive(self, log: str) -> str | None:
        """A KV pool that runs out of CUDA memory (at start-up with a fixed block count, else at the first request)
        leaves the server up, answering 503 or 500: the log says the launch failed, up to the end of that line."""
        match = _CUDA_OOM.search(log)
        if match is None:
            return None
        end = log.find("\n", match.end())
        return log[max(0, match.start() - 4000) : end if end != -1 else len(log)]

    def readiness(self, config: ServerConfig) -> Readiness:
        """``/health``, then a one-token completion (``/v1/models`` lists the hub cache, not what is served)."""
        return answers_a_request(self.readiness_path, config.api_model_name)

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        cfg, out = config, ArgvBuilder([*self.executable, "serve", config.model])
        out.switch("--continuous-batching", cfg.continuous_batching)
        out.option("--attn-implementation", cfg.attention_backend)
        out.option("--dtype", cfg.dtype)
        out.switch("--compile", cfg.torch_compile)
        out.option("--cb-max-batch-tokens", cfg.max_num_batched_tokens)
        out.option("--cb-num-blocks", cfg.kv_cache_blocks)
        out.option("--cb-max-memory-percent", cfg.gpu_memory_utilization)
        if cfg.continuous_batching and cfg.cuda_graph is not None:
            out.switch("--cb-use-cuda-graph" if cfg.cuda_graph else "--no-cb-use-cuda-graph", True)
        if port is not None:
            out.option("--host", host)
            out.option("--port", port)
        return LaunchSpec(tuple(out.argv), out.env)
