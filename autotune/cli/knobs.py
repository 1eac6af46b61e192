"""``autotune knobs [--json|--markdown]``: every canonical knob, its type, default and meaning, and what each engine
adapter renders for it (or why it refuses it), generated from ``ServerConfig`` and the adapters themselves.

``docs/knobs.md`` is this command's ``--markdown`` output (a test checks it is current), so the page cannot drift
from the code: a new field of ServerConfig without a description here fails that test, and a new adapter gets a
column of its own.
"""

from __future__ import annotations

import difflib
import json
import math
import shutil
import textwrap
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

from autotune.cli.options import JsonOpt
from autotune.config import CLIENT_KNOBS, FILE_KNOBS, KNOBS, Hardware, ServerConfig, knob_adapter
from autotune.engines import ENGINES, Engine, get_engine
from autotune.errors import UnsupportedConfig
from autotune.space.schema import Workload
from autotune.yamlload import load_yaml

# What each knob means; a knob of ServerConfig or CLIENT_KNOBS missing here fails tests/test_knobs.py.
DESCRIPTIONS: dict[str, str] = {
    "engine": "the engine that serves the configuration (a space lists its engines under `engines:`)",
    "engine_version": "the engine version whose flags are rendered (`engines.NAME.version`; default: the adapter's)",
    "model": "the model: a Hugging Face id or a local directory (its config.json gives the static rules their facts)",
    "served_model_name": "the name clients send in a request's `model` field (default: the model)",
    "tp": "tensor-parallel size: the GPUs one copy of the model is split over",
    "pp": "pipeline-parallel size: the stages the layers are split into",
    "dp": "data-parallel size: copies of the model (with dp_attention: attention replicas)",
    "ep": "expert-parallel size (MoE models): the GPUs the experts are spread over",
    "dp_attention": "data-parallel attention (MoE models): attention replicated, experts spread",
    "dcp": "decode context-parallel size: the KV cache split over the tensor-parallel group",
    "attention_backend": "the attention kernels (the engine's own names)",
    "prefill_attention_backend": "the prefill attention kernels, where the engine has separate ones",
    "decode_attention_backend": "the decode attention kernels, where the engine has separate ones",
    "kv_cache_dtype": "the KV cache's data type (fp8 halves it: more requests at once, a small accuracy cost)",
    "max_model_len": "the context length the server accepts (shorter leaves memory for more requests)",
    "max_num_seqs": "the most requests batched at once",
    "max_num_batched_tokens": "tokens per scheduler step (the prefill chunk): time to first token against TPOT",
    "gpu_memory_utilization": "the share of GPU memory the engine takes (weights, KV cache, activations)",
    "speculative": "speculative decoding: none, mtp:N (the checkpoint's MTP head) or eagle:STEPS:TOPK:DRAFT_TOKENS",
    "cuda_graph": "CUDA graphs; false turns them off (starts faster, decodes slower)",
    "continuous_batching": "continuous batching over paged attention (only transformers serve can turn it off)",
    "torch_compile": "torch.compile the model",
    "kv_cache_blocks": "KV-cache blocks to allocate, instead of a share of GPU memory",
    "deep_gemm": "DeepGEMM kernels; false turns them off",
    "dtype": "the dtype of the weights and activations",
    "reasoning_parser": "the parser that splits the reasoning from the answer",
    "tool_call_parser": "the parser of tool calls",
    "chat_template": "the chat template: a file that must exist on the node (relative: to where the launch runs), "
    "or a built-in template's name where the engine has them",
    "tokenizer_mode": "the tokenizer mode (DeepSeek-V3.2's chat needs deepseek_v32 on vLLM)",
    "extra_args": "arguments appended verbatim to the launch (anything without a knob)",
    "env": "environment variables of the launch",
    "max_concurrency": "the load: the most requests in flight at once (each launch sweeps the space's loads)",
    "request_rate": "the load: requests sent per second (inf: all at once)",
    "burstiness": "how requests arrive at request_rate (1: a Poisson process; lower: burstier)",
}
# How the knobs that are not a launch flag reach the engine, for every engine alike.
_SAME_FOR_EVERY_ENGINE = {
    "engine": "picks the adapter",
    "engine_version": "picks the flags' spelling",
    "extra_args": "appended verbatim",
    "env": "the launch's environment",
    **{knob: "the benchmark's load, not a launch flag" for knob in CLIENT_KNOBS},
}
# Example values where the type alone does not give a meaningful one.
_EXAMPLES: dict[str, Any] = {"engine_version": "0.13.0", "speculative": "mtp:1", "chat_template": "./template.jinja", "model": "MODEL",
                             "kv_cache_dtype": "fp8", "max_model_len": 32768, "max_num_seqs": 256,
                             "max_num_batched_tokens": 8192, "kv_cache_blocks": 4096}  # fmt: skip


@dataclass(frozen=True)
class Rendering:
    """What one engine's adapter does with a knob: the words it renders for the example value, or why it refuses."""

    engine: str
    renders: str | None = None
    refused: str | None = None
    rule: str | None = None  # where nothing is rendered: the static rule that refuses the example, and why

    def text(self) -> str:
        if self.refused is not None:
            return f"refused: {self.refused}"
        return self.renders or ("nothing; " + self.rule if self.rule else "nothing on its own")


@dataclass(frozen=True)
class Knob:
    name: str
    side: str  # server (a launch knob) or client (the benchmark's load)
    type: str
    default: str
    description: str
    example: str
    names_a_file: bool
    engines: tuple[Rendering, ...]


def knobs() -> list[Knob]:
    """Every knob, in ServerConfig's order, then the client-side ones."""
    return [_knob(name) for name in (*KNOBS, *CLIENT_KNOBS)]


def _knob(name: str) -> Knob:
    schema = knob_adapter(name).json_schema()
    examples = _examples(name, schema)
    return Knob(name=name, side="client" if name in CLIENT_KNOBS else "server", type=_type_text(name, schema),
                default=_default_text(name), description=DESCRIPTIONS.get(name, ""),
                example=", ".join(_value_text(v) for v in examples), names_a_file=name in FILE_KNOBS,
                engines=tuple(_rendering(engine, name, examples) for engine in ENGINES))  # fmt: skip


def _type_text(name: str, schema: dict) -> str:
    if name == "speculative":
        return "none | mtp:N | eagle:STEPS:TOPK:DRAFT"
    if name == "engine_version":
        return "version"
    if name == "engine":  # a registered engine (built in, or a plug-in)
        return "one of " + ", ".join(ENGINES)
    kinds = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    part = kinds[0] if kinds else schema
    if "enum" in part:
        return "one of " + ", ".join(part["enum"])
    symbols = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<"}
    bounds = [f"{symbol} {_number(part[key])}" for key, symbol in symbols.items() if key in part]
    kind = {"integer": "integer", "number": "number", "boolean": "true/false", "string": "text",
            "array": "list of text", "object": "map NAME: text"}.get(part.get("type", ""), "text")  # fmt: skip
    return f"{kind} {', '.join(bounds)}".strip()


def _number(bound: Any) -> Any:
    """A bound as declared: pydantic before 2.11 writes a float field's ``gt=0`` into its schema as ``0.0``."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _default_text(name: str) -> str:
    if name in CLIENT_KNOBS:
        value = Workload.model_fields[name].default
        return "unbounded" if value is None else ("inf (all at once)" if value == math.inf else _value_text(value))
    field = ServerConfig.model_fields[name]
    if field.is_required():
        return "required"
    if field.default is None:
        return "the adapter's" if name == "engine_version" else "the engine's"
    return _value_text(field.get_default(call_default_factory=True)) or "none"


def _examples(name: str, schema: dict) -> list[Any]:
    if name in _EXAMPLES:
        return [_EXAMPLES[name]]
    if name == "engine":
        return [next(iter(ENGINES))]
    kinds = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    part = kinds[0] if kinds else schema
    if "enum" in part:
        return [next((v for v in part["enum"] if v != "auto"), part["enum"][0])]
    return {"boolean": [True, False], "integer": [2], "number": [0.9 if part.get("maximum") == 1 else 2.0],
            "string": ["NAME"], "array": [["--flag", "VALUE"]], "object": [{"NAME": "VALUE"}]}[part["type"]]  # fmt: skip


def _rendering(engine: str, name: str, examples: list[Any]) -> Rendering:
    if name in _SAME_FOR_EVERY_ENGINE:
        return Rendering(engine, renders=_SAME_FOR_EVERY_ENGINE[name])
    adapter = get_engine(engine)
    if name == "model":
        return Rendering(engine, renders=" ".join(adapter.launch_spec(ServerConfig(engine=engine, model="MODEL")).argv))
    base = adapter.launch_spec(ServerConfig(engine=engine, model="MODEL"))
    words = []
    for value in examples:
        try:
            spec = adapter.launch_spec(ServerConfig(engine=engine, model="MODEL", **{name: value}))
        except UnsupportedConfig as exc:
            return Rendering(engine, refused=exc.reason.split(": ", 1)[-1])
        added = _added(base.argv, spec.argv) + [f"{k}={v}" for k, v in spec.env.items() if base.env.get(k) != v]
        for file, text in spec.files.items():  # TRT-LLM's options file: its content, after its flag
            added += [*([] if file in added else [file]), "containing", json.dumps(load_yaml(text))]
        if added:
            words.append((f"{_value_text(value)} → " if len(examples) > 1 else "") + " ".join(added))
    if words:
        return Rendering(engine, renders="; ".join(words))
    return Rendering(
        engine, rule=_broken_rule(adapter, ServerConfig(engine=engine, model="MODEL", **{name: examples[0]}))
    )


def _broken_rule(adapter: Engine, config: ServerConfig) -> str | None:
    """The static rule ``config`` breaks, as "rule NAME: why", or None."""
    try:
        adapter.check(config, Hardware())
    except UnsupportedConfig as exc:
        return f"rule {exc.rule}: {exc.reason}"
    return None


def _added(before: tuple[str, ...], after: tuple[str, ...]) -> list[str]:
    """The words ``after`` has that ``before`` has not (the flag and value a knob added)."""
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return [
        word for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for word in after[j1:j2]
    ]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value) if value else ""
    return str(value)


def markdown(items: list[Knob]) -> str:
    """The knobs as docs/knobs.md."""
    versions = ", ".join(f"{name} {cls.default_version}" for name, cls in ENGINES.items())
    lines = ["# Knobs", "", "<!-- generated: autotune knobs --markdown > docs/knobs.md (tests/test_knobs.py checks it "
             "is current) -->", "",
             "A search space, `autotune command --set` and every stored configuration name these engine-neutral knobs; "
             "each engine adapter renders them for the engine version it is given. A knob left unset (`null`) is not "
             "rendered at all: the engine applies its own default. An engine's column shows what its adapter writes "
             f"for the example value (at the adapters' default versions: {versions}), or why it refuses the knob: "
             "a refused knob is rejected before launch, never silently dropped. The client-side knobs are the "
             "benchmark's load, swept on each launched server.", "",
             "| knob | type | default | what it is | example | " + " | ".join(ENGINES) + " |",
             "|" + " --- |" * (5 + len(ENGINES))]  # fmt: skip
    for knob in items:
        cells = [f"`{knob.name}`", knob.type, knob.default, knob.description, f"`{knob.example}`"]
        cells += [_code(r.text()) if r.refused is None and r.renders else r.text() for r in knob.engines]
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    return text if text in _SAME_FOR_EVERY_ENGINE.values() else f"`{text}`"


def _plain(items: list[Knob]) -> str:
    width = min(shutil.get_terminal_size().columns, 120)
    out = []
    for knob in items:
        out.append(textwrap.fill(f"{knob.name} ({knob.type}; default: {knob.default}): {knob.description}", width,
                                 subsequent_indent="    "))  # fmt: skip
        if len({r.text() for r in knob.engines}) == 1:
            out.append(f"  every engine: {knob.engines[0].text()}")
            continue
        out += [f"  {r.engine:<13} {r.text()}" for r in knob.engines]
    return "\n".join(out)


def knobs_command(
    as_json: JsonOpt = False,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="print docs/knobs.md (a Markdown table)")] = False,
) -> None:
    """Every knob a space, `autotune command --set` and a study's configurations use: its type, default, meaning,
    and what each engine renders for it (or why the engine refuses it)."""
    items = knobs()
    if as_json:
        print(json.dumps([asdict(knob) for knob in items], indent=1))
    elif as_markdown:
        print(markdown(items), end="")
    else:
        print(_plain(items))
