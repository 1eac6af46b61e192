"""Static rules shared by several engines. Engine-specific rules live beside their adapter."""

from __future__ import annotations

from autotune.engines.base import Rule, RuleContext

_DEFAULT_MEMORY_FRACTION = 0.9


def _gpus_fit(ctx: RuleContext) -> str | None:
    needed, available = ctx.gpus, ctx.hardware.gpus
    if available and needed > available:
        return f"the layout needs {needed} GPUs (tp={ctx.config.tp}, pp={ctx.config.pp}, dp={ctx.config.dp}) but the machine has {available}"
    return None


# The layout must not need more GPUs than the machine has; the adapter counts them (Engine.layout).
GPU_COUNT = Rule("gpu-count", "the parallel layout fits in the machine's GPUs", _gpus_fit)


# The bytes of an MoE checkpoint outside its experts (attention, embeddings, dense layers, shared experts): 2–4% for
# DeepSeek-V3 and Qwen3-235B, 5% as an upper bound. They are replicated on every data-parallel rank; experts are not
# where the engine shards them over the data-parallel group.
_MOE_NON_EXPERT_SHARE = 0.05


def _weights_per_gpu(ctx: RuleContext, experts_over_dp: bool) -> float:
    """Bytes of weights on each GPU: the dense part over TP × PP; an MoE's experts over the EP group where expert
    parallelism is on, and where the engine spreads them over DP × TP without it (``experts_over_dp``: vLLM, whose
    expert layers form one tensor-parallel group of DP × TP ranks by default)."""
    cfg, model = ctx.config, ctx.model
    dense_shards = (cfg.tp or 1) * (cfg.pp or 1)
    if not model.moe:
        return model.parameter_bytes / dense_shards
    expert_parallel = (cfg.ep or 1) > 1
    expert_shards = dense_shards * (cfg.dp or 1) if (expert_parallel or experts_over_dp) else dense_shards
    expert_shards = max(expert_shards, cfg.ep or 1)
    share = _MOE_NON_EXPERT_SHARE
    return model.parameter_bytes * (share / dense_shards + (1 - share) / expert_shards)


def weights_fit_rule(experts_over_dp: bool = False) -> Rule:
    """The ``weights-fit`` rule of an engine (``experts_over_dp``: see ``_weights_per_gpu``)."""

    def test(ctx: RuleContext) -> str | None:
        model, hw = ctx.model, ctx.hardware
        if not (model and model.parameter_bytes and hw.gpus and hw.gpu_memory_gb):
            return None
        per_gpu = _weights_per_gpu(ctx, experts_over_dp) / 1e9
        budget = hw.gpu_memory_gb * (ctx.config.gpu_memory_utilization or _DEFAULT_MEMORY_FRACTION)
        if per_gpu > budget:
            return (
                f"{model.name} needs ~{per_gpu:.0f} GB of weights per GPU in this layout, more than the "
                f"{budget:.0f} GB the memory fraction allows on a {hw.gpu_memory_gb:g} GB GPU (out of memory at load)"
            )
        return None

    return Rule("weights-fit", "the model's weights fit in GPU memory in this layout", test)


WEIGHTS_FIT = weights_fit_rule()


def _context_within_model(ctx: RuleContext) -> str | None:
    limit, wanted = ctx.model and ctx.model.max_positions, ctx.config.max_model_len
    if limit and wanted and wanted > limit:
        return f"max_model_len {wanted} is above {ctx.model.name}'s {limit} positions"
    return None


CONTEXT_WITHIN_MODEL = Rule(
    "context-within-model", "max_model_len is at most the model's max positions", _context_within_model
)


def _no_revision(engine: str):
    def test(ctx: RuleContext) -> str | None:
        if revision := ctx.config.model_revision:
            return (f"{engine} takes no hub revision (@{revision}); fix: download that revision "
                    f"(`hf download {ctx.config.model_id} --revision {revision} --local-dir DIR`) and name DIR")  # fmt: skip
        return None

    return test


def no_revision_rule(engine: str) -> Rule:
    return Rule("model-revision", "the model is not pinned with @REVISION (the engine has no revision flag)",
                _no_revision(engine))  # fmt: skip


def _only_mtp(engine: str):
    def test(ctx: RuleContext) -> str | None:
        spec = ctx.config.speculation
        if spec and spec.method != "mtp":
            return f"{engine} EAGLE needs a separate draft model, which the canonical knobs do not name; use mtp:N"
        return None

    return test


def only_mtp_rule(engine: str) -> Rule:
    return Rule("speculative-method", "speculative decoding is mtp:N (EAGLE needs a draft model)", _only_mtp(engine))


def _ep_divides_tp(ctx: RuleContext) -> str | None:
    tp, ep = ctx.config.tp or 1, ctx.config.ep or 1
    if tp % ep:
        return f"ep={ep} must divide tp={tp} (the experts are split inside the tensor-parallel group)"
    return None


EP_DIVIDES_TP = Rule("ep-divides-tp", "the expert-parallel size divides the tensor-parallel size", _ep_divides_tp)
