"""Mixed traffic inside one benchmark: ``dataset: mix``, request classes sent together in one load.

A mix is real traffic: say 70% chat (1000 prompt tokens, 200 out) and 30% RAG (8000 in, 300 out), interleaved in one
benchmark against one server. Each class has a name, a share and its own request shape: random prompts of
``input_len``/``output_len`` (with ``range_ratio`` and ``prefix_len``) or a ShareGPT/JSONL file; optionally its own
SLO, judged on that class's metrics (the objective's SLO stays the whole benchmark's)::

    workload:
      dataset: mix
      num_prompts: 1000
      classes:
        - {name: chat, share: 0.7, input_len: 1000, output_len: 200}
        - {name: rag, share: 0.3, input_len: 8000, output_len: 300, slo: {p99_ttft_ms: 4000}}

Shares are weights (0.7/0.3 and 7/3 are the same mix). The number of requests of each class is exact: the
workload's ``num_prompts`` split by largest remainder (``class_counts``). The rest of the workload (load, arrivals,
endpoint, seed, headers) is the whole benchmark's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.errors import UsageError
from autotune.space.metrics import LatencyMetric

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class RequestClass(BaseModel):
    """One class of a mix: its name, its share of the requests and the shape of its requests (a dataset's, like a
    workload's), and optionally its own SLO (upper bounds in ms on this class's metrics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    share: PositiveFloat
    dataset: Literal["random", "sharegpt", "jsonl"] = "random"
    path: str | None = None
    input_len: PositiveInt = 1024
    output_len: PositiveInt = 128
    range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prefix_len: Annotated[int, Field(ge=0)] = 0
    slo: dict[LatencyMetric, PositiveFloat] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        # printed in results and named in a constraint (``slo:<class>:<metric>``): no spaces, colons or commas
        if not _NAME.fullmatch(name):
            raise ValueError(f"class name {name[:80]!r} is not a plain name; fix: letters, digits and _ . - "
                             "(64 at most, a letter or digit first), e.g. chat")  # fmt: skip
        return name

    @model_validator(mode="after")
    def _file_iff_dataset(self) -> RequestClass:
        if self.dataset != "random" and self.path is None:
            raise ValueError(f"class {self.name}: the {self.dataset} dataset needs a file; fix: set its `path`")
        if self.dataset == "random" and self.path is not None:
            raise ValueError(f"class {self.name}: `path` is for a sharegpt or jsonl class; fix: set its `dataset` "
                             "or remove the path")  # fmt: skip
        return self


def _classes_fit(classes: list[RequestClass] | None, info: ValidationInfo) -> list[RequestClass] | None:
    """Classes are given iff the dataset is ``mix`` (and then no workload ``path``), with names unique."""
    dataset = info.data.get("dataset")
    if dataset is None:  # the dataset itself was refused: that error is the one to read
        return classes
    if dataset == "mix" and not classes:
        raise ValueError("dataset mix needs its request classes; fix: give `classes:`, e.g. "
                         "[{name: chat, share: 0.7, input_len: 1000, output_len: 200}, "
                         "{name: rag, share: 0.3, input_len: 8000, output_len: 300}]")  # fmt: skip
    if dataset == "mix" and info.data.get("path") is not None:
        raise ValueError(
            "a mix reads its files from its classes; fix: give each sharegpt or jsonl class its own "
            "`path`, and the workload none"
        )
    if dataset != "mix" and classes is not None:
        raise ValueError(f"classes are for dataset mix (this workload's is {dataset}); fix: set `dataset: mix` or "
                         "remove `classes`")  # fmt: skip
    names = [c.name for c in classes or []]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"class names must be unique: {', '.join(twice)} named twice; fix: rename one")
    return classes


# The ``classes`` field of a Workload: checked against its ``dataset`` (declared before it).
MixClasses = Annotated[list[RequestClass] | None, Field(validate_default=True), AfterValidator(_classes_fit)]


def class_counts(shares: Sequence[float], total: int) -> list[int]:
    """``total`` requests split by ``shares`` (weights), exactly: largest-remainder (Hamilton) rounding.

    Each class gets the whole part of its quota ``total · share / sum(shares)``; the requests left go one each to
    the classes with the largest remainders, ties to the class listed first. Quotas are computed exactly (a share is
    read as the decimal it is written as), so 0.7/0.3 of 100 is 70/30 and three equal shares of 100 are 34/33/33.
    """
    weights = [Fraction(str(share)) for share in shares]
    quotas = [total * weight / sum(weights) for weight in weights]
    counts = [math.floor(quota) for quota in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts


def mix_counts(classes: Sequence[RequestClass], total: int) -> list[int]:
    """The requests of each class among ``total`` (``class_counts``), every class sent at least once.

    Raises:
        UsageError: a class would get no request (too few prompts for its share).
    """
    counts = class_counts([c.share for c in classes], total)
    if empty := [c.name for c, count in zip(classes, counts, strict=True) if count == 0]:
        weight = sum(c.share for c in classes)
        need = max(math.ceil(weight / c.share) for c in classes)
        raise UsageError(f"class {', '.join(empty)} of the mix gets none of the {total} requests (largest-remainder "
                         f"split by share); fix: num_prompts {need} or more, or a larger share")  # fmt: skip
    return counts


def slo_keys(classes: Sequence[RequestClass] | None, slo: dict[str, Any]) -> list[str]:
    """The constraint names a benchmark's SLOs are judged under: ``slo:<metric>`` for the whole benchmark's (the
    objective's), ``slo:<class>:<metric>`` for each class's own."""
    own = [f"slo:{c.name}:{metric}" for c in classes or [] for metric in c.slo]
    return [f"slo:{metric}" for metric in slo] + own
