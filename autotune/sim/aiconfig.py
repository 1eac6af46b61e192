"""aiconfigurator (NVIDIA, optional extra) as a performance model: measured-kernel estimates of one configuration.

Install: ``pip install 'autotune[aiconfigurator]'`` (aiconfigurator 0.12.0 and aiconfigurator-core 0.12.0, pinned
both: 0.13 moves to ``aisimulate``). The mapping follows aiconfigurator's own conventions: batch size per
attention-DP rank = client concurrency / DP; MTP acceptance is ours to give (DeepSeek's published ~0.85);
``tokens/s/gpu`` counts output tokens only.
"""

from __future__ import annotations

import logging
import warnings

from autotune.bench.datasets import BenchRequest
from autotune.config import Hardware, ServerConfig
from autotune.engines.layout import Layout
from autotune.errors import FailureKind, StartupFailure, UsageError
from autotune.sim.analytic import engine_layout
from autotune.sim.specs import model_shape
from autotune.space.schema import Workload

# aiconfigurator's own backends and the versions of their measured databases, pinned: ~100× faster calls
DB_VERSION = {"sglang": "0.5.14", "trtllm": "1.3.0rc20", "vllm": "0.24.0"}
SYSTEMS = {"H200": "h200_sxm", "H100": "h100_sxm", "B200": "b200_sxm"}
# aiconfigurator ships DeepSeek-V3's config, not V3.2's; the two share every dense shape
MODEL_NAMES = {"DeepSeek-V3.2": "deepseek-ai/DeepSeek-V3", "DeepSeek-V3.2-Exp": "deepseek-ai/DeepSeek-V3",
               "DeepSeek-V3": "deepseek-ai/DeepSeek-V3", "DeepSeek-R1": "deepseek-ai/DeepSeek-V3"}  # fmt: skip


def _estimate():
    try:
        warnings.filterwarnings("ignore")
        logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
        from aiconfigurator.cli.api import cli_estimate
        from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError
    except ImportError:
        raise UsageError(
            "performance_model aiconfigurator needs the optional extra; fix: pip install 'autotune[aiconfigurator]'"
        ) from None
    return cli_estimate, PerfDataNotAvailableError


class AiconfiguratorModel:
    def __init__(self, config: ServerConfig, hardware: Hardware) -> None:
        self.config, self.hardware = config, hardware
        if config.engine not in DB_VERSION:  # an engine it has no measurements of: it cannot model it
            raise StartupFailure(FailureKind.NO_DATA, f"aiconfigurator models {', '.join(DB_VERSION)}, not "
                                 f"{config.engine}; fix: performance_model analytic")  # fmt: skip
        shape = model_shape(config.model)
        self.model = MODEL_NAMES.get(shape.name if shape else "", config.model)
        self.system = SYSTEMS.get((hardware.gpu or "").upper()[:4])
        if self.system is None:
            raise UsageError(f"aiconfigurator knows {', '.join(SYSTEMS)}; fix: set hardware.gpu to one of them")

    def _arguments(self, workload: Workload) -> dict:
        cfg, layout = self.config, engine_layout(self.config)
        spec = cfg.speculation
        concurrency = workload.max_concurrency or workload.num_prompts
        nextn = spec.num_steps if spec else 0
        return dict(mode="agg", backend_name=cfg.engine, backend_version=DB_VERSION[cfg.engine],
                    isl=workload.input_len, osl=workload.output_len,
                    batch_size=max(1, concurrency // layout.ranks), ctx_tokens=cfg.max_num_batched_tokens,
                    tp_size=layout.rank_gpus, pp_size=cfg.pp or 1, attention_dp_size=self._engine_ranks(layout),
                    moe_ep_size=layout.expert_gpus if layout.expert_parallel else None,
                    moe_tp_size=None if layout.expert_parallel else layout.expert_gpus,
                    kvcache_quant_mode="fp8" if (cfg.kv_cache_dtype or "").startswith("fp8") else None,
                    nextn=nextn, nextn_accepted=0.85 * nextn if nextn else None,
                    free_gpu_memory_fraction=cfg.gpu_memory_utilization)  # fmt: skip

    @staticmethod
    def _engine_ranks(layout: Layout) -> int:
        """The attention-DP ranks of one engine: independent replicas are estimated one at a time."""
        return 1 if layout.independent_replicas else layout.ranks

    def evaluate(self, workload: Workload, requests: list[BenchRequest], model_name: str) -> dict:
        cli_estimate, no_data = _estimate()
        try:
            estimate = cli_estimate(self.model, self.system, **self._arguments(workload))
        except no_data as exc:
            raise StartupFailure(FailureKind.NO_DATA, f"aiconfigurator: {exc}") from None
        except RuntimeError as exc:
            kind = FailureKind.OOM if str(exc).startswith("OOM") else FailureKind.CRASH
            raise StartupFailure(kind, f"aiconfigurator: {exc}") from None
        except ValueError as exc:
            raise StartupFailure(FailureKind.UNSUPPORTED, f"aiconfigurator: {exc}") from None
        raw = estimate.raw
        layout = engine_layout(self.config)
        replicas = layout.ranks if layout.independent_replicas else 1  # the estimate is one replica's
        output = float(raw["tokens/s/gpu"]) * int(raw["num_total_gpus"]) * replicas
        total = output * (workload.input_len + workload.output_len) / workload.output_len
        ttft, tpot = float(estimate.ttft), float(estimate.tpot)
        return {"output_throughput": output, "total_token_throughput": total, "mean_ttft_ms": ttft,
                "median_ttft_ms": ttft, "p99_ttft_ms": ttft, "mean_tpot_ms": tpot, "median_tpot_ms": tpot,
                "p99_tpot_ms": tpot, "completed": len(requests), "failed": 0,
                "client": {"simulated": True, "mode": "direct", "performance_model": "aiconfigurator",
                           "kv_cache_warning": bool(estimate.kv_cache_warning)}}  # fmt: skip
