"""The engine-neutral server configuration: one field per canonical knob (`autotune knobs`, docs/knobs.md).

A knob left at ``None`` is not rendered at all, so the engine applies its own default; that is how a configuration
reproduces a hand-written command exactly (``-tp 1`` and no ``-tp`` are different commands).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from autotune.engine_registry import registered_engine

KvCacheDtype = Literal["auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"]
ModelDtype = Literal["auto", "bfloat16", "float16", "float32"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECULATIVE = re.compile(r"none|mtp:(?P<n>[1-9]\d*)|eagle:(?P<steps>[1-9]\d*):(?P<topk>[1-9]\d*):(?P<draft>[1-9]\d*)")


def _argument_value(value: str) -> str:
    # A value is passed to the engine as one argv element, verbatim (spaces, quotes and ';' included), but one that
    # starts with '-' would be read by the engine's parser as a flag, and a newline or NUL cannot be an argument.
    if not value:
        raise ValueError("must not be empty")
    if value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-', which the engine would read as a flag")
    if "\n" in value or "\x00" in value:
        raise ValueError(f"{value!r} contains a newline or NUL byte")
    return value


def _version_number(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a version number such as 0.13.0 or 0.5.6.post2") from None
    return value


def _speculative_grammar(value: str) -> str:
    if not _SPECULATIVE.fullmatch(value):
        raise ValueError(f"{value!r} is not one of: none, mtp:N, eagle:STEPS:TOPK:DRAFT_TOKENS")
    return value


def _environment(value: dict[str, str]) -> dict[str, str]:
    for name, setting in value.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if "\x00" in setting:
            raise ValueError(f"the value of {name} contains a NUL byte")
    return value


# Validators live in the types (not in field validators) so that a single knob can be checked on its own, as a
# search-space file or `--set` gives it, with exactly the rules ServerConfig applies.
ArgValue = Annotated[str, AfterValidator(_argument_value)]
EngineVersion = Annotated[str, AfterValidator(_version_number)]
SpeculativeSpec = Annotated[str, AfterValidator(_speculative_grammar)]
# validated against the engine registry (built-in adapters and plug-ins): an unknown name lists the valid ones
EngineName = Annotated[str, AfterValidator(registered_engine)]
Environment = Annotated[dict[str, str], AfterValidator(_environment)]
PositiveInt = Annotated[int, Field(ge=1)]


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding, parsed from the ``speculative`` knob (``mtp:N`` or ``eagle:STEPS:TOPK:DRAFT``)."""

    method: Literal["mtp", "eagle"]
    num_steps: int
    topk: int = 1
    num_draft_tokens: int | None = None


def split_revision(model: str) -> tuple[str, str | None]:
    """``ORG/NAME@REV`` as (``ORG/NAME``, ``REV``); a model without ``@``, or an existing local path, as it is."""
    name, at, revision = model.partition("@")
    if not at or not revision or Path(model).expanduser().exists():
        return model, None
    return name, revision


class ServerConfig(BaseModel):
    """One point of the search space, in canonical knobs; frozen and validated.

    Engine adapters (``autotune.engines``) turn it into a command line; ``None`` means "engine default".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: EngineName
    engine_version: EngineVersion | None = None
    model: ArgValue
    served_model_name: ArgValue | None = None
    tp: PositiveInt | None = None
    pp: PositiveInt | None = None
    dp: PositiveInt | None = None
    ep: PositiveInt | None = None
    dp_attention: bool | None = None
    dcp: PositiveInt | None = None
    attention_backend: ArgValue | None = None
    prefill_attention_backend: ArgValue | None = None
    decode_attention_backend: ArgValue | None = None
    kv_cache_dtype: KvCacheDtype | None = None
    max_model_len: PositiveInt | None = None
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    speculative: SpeculativeSpec | None = None
    cuda_graph: bool | None = None
    # continuous batching (with paged attention) as a switch: only `transformers serve` can turn it off
    continuous_batching: bool | None = None
    torch_compile: bool | None = None  # torch.compile the model (transformers serve --compile)
    kv_cache_blocks: PositiveInt | None = None  # KV-cache blocks to allocate, instead of a memory fraction
    deep_gemm: bool | None = None
    dtype: ModelDtype | None = None
    reasoning_parser: ArgValue | None = None
    tool_call_parser: ArgValue | None = None
    chat_template: ArgValue | None = None
    tokenizer_mode: ArgValue | None = None
    extra_args: tuple[str, ...] = ()
    env: Environment = Field(default_factory=dict)

    @property
    def speculation(self) -> Speculation | None:
        """The ``speculative`` knob parsed, or None when speculative decoding is off."""
        match = _SPECULATIVE.fullmatch(self.speculative or "none")
        if match is None or self.speculative in (None, "none"):
            return None
        if match["n"]:
            return Speculation("mtp", num_steps=int(match["n"]))
        steps, topk, draft = int(match["steps"]), int(match["topk"]), int(match["draft"])
        return Speculation("eagle", num_steps=steps, topk=topk, num_draft_tokens=draft)

    @property
    def model_id(self) -> str:
        """The model without a pinned revision: ``ORG/NAME`` of ``ORG/NAME@REV`` (a local path as it is)."""
        return split_revision(self.model)[0]

    @property
    def model_revision(self) -> str | None:
        """The hub revision pinned with ``@`` (a branch, tag or commit), or None."""
        return split_revision(self.model)[1]

    @property
    def api_model_name(self) -> str:
        """The name clients put in the ``model`` field of a request (an engine serves a model under its id)."""
        return self.served_model_name or self.model_id

    def knobs(self) -> dict[str, Any]:
        """The knobs that are set (not None, not empty), in field order."""
        return {k: v for k, v in self.model_dump().items() if v not in (None, (), {})}

    def files_needed(self) -> dict[str, str]:
        """The files the launch reads from the node, by knob: ``{"chat_template": "./t.jinja"}`` (see FILE_KNOBS)."""
        return {knob: value for knob in FILE_KNOBS if (value := names_a_file(knob, getattr(self, knob)))}


KNOBS: tuple[str, ...] = tuple(ServerConfig.model_fields)
# Knobs whose value may be the path of a file the engine reads at start-up (relative paths: from the directory the
# launch runs in). `autotune doctor` checks that those files exist; `study best` says they must exist on the node.
FILE_KNOBS: tuple[str, ...] = ("chat_template",)
# A value names a file when it looks like a path: a directory separator, or a file suffix. Anything else is a built-in
# template's name (SGLang's `chatml`) or an inline Jinja template (`{{ ... }}`; vLLM takes both).
_FILE_SUFFIX = re.compile(r"\.(jinja2?|j2|json|ya?ml|txt|tmpl)$", re.IGNORECASE)


def names_a_file(knob: str, value: object) -> str | None:
    """``value`` when ``knob`` set to it names a file the engine must find at start-up, else None."""
    if knob not in FILE_KNOBS or not isinstance(value, str) or "{" in value:
        return None
    return value if "/" in value or "\\" in value or _FILE_SUFFIX.search(value) else None


# Client-side knobs change the benchmark's load, not the launch: a warm server can be reused across them.
CLIENT_KNOBS: dict[str, Any] = {
    "max_concurrency": Annotated[int, Field(ge=1)] | None,
    "request_rate": Annotated[float, Field(gt=0)],
    "burstiness": Annotated[float, Field(gt=0)],
}


def knob_adapter(name: str) -> TypeAdapter:
    """A validator for one knob's values (server or client side), with the knob's own constraints."""
    if name in CLIENT_KNOBS:
        return TypeAdapter(CLIENT_KNOBS[name])
    field = ServerConfig.model_fields[name]
    if field.metadata:
        return TypeAdapter(Annotated[(field.annotation, *field.metadata)])
    return TypeAdapter(field.annotation)


class Hardware(BaseModel):
    """The machine a study runs on; ``gpus: 0`` means a CPU host (no GPU-count or GPU-memory rules)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: Annotated[int, Field(ge=0)] = 0
    gpu_memory_gb: Annotated[float, Field(gt=0)] | None = None
    gpu: str | None = None
