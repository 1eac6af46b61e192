"""``autotune init``: a search space for a user's model and machine, each choice commented with why.

What applies is decided from the model's facts (``autotune.engines.models``: its local config.json, else a built-in profile)
and the machine (GPU count and memory). Every candidate parallel layout is checked against the engine's static rules
before it is offered, so nothing written here is refused at launch by a rule autotune knows.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from autotune.config import Hardware, ServerConfig
from autotune.engines import ENGINES, Engine, InitDefaults, get_engine
from autotune.engines.models import ModelInfo, known_models, resolve_model
from autotune.errors import UnsupportedConfig, UsageError
from autotune.space.schema import SHAREGPT_LIKE, Objective

# Weights may take at most this share of a GPU in a layout offered as a default: the rest is KV cache and
# activations, without which a server starts but serves a handful of requests at a time.
_WEIGHTS_SHARE = 0.75
_CONTEXTS = (8192, 16384, 32768, 65536, 131072)
_LOADS = (16, 32, 64, 128, 256, 512)
_SHAREGPT = "ShareGPT_V3_unfiltered_cleaned_split.json"


@dataclass(frozen=True)
class Request:
    """What the user asked for (the command line of ``autotune init``)."""

    model: str
    gpus: int
    gpu_memory_gb: float
    engines: tuple[str, ...]
    workload: str = "random:1024:256"
    slo: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()  # several (``--workload`` repeated): a `workloads:` list, each launch measures all
    seed_suite: bool = False  # the seed study's six workloads, scaled to the model's context
    gpu: str | None = None
    simulate: bool = False
    name: str | None = None  # --name: the study's name, as given
    output_stem: str | None = None  # the stem of the file written (-o): the study's name where no --name is given


def study_name(request: Request, info: ModelInfo) -> str:
    """The space's ``name`` (its study's): ``--name`` as given; else the output file's stem (``-o my.yaml``: ``my``),
    else the model and GPU count. A simulated space's name not given by ``--name`` ends in ``-simulated``: two files
    written from the same model and the same file name, one simulated, name different studies, so that
    ``study best --study NAME`` of the real study never shows simulated numbers."""
    if request.name is not None:
        return request.name
    name = request.output_stem or f"{info.name.lower()}-{request.gpus}gpu"
    return f"{name}-simulated" if request.simulate and not name.endswith("-simulated") else name


def model_facts(model: str) -> ModelInfo:
    """The facts about ``model``, or a UsageError naming the fix."""
    info = resolve_model(model)
    if info is None:
        known = ", ".join(known_models())
        raise UsageError(f"--model {model}: no config.json there and no built-in profile of that name; fix: give a "
                         f"local model directory (with config.json) or one of: {known}")  # fmt: skip
    return info


def write_space(request: Request) -> str:
    """The space's YAML text for ``request``.

    Raises:
        UsageError: bad input (unknown engine or model, a workload or SLO that does not parse), or a model whose
            weights do not fit the machine in any layout.
    """
    for engine in request.engines:
        _init_defaults(engine)
    if request.gpus < 1 or request.gpu_memory_gb <= 0:
        raise UsageError("--gpus and --gpu-memory-gb must be positive; fix: e.g. --gpus 8 --gpu-memory-gb 141")
    info = model_facts(request.model)
    hardware = Hardware(gpus=request.gpus, gpu_memory_gb=request.gpu_memory_gb, gpu=request.gpu)
    named = _named_workloads(request, info)
    workload, need = named[0][1], max(need for _, _, need in named)
    slo = _slo(request.slo)
    out = _Writer()
    weights = f"{info.parameter_bytes / 1e9:.0f} GB of weights" if info.parameter_bytes else "weights of unknown size"
    kind = "mixture-of-experts" if info.moe else "dense"
    out.comment(f"Written by `autotune init` for {info.name} on {request.gpus} × {request.gpu_memory_gb:g} GB GPUs.")
    out.comment(f"Model facts from {_source(info, request.model)}: {info.architecture}, {kind}, {weights}, "
                f"{info.max_positions or 'unknown'} positions" + (", MLA" if info.latent_attention else "")
                + (", sparse attention" if info.sparse_attention else "") + (", MTP head" if info.mtp else "") + ".")  # fmt: skip
    out.comment("Check it: autotune space show THIS_FILE; run it: autotune study run THIS_FILE")
    out.line(f"name: {_flow(study_name(request, info))}")
    traffic = "the seed's six workloads" if request.seed_suite else ", ".join(request.workloads or [request.workload])
    out.line(f"description: {info.name} on {request.gpus} GPUs, {', '.join(request.engines)}, {traffic}")
    out.line(f"hardware: {_flow(hardware.model_dump(exclude_none=True))}")
    if request.simulate:
        out.blank()
        out.comment("SIMULATED: autotune's analytic model serves the trials instead of the engines (no GPU needed);")
        out.comment("delete this section to launch the real engines.")
        out.line("simulate: {performance_model: analytic, mode: direct}")
    out.blank()
    out.line("engines:")
    for engine in request.engines:
        _engine_section(out, engine, request.model, info, hardware)
    out.blank()
    _shared_params(out, info, need)
    out.blank()
    if len(named) > 1:
        _workloads_section(out, named, request.simulate)
    else:
        _workload_section(out, workload, request.workloads[0] if request.workloads else request.workload,
                          request.simulate)  # fmt: skip
    out.blank()
    out.line("objective:")
    out.line("  metrics: [{name: total_token_throughput, direction: maximize}]")
    if slo:
        out.line(f"  slo: {_flow(slo)}", "a load meets these or is infeasible; each launch finds its heaviest")
    timeout = max(600, round((info.parameter_bytes or 0) / 1e9 * 2.5 / 60) * 60)
    out.blank()
    out.line(f"startup_timeout_s: {timeout}", "loading, compiling and capturing graphs; bigger weights take longer")
    return out.text()


def _init_defaults(engine: str) -> InitDefaults:
    """The engine's `autotune init` defaults, or a UsageError naming the engines that have them."""
    cls = ENGINES.get(engine)
    if cls is not None and cls.init_defaults is not None:
        return cls.init_defaults
    able = [name for name, adapter in ENGINES.items() if adapter.init_defaults is not None]
    why = f" ({cls.init_refusal})" if cls is not None and cls.init_refusal else ""
    others = f" (or {', '.join(able[1:])})" if len(able) > 1 else ""
    raise UsageError(
        f"--engine {engine}: init writes spaces for {', '.join(able)}{why}; fix: --engine {able[0]}{others}"
    )


def _source(info: ModelInfo, model: str) -> str:
    return f"{model}/config.json" if info.source == "config.json" else "autotune's built-in profile"


def _workload(spec: str, simulate: bool) -> tuple[dict, int]:
    if spec == "sharegpt" and simulate:  # the simulator needs its lengths, not its file (which a user must fetch)
        like = SHAREGPT_LIKE.model_dump(include={"dataset", "input_len", "output_len", "range_ratio", "num_prompts"})
        return like, 4096
    if spec == "sharegpt":
        return {"dataset": "sharegpt", "path": _SHAREGPT, "num_prompts": 1000, "ignore_eos": False}, 4096
    parts = spec.split(":")
    if len(parts) == 3 and parts[0] == "random" and all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        input_len, output_len = int(parts[1]), int(parts[2])
        return {"dataset": "random", "input_len": input_len, "output_len": output_len, "num_prompts": 1000,
                "ignore_eos": True}, input_len + output_len  # fmt: skip
    raise UsageError(f"--workload {spec}: expected sharegpt or random:IN:OUT; fix: e.g. --workload random:1024:256")


# The seed study's six workloads (the hand-tuning study autotune automates): name, input and output tokens, prompts
SEED_WORKLOADS = (("very-long", 32000, 100, 100), ("long", 4000, 200, 500), ("medium", 2000, 100, 500),
                  ("short", 128, 4, 1000), ("generation-heavy", 1000, 2000, 100))  # fmt: skip


def _named_workloads(request: Request, info: ModelInfo) -> list[tuple[str, dict, int]]:
    """(name, workload fields, context it needs) of each workload asked for: ``--seed-suite``'s six (ShareGPT, then
    the seed's random ones, lengths shrunk to fit the model's positions), the ``--workload``s, or the default one."""
    if request.seed_suite and request.workloads:
        raise UsageError("--seed-suite and --workload both given; fix: --seed-suite for the seed's six workloads, "
                         "or --workload (repeatable) for your own")  # fmt: skip
    if not request.seed_suite:
        specs = request.workloads or (request.workload,)
        named = [(_workload_name(spec), *_workload(spec, request.simulate)) for spec in specs]
        if len({name for name, _, _ in named}) < len(named):
            raise UsageError(f"--workload given twice the same ({', '.join(specs)}); fix: give each once")
        return named
    scale = min(1.0, info.max_positions / (32000 + 100)) if info.max_positions else 1.0
    suite = [("sharegpt", *_workload("sharegpt", request.simulate))]
    for name, input_len, output_len, count in SEED_WORKLOADS:
        fields = {"dataset": "random", "input_len": max(1, round(input_len * scale)),
                  "output_len": max(2, round(output_len * scale)), "num_prompts": count, "ignore_eos": True}  # fmt: skip
        suite.append((name, fields, fields["input_len"] + fields["output_len"]))
    return suite


def _workload_name(spec: str) -> str:
    return spec.replace(":", "-")


def _workloads_section(out: _Writer, named: list[tuple[str, dict, int]], simulate: bool) -> None:
    out.comment("Each launch is measured on every workload (each with its own load sweep); the trial's value is their")
    out.comment("mix: the weighted geometric mean of each one's throughput relative to the baseline's (objective.mix).")
    if "sharegpt" in [name for name, _, _ in named]:
        _sharegpt_comment(out, simulate)
    out.line("workloads:")
    for name, workload, _ in named:
        fields = {"name": name, "weight": 1} | workload | {"seed": 42}
        out.line(f"  - {_flow(fields)}")


def _slo(items: tuple[str, ...]) -> dict[str, float]:
    slo = {}
    for item in items:
        metric, _, value = item.partition("=")
        try:
            slo |= Objective(slo={metric: value}).slo
        except ValidationError:
            raise UsageError(f"--slo {item}: expected METRIC=MS with a latency metric such as p99_tpot_ms or "
                             "p99_ttft_ms; fix: e.g. --slo p99_tpot_ms=50") from None  # fmt: skip
    return slo


def _engine_section(out: _Writer, engine: str, model: str, info: ModelInfo, hardware: Hardware) -> None:
    adapter = get_engine(engine)
    out.line(f"  {engine}:")
    out.line(f"    version: {adapter.default_version}", "the version whose flags are rendered; set yours")
    out.line(f"    executable: {_flow(list(adapter.default_executable))}", "how the engine is started on your machine")
    out.line("    fixed:")
    out.line(f"      model: {_flow(model)}")
    out.line("    params:")
    layouts = _layouts(adapter, model, info, hardware)
    if not layouts:
        raise UsageError(f"{info.name} does not fit on {hardware.gpus} × {hardware.gpu_memory_gb:g} GB in any "
                         f"{engine} layout; fix: more GPUs (--gpus) or a quantised checkpoint")  # fmt: skip
    out.line("      layout:", _layout_why(info))
    out.line("        tied:")
    for layout, why in layouts:
        out.line(f"          - {_flow(layout)}", why)
    out.line(f"        default: {_flow(layouts[0][0])}", "the baseline: the plainest layout that fits")
    for knob, choices, why in _engine_knobs(_init_defaults(engine), info):
        out.line(f"      {knob}: {_flow({'choices': choices})}", why)


def _layout_why(info: ModelInfo) -> str:
    if info.moe:
        return "MoE: tensor parallel, expert parallel and DP attention (attention replicated, experts spread)"
    return "dense: tensor parallel inside a copy of the model, data-parallel copies to fill the node"


def _layouts(adapter: Engine, model: str, info: ModelInfo, hardware: Hardware) -> list[tuple[dict, str]]:
    """Candidate layouts for the engine that fit the weights and pass the engine's static rules, plainest first."""
    defaults = _init_defaults(adapter.name)
    gpus = hardware.gpus
    sizes = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= gpus and gpus % t == 0]
    sizes = [t for t in sizes if not info.attention_heads or info.attention_heads % t == 0]
    weights = (info.parameter_bytes or 0) / 1e9
    fits = [t for t in sizes if weights / t <= _WEIGHTS_SHARE * (hardware.gpu_memory_gb or 0)]
    candidates: list[tuple[dict, str]] = []
    for tp in fits:  # copies of the model, each on tp GPUs
        dp = gpus // tp
        layout = {"tp": tp} if dp == 1 or not defaults.data_parallel_copies else {"tp": tp, "dp": dp}
        why = f"{dp} copies of {tp} GPU{'s' * (tp > 1)}" if "dp" in layout else f"one copy on {tp} GPUs"
        candidates.append((layout, why))
    if info.moe and gpus > 1 and weights / gpus <= _WEIGHTS_SHARE * (hardware.gpu_memory_gb or 0):
        candidates += defaults.moe_layouts(gpus)
    offered, seen = [], []
    for layout, why in candidates:
        config = ServerConfig(engine=adapter.name, model=model, **layout)
        try:
            adapter.check(config, hardware)
        except UnsupportedConfig:
            continue
        if layout not in seen:
            seen.append(layout)
            offered.append((layout, why))
    return offered


def _engine_knobs(defaults: InitDefaults, info: ModelInfo) -> list[tuple[str, list, str]]:
    choices, why = defaults.attention(info)
    knobs = [("attention_backend", choices, why)]
    kv_why = "fp8 KV halves the cache: more concurrent requests, small accuracy cost"
    knobs.append(("kv_cache_dtype", [None, defaults.kv_cache_fp8], kv_why))
    if info.mtp:
        knobs.append(
            ("speculative", list(defaults.speculative), "the checkpoint has an MTP head: draft tokens for free")
        )
    return knobs


def _shared_params(out: _Writer, info: ModelInfo, need: int) -> None:
    out.comment("Shared by all engines (null: the engine's default).")
    out.line("params:")
    contexts = [c for c in _CONTEXTS if c >= need and (not info.max_positions or c < info.max_positions)][:3]
    if contexts:
        why = f"null = all {info.max_positions} positions; shorter leaves KV memory for more requests"
        out.line(f"  max_model_len: {_flow({'choices': [None, *contexts]})}", why)
    out.line("  max_num_seqs: {choices: [null, 128, 256, 512, 1024]}", "requests batched at once")
    out.line("  max_num_batched_tokens: {choices: [null, 4096, 8192, 16384]}", "prefill chunk: TTFT vs TPOT")
    out.line("  gpu_memory_utilization: {choices: [null, 0.85, 0.9, 0.95]}", "share of GPU memory the engine takes")
    out.line("  cuda_graph: {choices: [null, false]}", "graphs on (null) or off: off starts faster, decodes slower")
    out.line(f"  max_concurrency: {_flow({'choices': list(_LOADS), 'default': _LOADS[-1]})}",
             "the load: swept on each launched server, not a launch knob")  # fmt: skip


def _sharegpt_comment(out: _Writer, simulate: bool) -> None:
    if simulate:
        out.comment(f"SIMULATED: ShareGPT is random prompts of its mean lengths ({SHAREGPT_LIKE.input_len} in, "
                    f"{SHAREGPT_LIKE.output_len} out); for the engines, download")  # fmt: skip
        out.comment(f"{_SHAREGPT} and write dataset: sharegpt, path: {_SHAREGPT}.")
    else:
        out.comment(f"ShareGPT: download {_SHAREGPT} and give its path (relative to where you run autotune).")


def _workload_section(out: _Writer, workload: dict, spec: str, simulate: bool) -> None:
    if spec == "sharegpt":
        _sharegpt_comment(out, simulate)
    else:
        out.comment(f"Random prompts of {workload['input_len']} tokens in and {workload['output_len']} out ({spec}).")
    out.line("workload:")
    for key, value in workload.items():
        out.line(f"  {key}: {_flow(value)}")
    out.line("  seed: 42")


def _flow(value: object) -> str:
    return (
        yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip().removesuffix("...").strip()
    )


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str, why: str = "") -> None:
        self.lines.append(f"{text}  # {why}" if why else text)

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def blank(self) -> None:
        self.lines.append("")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
