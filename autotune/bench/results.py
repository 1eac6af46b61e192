"""The result of one benchmark: vllm bench serve's result JSON (its ``--save-result`` field names) plus ``client``.

Every backend returns it (an engine process, the simulator's server, the simulator in process), so the trial, the
prior and ``study validate`` read one type. The names are vllm bench's own, so that a result saved by autotune reads
like one saved by vllm bench; ``to_vllm_json`` gives that JSON back with the keys in the order they came (the
benchmark.json artifact is byte for byte what it was when results were dicts).

A performance model that predicts only some metrics (a table of measured results, aiconfigurator) gives a result
with only those: a field it does not give is absent from ``to_vllm_json`` and None as an attribute.

A benchmark of mixed traffic (``dataset: mix``, ``autotune.space.mix``) adds ``classes``: one ``ClassResult`` per
request class, with the same metric names computed over that class's requests (rates over the whole benchmark's
duration, so the classes' throughputs add up to the overall), its share and the number of its requests sent
(``num_prompts``). ``slo_checks`` judges a result on the objective's SLOs (the whole benchmark) and each class's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

if TYPE_CHECKING:
    from autotune.space.schema import Workload

# percentiles asked for besides 50/90/99 (``autotune bench --percentiles 95,99.9``) give fields of this form
_EXTRA_PERCENTILE = re.compile(r"p\d+(\.\d+)?_(ttft|tpot|itl|e2el)_ms")


class BenchmarkResult(BaseModel):
    """One benchmark's result, in vllm bench's field names; durations in seconds, latencies in milliseconds."""

    # model_id is vllm bench's field: pydantic before 2.10 warns of a field in its "model_" namespace
    model_config = ConfigDict(frozen=True, extra="allow", protected_namespaces=())

    # the descriptive fields that open vllm bench's JSON
    date: str | None = None
    backend: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: int | None = None
    request_rate: float | str | None = None  # "inf": all requests at once
    burstiness: float | None = None
    max_concurrency: int | None = None
    # counts and rates
    duration: float | None = None
    completed: int | None = None
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    # latencies (ms): mean, median, std and percentiles of time to first token, time per output token, inter-token
    # latency and end-to-end latency
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    p50_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    p50_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    p50_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    median_e2el_ms: float | None = None
    std_e2el_ms: float | None = None
    p50_e2el_ms: float | None = None
    p90_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    errors_by_type: dict[str | None, int] | None = None  # failed requests by error type (``http_503``, ``timeout``)
    # how the client kept its timing (event-loop lag, saturated, shards), or how the result was simulated
    client: dict[str, Any] | None = None
    # vllm bench's per-request lists, when asked for (``include_requests``)
    input_lens: list[int | None] | None = None
    output_lens: list[int] | None = None
    ttfts: list[float] | None = None
    itls: list[list[float]] | None = None
    latencies: list[float] | None = None
    start_times: list[float] | None = None
    errors: list[str] | None = None
    # a mix's result per request class (``dataset: mix``), in the workload's order of classes
    classes: list[ClassResult] | None = None

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_key_order(cls, data: Any, handler: Any) -> BenchmarkResult:
        result = handler(data)
        if isinstance(data, Mapping):
            result._order = tuple(data)
        return result

    @model_validator(mode="after")
    def _only_vllm_fields(self) -> BenchmarkResult:
        unknown = [name for name in self.model_extra or {} if not _EXTRA_PERCENTILE.fullmatch(name)]
        if unknown:
            raise ValueError(f"not a field of vllm bench's result: {', '.join(unknown)}")
        return self

    @classmethod
    def from_vllm_json(cls, data: Mapping[str, Any]) -> BenchmarkResult:
        """The result of vllm bench's JSON (or of a dict of its fields, as the simulator computes them)."""
        return cls.model_validate(dict(data))

    def to_vllm_json(self) -> dict[str, Any]:
        """vllm bench's JSON of this result: the fields it was given, in the order given (a copy)."""
        data = self.model_dump(exclude_unset=True)
        if self.classes is not None:
            data["classes"] = [result.to_vllm_json() for result in self.classes]
        ordered = {name: data[name] for name in self._order if name in data}
        return ordered | {name: value for name, value in data.items() if name not in ordered}

    def metric(self, name: str) -> Any:
        """A field by its vllm bench name (an objective's metric, an SLO's), or None where this result has none."""
        if name in type(self).model_fields or name in (self.model_extra or {}):
            return getattr(self, name)
        return None

    @property
    def saturated(self) -> bool:
        """Whether the client could not keep its timing (the measurement describes the client, not the server)."""
        return bool((self.client or {}).get("saturated", False))

    def class_result(self, name: str) -> ClassResult | None:
        """The result of the mix's class ``name``, or None (no such class, or not a mix)."""
        return next((result for result in self.classes or [] if result.name == name), None)

    def slo_checks(self, workload: Workload, slo: Mapping[str, float]) -> list[SloCheck]:
        """Every SLO this result is judged on: ``slo`` (the objective's, ms by metric) on the whole benchmark, and in
        a mix each class's own ``slo`` on that class's metrics."""
        checks = [SloCheck(metric=metric, limit=limit, measured=self.metric(metric)) for metric, limit in slo.items()]
        for request_class in workload.classes or []:
            measured = self.class_result(request_class.name)
            checks += [SloCheck(metric=metric, limit=limit, request_class=request_class.name,
                                measured=measured.metric(metric) if measured is not None else None)
                       for metric, limit in request_class.slo.items()]  # fmt: skip
        return checks

    def slo_misses(self, workload: Workload, slo: Mapping[str, float]) -> list[SloCheck]:
        """The SLOs of ``slo_checks`` this result misses (none: it is feasible on its SLOs)."""
        return [check for check in self.slo_checks(workload, slo) if check.missed]

    def slo_violations(self, workload: Workload, slo: Mapping[str, float], cap: float = 1.0) -> dict[str, float]:
        """The graded violation of each SLO by its constraint name (``SloCheck.key``), at most ``cap``: what a trial
        reports to Optuna (``space.mix.slo_keys`` names them before any is measured)."""
        return {check.key: min(check.violation, cap) for check in self.slo_checks(workload, slo)}


class ClassResult(BenchmarkResult):
    """One request class of a mix: its name and share (of the shares' sum), ``num_prompts`` its requests sent, and
    the metrics of those requests, in the overall result's names."""

    name: str
    share: float


class SloCheck(BaseModel):
    """One SLO judged on one result: the limit (ms) on a metric of the whole benchmark or of one class of a mix."""

    model_config = ConfigDict(frozen=True)

    metric: str
    limit: float
    measured: float | None  # None: the result has no such metric (or no such class): the SLO is missed
    request_class: str | None = None  # None: the whole benchmark

    @property
    def key(self) -> str:
        """The constraint's name: ``slo:<metric>``, or ``slo:<class>:<metric>`` for a class's own."""
        return f"slo:{self.metric}" if self.request_class is None else f"slo:{self.request_class}:{self.metric}"

    @property
    def violation(self) -> float:
        """(measured − limit) / limit: positive when missed (graded: barely over is small), inf when unmeasured."""
        return math.inf if self.measured is None else (self.measured - self.limit) / self.limit

    @property
    def missed(self) -> bool:
        return self.violation > 0

    def text(self) -> str:
        """E.g. ``rag: p99_ttft_ms 4210.0 > 4000``."""
        measured = "unmeasured" if self.measured is None else f"{self.measured:.1f}"
        where = f"{self.request_class}: " if self.request_class else ""
        return f"{where}{self.metric} {measured} {'>' if self.missed else '<='} {self.limit:g}"


BenchmarkResult.model_rebuild()
