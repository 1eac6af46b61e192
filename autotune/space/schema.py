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
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveFloat,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from autotune.config import CLIENT_KNOBS, Hardware, ServerConfig
from autotune.errors import UsageError
from autotune.space.metrics import LatencyMetric, ThroughputMetric
from autotune.space.mix import MixClasses

if TYPE_CHECKING:  # only in annotations: the simulator's server process starts without importing optuna
    import optuna

Scalar = str | int | float | bool | None
ENGINE_PARAM = "engine"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class _ParamBase(_Strict):
    def sample(self, rng: random.Random) -> Scalar:
        """A uniformly random value (for estimates over spaces too large to enumerate)."""
        return rng.choice(self.values())

    def default_value(self) -> Scalar:
        """The value a baseline takes (``None`` = knob unset)."""
        return self.default

    def knob_values(self, knob: str, value: Scalar) -> dict[str, Scalar]:
        """The knobs a value of this parameter sets."""
        return {knob: value}


class ChoiceParam(_ParamBase):
    """One of a list of values (``null`` = leave the knob to the engine's default)."""

    choices: list[Scalar] = Field(min_length=1)
    default: Scalar = None

    def values(self) -> list[Scalar]:
        return list(self.choices)

    def suggest(self, trial: optuna.Trial, name: str) -> Scalar:
        return trial.suggest_categorical(name, self.choices)


class IntParam(_ParamBase):
    """An integer range ``int: [low, high]``, optionally on a log scale or with a step."""

    bounds: tuple[int, int] = Field(alias="int")
    step: PositiveInt = 1
    log: bool = False
    default: int | None = None

    def values(self) -> list[int]:
        return list(range(self.bounds[0], self.bounds[1] + 1, self.step))

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        return trial.suggest_int(name, *self.bounds, step=self.step, log=self.log)


class FloatParam(_ParamBase):
    """A float range ``float: [low, high]``, continuous unless it has a step."""

    bounds: tuple[float, float] = Field(alias="float")
    step: PositiveFloat | None = None
    log: bool = False
    default: float | None = None

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(*self.bounds) if self.step is None else rng.choice(self.values())

    def values(self) -> list[float]:
        if self.step is None:
            raise UsageError("a float range without a step has infinitely many values; fix: give it a `step`")
        low, high = self.bounds
        count = math.floor((high - low) / self.step + 1e-9) + 1
        return [round(low + i * self.step, 10) for i in range(count)]

    def suggest(self, trial: optuna.Trial, name: str) -> float:
        return trial.suggest_float(name, *self.bounds, step=self.step, log=self.log)


class TiedParam(_ParamBase):
    """Knobs that only make sense together, picked as one: e.g. parallel layouts ``[{tp: 8}, {tp: 8, dp: 8, ...}]``."""

    tied: list[dict[str, Scalar]] = Field(min_length=1)
    default: dict[str, Scalar] | None = None

    def labels(self) -> list[str]:
        return [tied_label(option) for option in self.tied]

    def values(self) -> list[str]:
        return self.labels()

    def suggest(self, trial: optuna.Trial, name: str) -> str:
        return trial.suggest_categorical(name, self.labels())

    def default_value(self) -> str | None:
        return tied_label(self.default) if self.default is not None else None

    def knob_values(self, knob: str, value: Scalar) -> dict[str, Scalar]:
        return self.tied[self.labels().index(value)] if value is not None else {}


def tied_label(option: dict[str, Scalar]) -> str:
    """The categorical value Optuna stores for a tied option, readable in the dashboard: ``tp=8,dp=8``."""
    return ",".join(f"{k}={_scalar_text(v)}" for k, v in option.items())


def _is_load(name: str, param: _ParamBase) -> bool:
    knob = name.split(".", 1)[-1]
    if isinstance(param, TiedParam):
        return all(k in CLIENT_KNOBS for option in param.tied for k in option)
    return knob in CLIENT_KNOBS


def load_order(load: dict[str, Any]) -> tuple[float, float]:
    """Sort key of a load, lightest first: concurrency, then request rate (unset or ``inf``: unbounded)."""
    return (load.get("max_concurrency") or math.inf, load.get("request_rate") or math.inf)


def _scalar_text(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


PARAM_KINDS = ("choices", "int", "float", "tied")
# Up to this many points a space is walked point by point (static-rule checks); beyond, it is sampled or skipped.
ENUMERATION_LIMIT = 20_000


def _param_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return next((kind for kind in PARAM_KINDS if kind in value), None)
    if isinstance(value, BaseModel):
        return {ChoiceParam: "choices", IntParam: "int", FloatParam: "float", TiedParam: "tied"}[type(value)]
    return None


Param = Annotated[
    Annotated[ChoiceParam, Tag("choices")]
    | Annotated[IntParam, Tag("int")]
    | Annotated[FloatParam, Tag("float")]
    | Annotated[TiedParam, Tag("tied")],
    Discriminator(
        _param_kind,
        custom_error_type="param_kind",
        custom_error_message="a parameter is a mapping with one of the keys choices, int, float, tied",
    ),
]


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

    @field_validator("headers")
    @classmethod
    def _no_key_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        from autotune.space.redact import is_secret_name  # sqlalchemy's import stays out of the simulator's server

        if any(name.lower() == "authorization" or is_secret_name(name) for name in headers):
            raise ValueError("holds a credential; fix: launch the engine with its API key (vLLM: VLLM_API_KEY in "
                             "the environment, or --api-key in extra_args): autotune sends that key itself")  # fmt: skip
        return headers


class ObjectiveMetric(_Strict):
    name: ThroughputMetric | LatencyMetric
    direction: Literal["maximize", "minimize"] = "maximize"


class Objective(_Strict):
    """What a study optimises (one metric or several) and the latency SLOs a trial must meet (upper bounds, ms)."""

    metrics: list[ObjectiveMetric] = Field(
        default_factory=lambda: [ObjectiveMetric(name="total_token_throughput")], min_length=1
    )
    slo: dict[LatencyMetric, PositiveFloat] = Field(default_factory=dict)


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
    startup_timeout_s: PositiveFloat = 900.0
    # a request that receives nothing for this long fails as a timeout; a launch whose requests all do is a hang
    stall_timeout_s: PositiveFloat = 60.0
    trials: PositiveInt | None = None  # the default of `autotune study run --n-trials` for this space
    simulate: Simulation | None = None
    search: Search = Field(default_factory=Search)

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
