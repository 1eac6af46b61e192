"""An engine from another package: docs/engine-plugins.md's example plug-in (its adapter file and its pyproject
entry-point lines, taken from the section "Adding an engine" as they are printed there) is installed into a fresh
venv of its own with pip, offline, and runs a study end to end there, on the scripted server, then `study best`
exports it.

The venv sees this interpreter's packages (``--system-site-packages`` gives the base interpreter's; a ``.pth`` adds
this venv's and the checkout), so nothing is downloaded; the tiny package is built by an in-tree PEP 517 backend of
a few lines (the machine has no ``wheel`` package for setuptools to build with)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from pydantic import ValidationError

from autotune import engine_registry
from autotune.config import Hardware, ServerConfig
from autotune.engine_registry import ENTRY_POINT_GROUP
from autotune.engines import ENGINES, Engine, LaunchSpec, get_engine
from autotune.errors import UnsupportedConfig, UsageError
from tests.conftest import REPO
from tests.venvs import fresh_venv

SCRIPTED_SERVER = ["-m", "autotune.testing.scripted", "serve", "scripted-model"]  # speaks enough of any engine's argv
# A wheel of the project's modules with the entry points of pyproject.toml's [project.entry-points] (what a real
# backend writes to entry_points.txt), so the test exercises the page's lines themselves.
BACKEND = """
import base64, hashlib, pathlib, tomllib, zipfile


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    info = f"{name}-{version}.dist-info"
    files = {p.name: p.read_bytes() for p in pathlib.Path(".").glob("*.py") if p.name != "backend.py"}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\\nName: {project['name']}\\nVersion: {version}\\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\\n" + "".join(f"{key} = {value}\\n" for key, value in points.items())
        for group, points in project.get("entry-points", {}).items()
    ).encode()
    digest = lambda data: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = [f"{path},sha256={digest(data)},{len(data)}" for path, data in files.items()] + [f"{info}/RECORD,,"]
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\\n".join(record) + "\\n")
    return wheel
"""
BUILD_SYSTEM = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'


def readme_plugin() -> tuple[str, str]:
    """docs/engine-plugins.md's example adapter module and pyproject lines (the section's python and toml blocks)."""
    text = (REPO / "docs" / "engine-plugins.md").read_text()
    section = text[text.index("## Adding an engine") :]
    section = section[: section.index("\n## ", 1)]
    blocks = dict(re.findall(r"```(python|toml)\n(.*?)```", section, re.S))
    return blocks["python"], blocks["toml"]


def plugin_venv(tmp_path: Path) -> Path:
    """A fresh venv with the documented plug-in installed by pip (offline); its python. Skips, saying why, where a
    venv cannot be made or pip cannot install into it here."""
    module, pyproject = readme_plugin()
    package = tmp_path / "autotune-llamacpp"
    package.mkdir()
    (package / "autotune_llamacpp.py").write_text(module)
    (package / "pyproject.toml").write_text(BUILD_SYSTEM + pyproject)
    (package / "backend.py").write_text(BACKEND)
    # this interpreter's packages (pip, pydantic, optuna...) and the checkout: no download, this autotune
    python = fresh_venv(tmp_path / "venv", REPO)
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", str(package)],
                               capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"pip cannot install into a fresh venv here: {(installed.stdout + installed.stderr)[-500:]}")
    return python


def plugin_space(tmp_path: Path, python: Path) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": "word " * 8, "output_len": 4}) + "\n" for _ in range(6)))
    timing = {"SCRIPTED_ITL_MS": "2", "SCRIPTED_TTFT_MS": "5", "SCRIPTED_STARTUP_S": "0.1"}
    space = {
        "name": "plugin-llamacpp",
        "hardware": {"gpus": 0},
        "engines": {"llamacpp": {"executable": [str(python), *SCRIPTED_SERVER],
                                 "fixed": {"model": "scripted-model", "env": timing}}},
        "params": {"max_num_seqs": {"choices": [2, 4], "default": 2}, "max_concurrency": {"choices": [2], "default": 2}},
        "workload": {"dataset": "jsonl", "path": str(prompts), "num_prompts": 6, "output_len": 4},
        "objective": {"metrics": [{"name": "total_token_throughput"}]},
        "startup_timeout_s": 30,
    }  # fmt: skip
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def test_an_engine_installed_by_entry_point_runs_a_study_end_to_end(tmp_path: Path) -> None:
    assert "llamacpp" not in ENGINES  # only the venv has the plug-in
    python = plugin_venv(tmp_path)
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies"), "PYTHONPATH": str(REPO)}

    def autotune(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-m", "autotune", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    listed = subprocess.run([str(python), "-c", "from autotune.engines import ENGINES; print(*ENGINES)"], env=env,
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert listed[-1] == "llamacpp" and "vllm" in listed
    ran = autotune("study", "run", str(plugin_space(tmp_path, python)), "--n-trials", "2", "--seed", "1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shown = json.loads(autotune("study", "show", "--study", "plugin-llamacpp", "--json").stdout)
    assert shown, ran.stdout
    best = autotune("study", "best", "--study", "plugin-llamacpp")
    assert best.returncode == 0, best.stderr
    lines = best.stdout.splitlines()
    launch = [line for line in lines if "autotune.testing.scripted serve scripted-model -m scripted-model" in line]
    assert len(launch) == 1 and "--parallel" in launch[0] and "--port 8000" in launch[0], best.stdout
    # the plug-in's own image is a GPU build and the study ran on CPU (gpus: 0): no docker run line, one saying why
    assert not any(line.startswith("docker run ") for line in lines)
    assert "llamacpp's official image (ghcr.io/ggml-org/llama.cpp:server-cuda) is a GPU build" in lines[-1], best.stdout
    refused = autotune("command", "--set", "engine=llamacpp", "--set", "model=m", "--set", "tp=2")
    assert refused.returncode == 1 and "llama.cpp splits a model by layers" in refused.stderr


class EchoEngine(Engine):
    """A minimal adapter registered by a fake entry point below: it accepts nothing but what every adapter takes."""

    name = "echo"
    default_executable = ("echo-server",)
    default_version = "1.0"

    def render(self, config: ServerConfig, version: Version, port: int | None, host: str) -> LaunchSpec:
        return LaunchSpec((*self.executable, config.model))


@pytest.fixture
def entry_points(monkeypatch):
    """Replace the installed entry points of the group with the given (name, target) pairs, for one test."""

    def install(*points: tuple[str, str]) -> None:
        found = [EntryPoint(name, target, ENTRY_POINT_GROUP) for name, target in points]
        monkeypatch.setattr(engine_registry, "entry_points", lambda group: [p for p in found if p.group == group])
        engine_registry.engine_targets.cache_clear()
        engine_registry.adapter_class.cache_clear()

    yield install
    monkeypatch.undo()
    engine_registry.engine_targets.cache_clear()
    engine_registry.adapter_class.cache_clear()


def test_a_plugin_is_validated_loaded_and_refuses_what_it_does_not_accept(entry_points) -> None:
    entry_points(("echo", f"{__name__}:EchoEngine"), ("vllm", f"{__name__}:EchoEngine"))  # the second is ignored
    assert list(ENGINES)[-1] == "echo" and get_engine("vllm").name == "vllm"
    config = ServerConfig(engine="echo", model="m")
    assert get_engine("echo").launch_spec(config).argv == ("echo-server", "m")
    with pytest.raises(UnsupportedConfig, match="echo has no tp knob"):
        get_engine("echo").check(ServerConfig(engine="echo", model="m", tp=2), Hardware())


def test_a_broken_plugin_or_an_unknown_name_is_a_usage_error_that_says_what_to_do(entry_points) -> None:
    entry_points(("gone", "no_such_package.adapter:Engine"), ("notone", f"{__name__}:plugin_venv"))
    with pytest.raises(UsageError, match="'gone'.*cannot be loaded.*fix:"):
        get_engine("gone")
    with pytest.raises(UsageError, match="'notone'.*fix:"):
        get_engine("notone")
    with pytest.raises(ValidationError, match="valid engines: vllm, sglang, trtllm.*gone"):
        ServerConfig(engine="tgi", model="m")
