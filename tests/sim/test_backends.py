"""The serving seam: the engine as a process, the simulator's server and the simulator in process serve one
configuration through one interface (``autotune.serving.seam.Backend``) and return one type, ``BenchmarkResult``; the
trial's modules never import the simulator (the simulator's backends are handed out by ``autotune.search.backends``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from autotune.bench.results import BenchmarkResult
from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, LaunchFailed
from autotune.serving.seam import ProcessBackend
from autotune.sim.backends import simulated_backend
from autotune.space.schema import Simulation, Workload
from autotune.testing.sim import V32
from tests.conftest import H200X8, REPO

CONFIG = ServerConfig(engine="vllm", model=V32, tp=8, served_model_name="sim")
# prompts from a file: the engine process has no tokenizer of the model to draw random prompts with
WORKLOAD = Workload(dataset="jsonl", path=str(REPO / "tests" / "study" / "prompts.jsonl"), output_len=16, num_prompts=8,
                    max_concurrency=4)  # fmt: skip
# the modules on the trial's path, which ask for a backend and never see which one serves
TRIAL_MODULES = ("search/objective.py", "evidence/validate.py", "search/prior.py", "serving/seam.py")


def _backends():
    vllm = get_engine("vllm")
    return {
        # a stand-in engine process that speaks vLLM's command line (no GPU): the process backend, as for any engine
        "process": ProcessBackend(get_engine("vllm", [sys.executable, "-m", "autotune.testing.scripted"])),
        "simulator server": simulated_backend(vllm, Simulation(time_scale=0.1, mode="server"), H200X8),
        "simulator in process": simulated_backend(vllm, Simulation(mode="direct"), H200X8),
    }


def test_three_backends_serve_one_config_and_return_one_result_type(tmp_path) -> None:
    results, commands = {}, {}
    for name, backend in _backends().items():
        assert backend.engine.name == "vllm"  # the configuration's engine: its rules, its command
        with backend.serve(CONFIG, tmp_path / name.replace(" ", "-")) as serving:
            serving.wait_ready(60)
            results[name] = serving.measure(WORKLOAD)
            commands[name] = serving.command
            assert serving.alive()
    for name, result in results.items():
        assert type(result) is BenchmarkResult, name
        assert result.completed == WORKLOAD.num_prompts and result.failed == 0, name
        assert result.output_throughput > 0 and result.mean_ttft_ms > 0, name
    # the measured fields are the same whoever served; the simulator labels its results
    assert set(results["simulator server"].to_vllm_json()) == set(results["process"].to_vllm_json())
    assert results["simulator server"].client["simulated"] and results["simulator in process"].client["simulated"]
    assert "simulated" not in results["process"].client
    # the command recorded is the engine's own (what a user runs), never the simulator's
    for name in ("simulator server", "simulator in process"):
        assert commands[name].argv[:2] == ("vllm", "serve") and "autotune.sim" not in commands[name].argv, name


def test_a_configuration_that_does_not_start_in_the_simulator_fails_as_a_launch(tmp_path) -> None:
    too_big = CONFIG.model_copy(update={"tp": 1})  # DeepSeek-V3.2's weights do not fit one H200
    backend = _backends()["simulator in process"]
    with backend.serve(too_big, tmp_path) as serving, pytest.raises(LaunchFailed) as failed:
        serving.wait_ready(1)
    assert failed.value.kind is FailureKind.OOM


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("module", TRIAL_MODULES)
def test_the_trials_modules_import_nothing_of_the_simulator(module) -> None:
    imported = _imported_modules(REPO / "autotune" / module)
    assert not {name for name in imported if name == "autotune.sim" or name.startswith("autotune.sim.")}, module


def test_no_simulator_special_case_in_the_package() -> None:
    """No type check of the simulated engine, no stub that raises NotImplementedError (the failure pattern that reads
    the words in an engine's log is no stub)."""
    for path in (REPO / "autotune").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{number}: {line.strip()}"
            assert not ("isinstance(" in line and "SimulatedEngine" in line), where
            assert "raise NotImplementedError" not in line, where
