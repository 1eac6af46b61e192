"""How a configuration places the model on GPUs: the one answer the rules, the simulator, ``autotune init`` and the
GPU slots of a node all ask an engine adapter for (``Engine.layout``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """A launch's parallel layout.

    Attributes:
        gpus: the GPUs the launch occupies (what a node leases to it, what the GPU-count rule compares).
        ranks: the attention ranks, each scheduling its own batch: data-parallel copies or DP-attention ranks.
        rank_gpus: the GPUs of one rank (its tensor- and pipeline-parallel group).
        expert_parallel: the experts (MoE models) are spread over the GPUs rather than split inside each.
        independent_replicas: the ranks are separate copies of the model (each holds all its weights, schedules
            alone and exchanges nothing with the others), not the data-parallel ranks of one engine.
    """

    gpus: int
    ranks: int = 1
    rank_gpus: int = 1
    expert_parallel: bool = False
    independent_replicas: bool = False

    @classmethod
    def of(cls, gpus: int, ranks: int, expert_parallel: bool, independent_replicas: bool = False) -> Layout:
        """``ranks`` ranks sharing ``gpus`` GPUs evenly (at least one each)."""
        return cls(gpus, ranks, max(1, gpus // ranks), expert_parallel, independent_replicas)

    @property
    def expert_gpus(self) -> int:
        """The GPUs one copy of the experts is spread over: the whole layout, or one replica's."""
        return self.rank_gpus if self.independent_replicas else self.gpus
