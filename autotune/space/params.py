"""A space's parameters: one value of a list, an integer or float range, or knobs tied together (``Param``)."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveFloat,
    PositiveInt,
    Tag,
    ValidationInfo,
    field_validator,
)

from autotune.config import CLIENT_KNOBS
from autotune.errors import UsageError
from autotune.text import VALUE_WIDTH, shorten

if TYPE_CHECKING:  # only in annotations: the simulator's server process starts without importing optuna
    import optuna

Scalar = str | int | float | bool | None


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

    @field_validator("default")
    @classmethod
    def _default_is_an_option(cls, default: dict[str, Scalar] | None, info: ValidationInfo) -> dict[str, Scalar] | None:
        """The default as the option it equals, that option's own mapping: an option's label (what Optuna stores and
        ``knob_values`` looks up) follows its key order, and a default written in another order is the same option."""
        options = info.data.get("tied")
        if default is None or options is None:  # no default (the space check asks for one) or no valid options
            return default
        for option in options:
            if option == default:  # a mapping's equality: the keys and values, whatever their order
                return option
        written = [_flow_mapping(option) for option in options]
        listed = shorten(" | ".join(written), 4 * VALUE_WIDTH)  # a long list of options stays one readable line
        raise ValueError(f"the default {shorten(_flow_mapping(default), VALUE_WIDTH)} is not one of the tied options: "
                         f"{listed}; fix: copy one of them as the default, e.g. default: {written[0]}")  # fmt: skip

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


def _flow_mapping(option: dict[str, Scalar]) -> str:
    """An option as a space writes it, ``{tp: 8, dp: 1}`` (an error message's, to copy into the file)."""
    return "{" + ", ".join(f"{k}: {_scalar_text(v)}" for k, v in option.items()) + "}"


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
