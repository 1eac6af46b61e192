"""The analytic performance model: a roofline of one engine step from datasheets, plus each engine's known defaults.

A step of a continuously batching engine runs every running decode and a chunk of prefill through the model at
once. Its time on each GPU is the larger of memory time (weights, touched experts, KV cache read) and compute time
(GEMMs, attention), plus the collectives of the parallel layout (tensor-parallel all-reduces; the token exchange of
expert parallelism or attention DP) and the engine's per-step overhead. Layout effects fall out of the physics:
MLA's latent KV is replicated across a tensor-parallel group, so attention DP multiplies KV capacity and divides
KV reads; experts are read once per step whatever the batch, so big batches amortise them.

Real engines run far below the roofline on a model like DeepSeek-V3.2 (sparse-attention indexers, routing,
sampling, kernels that are not at peak), and that loss grows with the tokens in a step rather than with the bytes:
it is modelled as ``TOKEN_COST_S``, node-seconds per token processed, per engine and attention layout. These are
the only numbers not taken from datasheets; benchmarks/sim_vs_seed.py fits them on the seed study's ShareGPT runs
(one geometric mean per group) and reports the leave-one-out errors. Being per token, the cost also makes
speculative decoding a loss at high concurrency (each verified draft token costs, only accepted ones pay) and a
gain at low concurrency (where reading the weights dominates), as on the real engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.config import Hardware, ServerConfig
from autotune.engines import get_engine
from autotune.engines.defaults import ServingDefaults
from autotune.engines.layout import Layout
from autotune.errors import FailureKind, StartupFailure
from autotune.sim.specs import DeviceSpec, ModelShape, device_spec, model_shape

# Node-seconds per token in a step, by (engine, attention layout): fitted by benchmarks/sim_vs_seed.py.
TOKEN_COST_S = {
    ("vllm", "tp"): 142.7e-6,
    ("vllm", "dp"): 124.3e-6,
    ("sglang", "tp"): 311.2e-6,
    ("sglang", "dp"): 96.8e-6,
    ("trtllm", "tp"): 367.2e-6,
    ("trtllm", "dp"): 367.2e-6,  # no seed run: the tp fit
}
BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY = 0.8, 0.5  # what well-tuned kernels reach of the datasheet peaks
GIB = 1024**3


NO_CUDA_GRAPH_LAUNCH_S = 4e-6 * 12  # per layer: ~12 kernel launches of ~4 µs each when not captured in a graph


@dataclass(frozen=True)
class RankLoad:
    """One attention rank's work in a step: decoding sequences, the context they attend, prefill tokens."""

    decode_seqs: int = 0
    decode_context: int = 0
    prefill_tokens: int = 0
    prefill_context: int = 0


def engine_layout(config: ServerConfig) -> Layout:
    """How ``config`` places the model on GPUs: its engine adapter's answer (the one the rules and GPU slots get)."""
    return get_engine(config.engine).layout(config)


def engine_defaults(config: ServerConfig) -> ServingDefaults:
    """The engine's own defaults and quirks (its adapter's), or a generic continuous batcher's."""
    return get_engine(config.engine).serving_defaults or ServingDefaults()


class AnalyticProfile:
    """A started (simulated) engine: its limits and its step time."""

    def __init__(self, config: ServerConfig, hardware: Hardware, shape: ModelShape, device: DeviceSpec,
                 token_cost_s: float | None = None) -> None:  # fmt: skip
        self.config, self.shape, self.device = config, shape, device
        self.layout = engine_layout(config)
        self.defaults = engine_defaults(config)
        self.token_cost_s = TOKEN_COST_S.get(self.cost_group, 0.0) if token_cost_s is None else token_cost_s
        self.kv_bytes = shape.kv_bytes / (2 if (config.kv_cache_dtype or "auto").startswith("fp8") else 1)
        self.max_model_len = min(config.max_model_len or shape.max_positions, shape.max_positions)
        self.speculation = config.speculation
        self.max_running = config.max_num_seqs or self._default_max_running()
        self.batched_tokens = config.max_num_batched_tokens or self.defaults.batched_tokens
        self.kv_tokens_per_rank = self._kv_capacity(hardware)

    @property
    def cost_group(self) -> tuple[str, str]:
        """The key of TOKEN_COST_S this configuration falls in: its engine and whether attention is data-parallel."""
        attention_dp = self.layout.ranks > 1 and not self.layout.independent_replicas  # replicas each attend by TP
        return self.config.engine, "dp" if attention_dp else "tp"

    @property
    def ranks(self) -> int:
        return self.layout.ranks

    def _default_max_running(self) -> int:
        if self.speculation and self.defaults.speculative_max_running:
            return self.defaults.speculative_max_running
        return self.defaults.max_running

    # -- memory --------------------------------------------------------------------------------------------------
    def weights_per_gpu(self) -> float:
        s, lay = self.shape, self.layout
        dense = (s.attention_params + s.other_dense_params) * s.bytes_per_param / lay.rank_gpus
        experts = s.expert_params * s.experts * s.moe_layers * s.bytes_per_param / lay.expert_gpus
        return dense + experts

    def kv_bytes_per_token(self) -> float:
        """KV bytes one token of one sequence occupies on each GPU of its rank."""
        replicated = self.shape.latent_kv  # MLA: every GPU of the TP group holds the whole latent
        return self.kv_bytes * self.shape.layers / (1 if replicated else self.layout.rank_gpus)

    def _kv_capacity(self, hardware: Hardware) -> int:
        fraction = self.config.gpu_memory_utilization or self.defaults.memory_fraction
        budget = self.device.memory * fraction
        activations = self.batched_tokens * self.shape.hidden * 24 + 2 * GIB  # activations, graphs, sampler
        weights = self.weights_per_gpu()
        free = budget - weights - activations
        if free <= 0:
            raise StartupFailure(FailureKind.OOM, self._oom_message(weights, budget))
        tokens = int(free / self.kv_bytes_per_token())
        if self.defaults.needs_one_full_request and tokens < self.max_model_len:
            needed = self.max_model_len * self.kv_bytes_per_token() / GIB
            raise StartupFailure(FailureKind.OOM, (
                f"ValueError: To serve at least one request with the models's max seq len ({self.max_model_len}), "
                f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({free / GIB:.2f} GiB). Based on the available memory, the estimated maximum model length is "
                f"{tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
                "the engine."))  # fmt: skip
        return tokens

    def _oom_message(self, weights: float, budget: float) -> str:
        if self.defaults.oom_message:
            return self.defaults.oom_message
        return (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {weights / GIB:.2f} GiB. GPU 0 has a total "
            f"capacity of {self.device.memory / GIB:.2f} GiB of which {budget / GIB:.2f} GiB may be used."
        )

    # -- time ----------------------------------------------------------------------------------------------------
    def work_key(self) -> tuple:
        """Everything ``step_work`` and ``tokens_per_decode`` read: two profiles with equal keys do each step's work
        in the same time (a replayed schedule, ``autotune.sim.replay``, computes it once for both)."""
        return (self.shape, self.device, self.layout, self.token_cost_s, self.kv_bytes, self.speculation,
                BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY)  # fmt: skip

    def timing_key(self) -> tuple:
        """Everything ``step_time`` reads: two profiles with equal keys time every step alike, so the direct mode
        (``autotune.sim.direct``) reuses one's benchmark for the other. A knob the model ignores (the attention
        backend) or one that only sets a limit (checked there) is not in it."""
        return self.work_key(), self._overhead()

    def tokens_per_decode(self) -> tuple[int, float]:
        """(tokens each decoding sequence runs through the model per step, tokens it gains on average)."""
        spec = self.speculation
        if spec is None:
            return 1, 1.0
        verified = spec.num_draft_tokens or spec.num_steps + 1
        accepted = sum(self.shape.mtp_acceptance**i for i in range(spec.num_steps + 1))
        return verified, accepted

    def step_time(self, loads: list[RankLoad]) -> float:
        """Seconds one engine step takes with these per-rank loads (all ranks step together)."""
        return self.with_overhead(self.step_work(loads))

    def step_work(self, loads: list[RankLoad]) -> float | None:
        """A step's seconds but the engine's fixed overhead; None for a step of no tokens (it takes no time)."""
        verified, _ = self.tokens_per_decode()
        rank_tokens = [load.decode_seqs * verified + load.prefill_tokens for load in loads]
        total = sum(rank_tokens)
        if total == 0:
            return None
        rank_time = max(self._rank_time(load, tokens) for load, tokens in zip(loads, rank_tokens, strict=True))
        roofline = rank_time + self._experts_time(total)
        draft = 1 + (self.speculation.num_steps / self.shape.layers if self.speculation else 0)  # MTP: one layer
        engine = self.token_cost_s * total
        return (roofline + engine) * draft + self._communication(max(rank_tokens), total)

    def with_overhead(self, work: float | None) -> float:
        """A step's seconds from its ``step_work``: CUDA graphs on or off change only this."""
        return 0.0 if work is None else work + self._overhead()

    def _roofline(self, bytes_read: float, flops: float) -> float:
        peak = self.device.flops_fp8 if self.shape.bytes_per_param <= 1 else self.device.flops_bf16
        return max(bytes_read / (self.device.bandwidth * BANDWIDTH_EFFICIENCY), flops / (peak * COMPUTE_EFFICIENCY))

    def _rank_time(self, load: RankLoad, tokens: int) -> float:
        """Attention and the dense layers of one rank, per GPU of its TP group."""
        s, g = self.shape, self.layout.rank_gpus
        dense = s.attention_params + s.other_dense_params
        topk = s.sparse_topk or math.inf
        context = min(load.decode_context, load.decode_seqs * topk)
        kv_read = context * self.kv_bytes * s.layers / (1 if s.latent_kv else g)
        attention_pairs = context + min(load.prefill_context, load.prefill_tokens * topk)
        flops = (2 * dense * tokens + attention_pairs * s.attention_flops * s.layers) / g
        return self._roofline(dense * s.bytes_per_param / g + kv_read, flops)

    def _experts_time(self, tokens: int) -> float:
        """Routed experts over the whole node: each one a token touches is read once per step."""
        s, lay = self.shape, self.layout
        if not s.moe_layers:
            return 0.0
        if lay.independent_replicas:  # each replica reads the experts its own share of the tokens touches, in parallel
            tokens = math.ceil(tokens / lay.ranks)
        touched = s.experts * (1 - (1 - s.experts_per_token / s.experts) ** tokens)
        bytes_read = touched * s.expert_params * s.moe_layers * s.bytes_per_param / lay.expert_gpus
        flops = 2 * s.expert_params * s.experts_per_token * s.moe_layers * tokens / lay.expert_gpus
        return self._roofline(bytes_read, flops)

    def _communication(self, rank_tokens: int, total_tokens: int) -> float:
        s, lay, dev = self.shape, self.layout, self.device
        seconds = 0.0
        if lay.rank_gpus > 1:  # two all-reduces per layer inside the TP group
            ring = 2 * (lay.rank_gpus - 1) / lay.rank_gpus
            seconds += (
                2 * s.layers * (dev.collective_latency_s + rank_tokens * s.hidden * 2 * ring / dev.link_bandwidth)
            )
        if s.moe_layers and lay.ranks > 1 and not lay.independent_replicas:
            if lay.expert_parallel:  # all-to-all dispatch (fp8) and combine (bf16) of each token's expert copies
                volume = total_tokens / lay.gpus * s.experts_per_token * s.hidden * 3
            else:  # all-gather then reduce-scatter of every rank's tokens around the TP-sharded experts
                volume = total_tokens * s.hidden * 2 * 2 * (lay.gpus - 1) / lay.gpus
            seconds += s.moe_layers * (2 * dev.collective_latency_s + volume / dev.link_bandwidth)
        return seconds

    def _overhead(self) -> float:
        overhead = self.defaults.step_overhead_s
        if self.speculation and self.defaults.speculative_step_overhead_s is not None:
            overhead = self.defaults.speculative_step_overhead_s  # e.g. SGLang's overlap scheduler is off then
        if self.config.cuda_graph is False:
            overhead += NO_CUDA_GRAPH_LAUNCH_S * self.shape.layers
        return overhead


def analytic_profile(config: ServerConfig, hardware: Hardware, token_cost_s: float | None = None) -> AnalyticProfile:
    """Start ``config`` in the analytic model (``token_cost_s`` overrides the fitted cost: for fitting it).

    Raises:
        StartupFailure: it would not start (out of memory, model unknown), with the engine's own message.
    """
    shape = model_shape(config.model)
    if shape is None:
        raise StartupFailure(FailureKind.CRASH, f"simulator: no shape known for model {config.model!r} "
                             "(give a local directory with config.json, or a model in autotune/sim/specs.py)")  # fmt: skip
    return AnalyticProfile(config, hardware, shape, device_spec(hardware.gpu, hardware.gpus), token_cost_s)
