"""Search spaces: the YAML schema (pydantic, extra="forbid") and what a study does with it.

A space names the engines that may run, the knobs that are fixed, and the parameters Optuna varies, shared by all
engines or per engine. Each point of the space is a ``Point``: a ``ServerConfig`` (what is launched) plus client-side
knobs (the load the benchmark applies). Loading from YAML, with errors that name the key path, is in ``spacefile``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.config import CLIENT_KNOBS, Hardware, ServerConfig
from autotune.space.metrics import Direction, LatencyMetric, ThroughputMetric, metric_direction, metric_kind
from autotune.space.mix import MixClasses
from autotune.space.params import (  # noqa: F401  (re-exported: the space's parameters are part of its schema)
    ENUMERATION_LIMIT,
    PARAM_KINDS,
    ChoiceParam,
    FloatParam,
    IntParam,
    Param,
    Scalar,
    TiedParam,
    _is_load,
    _ParamBase,
    _Strict,
    load_order,
    tied_label,
)

if TYPE_CHECKING:  # only in annotations: the simulator's server process starts without importing optuna
    import optuna

ENGINE_PARAM = "engine"


class EngineSection(_Strict):
    """What is specific to one engine: its version, how to invoke it, and its own fixed knobs and parameters."""

    version: str | None = None
    executable: list[str] | None = Field(default=None, min_length=1)
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Param] = Field(default_factory=dict)


class Cost(_Strict):
    """Virtual node-minutes the simulator charges per trial (a real engine is charged its measured wall time).

    The defaults are a DeepSeek-scale 8-GPU node: a launch that serves costs ``launch_min`` plus ``benchmark_min``
    per load measured on it; a launch that fails costs ``failed_launch_min``; a static rejection or a duplicate, 0.
    """

    launch_min: Annotated[float, Field(ge=0)] = 8.0
    benchmark_min: Annotated[float, Field(ge=0)] = 2.0
    failed_launch_min: Annotated[float, Field(ge=0)] = 6.0


class Simulation(_Strict):
    """Run the space's engines in autotune's simulator instead of launching them; every result is labelled simulated.

    The engines keep their own knobs, rules and commands (so the exported command is the real engine's); only the
    process that serves the trial is the simulator's.
    """

    performance_model: Literal["analytic", "aiconfigurator", "table"] = "analytic"
    table: str | None = None
    mode: Literal["server", "direct"] = "server"
    time_scale: Annotated[float, Field(gt=0, le=1)] = 0.1
    cost: Cost = Field(default_factory=Cost)

    @model_validator(mode="after")
    def _consistent(self) -> Simulation:
        if self.performance_model == "table" and not self.table:
            raise ValueError("performance_model table needs `table: FILE.csv`")
        if self.performance_model != "analytic" and self.mode == "server":
            raise ValueError(
                f"performance_model {self.performance_model} gives results, not step times: use mode: direct"
            )
        return self


class Workload(_Strict):
    """The benchmark each trial runs (vllm bench serve's options)."""

    dataset: Literal["random", "sharegpt", "jsonl", "mix"] = "random"
    path: str | None = None
    # the tokenizer prompts are counted with (a tokenizer.json, a directory holding one, or a hub id); default: the
    # model's own, from its directory or the Hugging Face cache the engine reads (autotune.engines.hub)
    tokenizer: str | None = Field(default=None, min_length=1)
    classes: MixClasses = None  # dataset mix: the request classes sent together, their shares (autotune.space.mix)
    endpoint: Literal["/v1/completions", "/v1/chat/completions"] = "/v1/completions"
    input_len: PositiveInt = 1024
    output_len: PositiveInt = 128
    range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prefix_len: Annotated[int, Field(ge=0)] = 0
    num_prompts: PositiveInt = 1000
    request_rate: PositiveFloat = math.inf
    burstiness: PositiveFloat = 1.0
    max_concurrency: PositiveInt | None = None
    ignore_eos: bool = True
    warmup_requests: Annotated[int, Field(ge=0)] = 0
    seed: int = 0
    # sent with every request, readiness probes included (a gateway's routing header, say); the API key is not one
    # of them: autotune sends the launch's own key (Engine.api_key), so that no key is written in a space
    headers: dict[str, str] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # request fields, e.g. {temperature: 0.7}
    # one workload of a space's `workloads:` mix: its name (as the simulator's table and `study best` name it), its
    # weight in the mix, SLOs of its own (in place of objective.slo) and its own load levels (in place of the
    # space's load parameters), e.g. {max_concurrency: [8, 16, 32]}
    name: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    weight: PositiveFloat = 1.0
    slo: dict[LatencyMetric, PositiveFloat] | None = None
    loads: dict[Literal["max_concurrency", "request_rate"], list[PositiveFloat]] | None = None

    @field_validator("loads")
    @classmethod
    def _loads_listed(cls, loads: dict[str, list[float]] | None) -> dict[str, list[float]] | None:
        if loads is not None and (not loads or any(not values for values in loads.values())):
            raise ValueError("a workload's loads list at least one value per knob, e.g. {max_concurrency: [8, 16]}")
        if loads and "max_concurrency" in loads:
            if any(v != int(v) for v in loads["max_concurrency"]):
                raise ValueError("max_concurrency values are whole numbers")
            loads = loads | {"max_concurrency": [int(v) for v in loads["max_concurrency"]]}
        return loads

    @field_validator("headers")
    @classmethod
    def _no_key_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        from autotune.space.redact import is_secret_name  # sqlalchemy's import stays out of the simulator's server

        if any(name.lower() == "authorization" or is_secret_name(name) for name in headers):
            raise ValueError("holds a credential; fix: launch the engine with its API key (vLLM: VLLM_API_KEY in "
                             "the environment, or --api-key in extra_args): autotune sends that key itself")  # fmt: skip
        return headers


# ShareGPT at the seed study's mean lengths (219,111 input and ~197,000 output tokens over its 1000 prompts): random
# prompts of these lengths stand in for ShareGPT where its file is not needed (a simulated study, the search lab)
SHAREGPT_LIKE = Workload(dataset="random", input_len=219, output_len=197, range_ratio=0.9, num_prompts=1000, seed=42)


class ObjectiveMetric(_Strict):
    """One metric a study optimises; its direction is the metric's own (``autotune.space.metrics``)."""

    name: ThroughputMetric | LatencyMetric
    # left out: the metric's own direction (validate_default so that the validator fills it in); stated: must agree
    direction: Direction = Field(default=None, validate_default=True)

    @field_validator("direction", mode="before")
    @classmethod
    def _metric_direction(cls, direction: Any, info: ValidationInfo) -> Any:
        name = info.data.get("name")
        if name is None:  # the name was refused (its error comes first): nothing to derive from
            return direction
        own = metric_direction(name)
        if direction is None:
            return own
        if direction in ("maximize", "minimize") and direction != own:
            kind, better = metric_kind(name), "higher" if own == "maximize" else "lower"
            raise ValueError(f"{name} cannot be {direction}d: it is a {kind}, {better} is better; fix: {name} is a "
                             f"{kind}: {own} it, or leave direction out")  # fmt: skip
        return direction


class Objective(_Strict):
    """What a study optimises (one metric or several) and the latency SLOs a trial must meet (upper bounds, ms)."""

    metrics: list[ObjectiveMetric] = Field(
        default_factory=lambda: [ObjectiveMetric(name="total_token_throughput")], min_length=1
    )
    slo: dict[LatencyMetric, PositiveFloat] = Field(default_factory=dict)
    # how a space's several workloads make one value (autotune.search.mix): the weighted geometric mean of each
    # workload's best feasible throughput relative to the study's baseline on it, their weighted mean, or the worst
    mix: Literal["geomean", "weighted_mean", "worst"] = "geomean"


class Search(_Strict):
    """How the study searches: Optuna's sampler and pruner, and the performance model that ranks the space first.

    ``prior: auto`` is the analytic model for a GPU space whose model it knows, unless the space is itself simulated
    by the analytic model (a prior from the model that makes the landscape would prove nothing); else none.
    """

    sampler: Literal["tpe", "random"] = "tpe"
    pruner: Literal["percentile", "median", "none"] = "percentile"
    prior: Literal["auto", "analytic", "aiconfigurator", "none"] = "auto"
    prior_trials: Annotated[int, Field(ge=0)] = 4
    learn_failures: bool = True  # learned rules (a failure's message names a knob value) and OOM dominance
    refine: bool = True  # a duplicate suggestion queues an untried neighbour of the incumbent for the next trial


@dataclass(frozen=True)
class Point:
    """One point of a space: what to launch, and the client-side load to apply to it."""

    server: ServerConfig
    client: dict[str, Any] = field(default_factory=dict)


class SearchSpace(_Strict):
    """A validated search space. Build it with ``autotune.space.files.load_space`` to get file-aware errors."""

    name: str | None = None
    description: str | None = None
    hardware: Hardware = Field(default_factory=Hardware)
    engines: dict[str, EngineSection] = Field(min_length=1)
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Param] = Field(default_factory=dict)
    workload: Workload = Field(default_factory=Workload)
    objective: Objective = Field(default_factory=Objective)
    # several named workloads, each measured on every launch (a trial's value is their mix: autotune.search.mix);
    # `workload:` is the one-workload case
    workloads: list[Workload] | None = Field(default=None, min_length=1)
    startup_timeout_s: PositiveFloat = 900.0
    # a request that receives nothing for this long fails as a timeout; a launch whose requests all do is a hang
    stall_timeout_s: PositiveFloat = 60.0
    trials: PositiveInt | None = None  # the default of `autotune study run --n-trials` for this space
    simulate: Simulation | None = None
    search: Search = Field(default_factory=Search)

    @model_validator(mode="after")
    def _one_way_to_name_workloads(self) -> SearchSpace:
        if self.workloads is None:
            return self
        if "workload" in self.model_fields_set:
            raise ValueError("both `workload` and `workloads` given; fix: keep `workloads` (a list of named "
                             "workloads), or `workload` alone for one")  # fmt: skip
        names = [w.name for w in self.workloads]
        if len(self.workloads) > 1:
            if None in names:
                raise ValueError(f"workloads[{names.index(None)}] has no name; fix: give every workload of "
                                 "`workloads` a `name` (its results are shown by it)")  # fmt: skip
            if len(set(names)) < len(names):
                twice = sorted({n for n in names if names.count(n) > 1})
                raise ValueError(f"workload names must be unique, {', '.join(twice)} repeated; fix: rename one")
            # a maximised metric is a throughput: a metric's direction follows from its kind (ObjectiveMetric)
            if len(self.objective.metrics) > 1 or self.objective.metrics[0].direction != "maximize":
                raise ValueError("several workloads are mixed by their throughput: the objective must be one "
                                 "throughput metric to maximize; fix: objective.metrics: [{name: "
                                 "total_token_throughput}]")  # fmt: skip
        return self

    def mix_workloads(self) -> list[Workload]:
        """The workloads each launch is measured on: `workloads`, or the one `workload` as a list of one."""
        return list(self.workloads) if self.workloads is not None else [self.workload]

    @property
    def is_mix(self) -> bool:
        """Whether a trial's value is a mix of several workloads (else today's one-workload study)."""
        return len(self.mix_workloads()) > 1

    def workload_slo(self, workload: Workload) -> dict[str, float]:
        """The SLOs ``workload`` is judged by: its own, else the objective's."""
        return dict(workload.slo) if workload.slo is not None else dict(self.objective.slo)

    def workload_load_levels(self, engine: str, workload: Workload) -> list[dict[str, Any]]:
        """The loads ``workload`` is swept at, lightest first: its own `loads`, else the space's (``load_levels``)."""
        if workload.loads is None:
            return self.load_levels(engine)
        names = list(workload.loads)
        levels = [dict(zip(names, values, strict=True)) for values in itertools.product(*workload.loads.values())]
        return sorted(levels, key=load_order)

    def engine_params(self, engine: str) -> dict[str, Param]:
        """The parameters that vary when ``engine`` runs, by Optuna name (engine ones prefixed ``engine.``)."""
        own = {f"{engine}.{name}": p for name, p in self.engines[engine].params.items()}
        return {**self.params, **own}

    def launch_params(self, engine: str) -> dict[str, Param]:
        """The parameters that change the launch (Optuna suggests these); the rest are loads (``load_params``)."""
        return {name: p for name, p in self.engine_params(engine).items() if not _is_load(name, p)}

    def load_params(self, engine: str) -> dict[str, Param]:
        """The client-side parameters: the load a trial sweeps on its warm server, not part of the launch."""
        return {name: p for name, p in self.engine_params(engine).items() if _is_load(name, p)}

    def load_levels(self, engine: str) -> list[dict[str, Any]]:
        """Every load the space allows, lightest first (by concurrency, then rate; unset = unbounded): the sweep's
        levels. ``[{}]`` (the workload as written) when the space varies no client-side knob."""
        params = self.load_params(engine)
        names = [name.split(".", 1)[-1] for name in params]
        levels = [dict(zip(names, values, strict=True)) for values in itertools.product(*(p.values() for p in
                                                                                         params.values()))]  # fmt: skip
        levels = [{k: v for k, v in level.items() if v is not None} for level in levels]
        return sorted(levels, key=load_order) or [{}]

    def suggest(self, trial: optuna.Trial) -> Point:
        """Ask ``trial`` for one value per launch parameter (the engine first, so engine parameters are conditional).

        The load is not suggested: the trial sweeps the space's loads on the server it launched.
        """
        engines = list(self.engines)
        engine = trial.suggest_categorical(ENGINE_PARAM, engines) if len(engines) > 1 else engines[0]
        params = {name: p.suggest(trial, name) for name, p in self.launch_params(engine).items()}
        return self.point(engine, params)

    def point(self, engine: str, params: dict[str, Any]) -> Point:
        """The point for ``engine`` with parameter values by Optuna name; unspecified parameters take their default."""
        knobs: dict[str, Any] = {**self.fixed, **self.engines[engine].fixed}
        client: dict[str, Any] = {}
        for name, param in self.engine_params(engine).items():
            value = params[name] if name in params else param.default_value()
            for knob, setting in param.knob_values(name.split(".", 1)[-1], value).items():
                if setting is not None:
                    (client if knob in CLIENT_KNOBS else knobs)[knob] = setting
        version = self.engines[engine].version
        server = ServerConfig.model_validate({**knobs, "engine": engine, "engine_version": version})
        return Point(server, client)

    def point_from_params(self, params: dict[str, Any]) -> Point:
        """The point a finished trial ran, from its ``trial.params``."""
        engine = params.get(ENGINE_PARAM, next(iter(self.engines)))
        return self.point(engine, params)

    def default_point(self, engine: str) -> Point:
        """Fixed knobs plus each parameter's default: the engine's baseline in this space."""
        return self.point(engine, {})

    def size(self, engine: str) -> float:
        """How many distinct points the space has for ``engine`` (``inf`` with a continuous parameter)."""
        total = 1.0
        for param in self.engine_params(engine).values():
            total *= math.inf if isinstance(param, FloatParam) and param.step is None else len(param.values())
        return total

    def launch_size(self, engine: str) -> float:
        """How many distinct launch configurations the space has for ``engine`` (loads not counted)."""
        return math.prod(math.inf if isinstance(p, FloatParam) and p.step is None else len(p.values())
                         for p in self.launch_params(engine).values())  # fmt: skip

    def enumerate(self, engine: str, launches_only: bool = False) -> Iterator[Point]:
        """Every point for ``engine`` (a discrete space only; check ``size`` first); with ``launches_only``, every
        launch configuration once (loads at their defaults)."""
        params = self.launch_params(engine) if launches_only else self.engine_params(engine)
        names = list(params)
        value_lists = [p.values() for p in params.values()]
        for values in itertools.product(*value_lists):
            yield self.point(engine, dict(zip(names, values, strict=True)))

    def random_point(self, engine: str, rng: random.Random) -> Point:
        """A uniformly random point for ``engine``."""
        return self.point(engine, {name: p.sample(rng) for name, p in self.engine_params(engine).items()})
