"""The engine contract: every registered adapter (the registry is iterated: a new one is covered as soon as it is
registered) renders purely, refuses what it does not accept, has named rules, classifies failures, probes readiness,
counts its GPUs as the simulator lays it out, exports (its image or none), gets `autotune init` defaults or a clear
refusal, and can be modelled by the simulator. No engine is special-cased here: what differs is read from the
adapter's own declarations."""

from __future__ import annotations

import itertools
import re

import httpx
import pytest
import yaml

from autotune.bench.client import REQUEST_EXTENSIONS
from autotune.config import KNOBS, Hardware, ServerConfig
from autotune.engines import ENGINES, Engine, get_engine
from autotune.engines.base import COMMON_KNOBS
from autotune.errors import FailureKind, UnsupportedConfig, UsageError
from autotune.evidence.export import container_text
from autotune.sim.analytic import RankLoad, analytic_profile, engine_layout
from autotune.space.files import load_space
from autotune.space.init import Request, write_space

MODEL = "Llama-3.1-8B-Instruct"  # a model both the rules and the simulator know
# one valid value per canonical knob (ServerConfig's types), to set whatever an adapter accepts
EXAMPLES = {"served_model_name": "served", "tp": 2, "pp": 2, "dp": 2, "ep": 2, "dp_attention": True, "dcp": 2,
            "attention_backend": "NAME", "prefill_attention_backend": "NAME", "decode_attention_backend": "NAME",
            "kv_cache_dtype": "fp8", "max_model_len": 4096, "max_num_seqs": 64, "max_num_batched_tokens": 2048,
            "gpu_memory_utilization": 0.8, "speculative": "mtp:1", "cuda_graph": True, "continuous_batching": True,
            "torch_compile": True, "kv_cache_blocks": 512, "deep_gemm": True, "dtype": "bfloat16",
            "reasoning_parser": "NAME", "tool_call_parser": "NAME", "chat_template": "./t.jinja",
            "tokenizer_mode": "NAME"}  # fmt: skip
LAYOUT_KNOBS = {"tp": (1, 2, 8), "dp": (None, 2), "dp_attention": (None, True), "ep": (None, 2)}
ENGINE_NAMES = list(ENGINES)


def test_examples_cover_every_canonical_knob() -> None:
    assert set(EXAMPLES) == set(KNOBS) - COMMON_KNOBS


def adapter(name: str) -> Engine:
    return get_engine(name)


def layouts(engine: Engine) -> list[ServerConfig]:
    """Every combination of the layout knobs the engine accepts."""
    knobs = {k: v for k, v in LAYOUT_KNOBS.items() if k in engine.accepts}
    return [ServerConfig(engine=engine.name, model=MODEL, **{k: v for k, v in zip(knobs, values, strict=True)})
            for values in itertools.product(*knobs.values())]  # fmt: skip


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_render_is_pure_and_argv_only(name: str) -> None:
    engine = adapter(name)
    config = ServerConfig(engine=name, model=MODEL, **{k: EXAMPLES[k] for k in engine.accepts})
    first, second = engine.launch_spec(config, port=9000), engine.launch_spec(config, port=9000)
    assert first == second and first.argv[: len(engine.executable)] == engine.executable
    assert all(isinstance(word, str) for word in first.argv) and "9000" in first.argv
    extra = config.model_copy(update={"extra_args": ("--x", "1")})
    assert engine.launch_spec(extra, port=9000).argv[-2:] == ("--x", "1")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_refuses_every_knob_it_does_not_accept(name: str) -> None:
    engine = adapter(name)
    assert engine.accepts <= set(KNOBS) - COMMON_KNOBS
    for knob in set(KNOBS) - COMMON_KNOBS - engine.accepts:
        config = ServerConfig(engine=name, model=MODEL, **{knob: EXAMPLES[knob]})
        with pytest.raises(UnsupportedConfig, match=re.escape(knob)) as refused:
            engine.launch_spec(config)
        assert refused.value.rule == "knob-not-supported"


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_rules_are_named_and_the_gpu_count_is_the_simulators(name: str) -> None:
    engine = adapter(name)
    names = [rule.name for rule in engine.rules]
    assert len(names) == len(set(names)) and all(rule.description for rule in engine.rules)
    for config in layouts(engine):
        layout = engine.layout(config)
        assert engine.gpus_used(config) == layout.gpus == engine_layout(config).gpus >= 1
        try:
            engine.check(config, Hardware(gpus=layout.gpus, gpu_memory_gb=141, gpu="H200"))
        except UnsupportedConfig:
            continue  # a combination the engine cannot run whatever the machine
        if layout.gpus > 1:
            with pytest.raises(UnsupportedConfig):  # one GPU fewer than it counts: refused before launch
                engine.check(config, Hardware(gpus=layout.gpus - 1, gpu_memory_gb=141, gpu="H200"))
        profile = analytic_profile(config, Hardware(gpus=layout.gpus, gpu_memory_gb=141, gpu="H200"))
        assert profile.layout.gpus == layout.gpus


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_classifies_failures(name: str) -> None:
    engine = adapter(name)
    assert all(isinstance(kind, FailureKind) and isinstance(p, re.Pattern) for kind, p in engine.failure_patterns)
    assert engine.classify_failure(127, "") is FailureKind.NOT_INSTALLED
    assert engine.classify_failure(1, "torch.OutOfMemoryError: CUDA out of memory") is FailureKind.OOM
    assert engine.classify_failure(1, "OSError: [Errno 98] Address already in use") is FailureKind.PORT_IN_USE
    assert isinstance(engine.classify_failure(1, "INFO something went wrong"), FailureKind)


def serving(healthy: bool, served: str) -> httpx.Client:
    """A client on a fake OpenAI-compatible server: healthy (it lists ``served`` and answers), or starting (503)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if not healthy:
            return httpx.Response(503)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": served}]})
        return httpx.Response(200, json={"choices": [{"message": {"content": "yes"}}]})

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://engine")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_readiness_and_request_fields(name: str) -> None:
    engine = adapter(name)
    config = ServerConfig(engine=name, model=MODEL)
    ready = engine.readiness(config)
    assert ready(serving(True, config.api_model_name)) and not ready(serving(False, config.api_model_name))
    assert engine.request_extensions <= REQUEST_EXTENSIONS  # the client can send what it declares
    assert engine.chat_length_field in ("max_tokens", "max_completion_tokens")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_exports_its_image_or_says_it_has_none(name: str) -> None:
    engine = adapter(name)
    text = container_text(ServerConfig(engine=name, model=MODEL), ["HF_TOKEN"], 8000)
    if engine.image is None:
        assert text == f"# {name} has no official container image: run the launch command above on the node"
    else:
        assert text.startswith("docker run ") and engine.image.reference(engine.default_version) in text
        assert "-e HF_TOKEN" in text and "8000:8000" in text


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_init_writes_a_valid_space_or_refuses_clearly(name: str, tmp_path) -> None:
    engine = adapter(name)
    request = Request(model=MODEL, gpus=8, gpu_memory_gb=141, engines=(name,))
    if engine.init_defaults is None:
        with pytest.raises(UsageError, match=f"--engine {name}.*fix:"):
            write_space(request)
        return
    path = tmp_path / "space.yaml"
    path.write_text(write_space(request))
    space = load_space(path)
    assert list(space.engines) == [name] and yaml.safe_load(path.read_text())["engines"][name]["params"]["layout"]


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_the_simulator_models_it(name: str) -> None:
    profile = analytic_profile(ServerConfig(engine=name, model=MODEL), Hardware(gpus=1, gpu_memory_gb=141, gpu="H200"))
    assert profile.max_running >= 1 and profile.kv_tokens_per_rank > 0
    assert profile.step_time([RankLoad(decode_seqs=8, decode_context=8 * 1000)] * profile.ranks) > 0


def test_the_engines_import_no_benchmark_module() -> None:
    """The import circle bench/client → bench/datasets → space → redact → engines/base → bench/client is broken at
    its engine end: no module of the engines (nor the registry) imports autotune.bench, at any depth of the file."""
    import ast
    from pathlib import Path

    import autotune

    package = Path(autotune.__file__).parent
    files = [*(package / "engines").glob("*.py"), package / "engine_registry.py"]  # engines/ holds models.py
    imported = {
        (path.name, node.module if isinstance(node, ast.ImportFrom) else alias.name)
        for path in files
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert [(file, module) for file, module in imported if (module or "").startswith("autotune.bench")] == []
