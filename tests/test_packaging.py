"""The shipped spaces live in search_spaces/ at the top of the checkout and are package data: an install outside the
checkout, non-editable or editable, lists them by name and runs the quickstart (the README's first command)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version
from setuptools import find_packages

from tests.conftest import REPO
from tests.venvs import fresh_venv

SHIPPED = sorted(path.stem for path in (REPO / "search_spaces").glob("*.yaml"))


def test_every_subpackage_is_listed_in_pyproject() -> None:
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = find_packages(where=str(REPO), include=["autotune", "autotune.*"])
    assert sorted(listed) == sorted([*found, "autotune.search_spaces"])


def _checkout_copy(target: Path) -> Path:
    """What an install of this checkout reads (pip builds in the source tree: the checkout itself stays clean)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("autotune", "search_spaces"):
        shutil.copytree(REPO / folder, target / folder, ignore=ignore)
    for file in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / file, target / file)
    return target


def _cannot_build_wheels() -> str | None:
    """Why pip cannot build this checkout's wheel offline here (without build isolation), else None."""
    import setuptools

    if Version(setuptools.__version__) >= Version("70.1") or importlib.util.find_spec("wheel"):
        return None
    return (f"setuptools {setuptools.__version__} builds no wheel without the `wheel` package "
            "(the dev extra installs setuptools>=70.1)")  # fmt: skip


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _install(python: Path, source: Path, cwd: Path, env: dict[str, str], *, editable: bool) -> None:
    argv = [str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--ignore-installed",
            "--disable-pip-version-check", "--quiet", *(["-e"] if editable else []), str(source)]  # fmt: skip
    done = _run(argv, cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr


def _lists_the_shipped_spaces(venv: Path, cwd: Path, env: dict[str, str], spaces: Path) -> None:
    done = _run([str(venv / "bin" / "autotune"), "space", "list", "--json"], cwd, env, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [row["name"] for row in rows] == SHIPPED
    assert {Path(row["path"]).parent for row in rows} == {spaces}


@pytest.mark.slow
def test_an_install_outside_the_checkout_lists_the_spaces_and_runs_the_quickstart(tmp_path) -> None:
    if reason := _cannot_build_wheels():
        pytest.skip(reason)
    source = _checkout_copy(tmp_path / "source")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOTUNE_STORAGE")}
    env |= {"AUTOTUNE_STUDIES_DIR": str(elsewhere / "studies"), "PIP_NO_INPUT": "1"}
    where = ["-c", "import autotune, autotune.space.files as f; print(autotune.__file__, f.SHIPPED_SPACES)"]

    installed = tmp_path / "installed"
    python = fresh_venv(installed)
    _install(python, source, elsewhere, env, editable=False)
    package, spaces = _run([str(python), *where], elsewhere, env).stdout.split()
    assert Path(package).is_relative_to(installed), package  # the installed copy, not a checkout
    assert Path(spaces) == Path(package).parent / "search_spaces"
    _lists_the_shipped_spaces(installed, elsewhere, env, Path(spaces))
    # the README's first command, `autotune study run`: the quickstart, a simulated study (2 launches here)
    done = _run([str(installed / "bin" / "autotune"), "study", "run", "--n-trials", "2", "--seed", "1"],
                elsewhere, env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (elsewhere / "studies" / "quickstart.db").exists()

    editable = tmp_path / "editable"
    python = fresh_venv(editable)
    _install(python, source, elsewhere, env, editable=True)
    package, spaces = _run([str(python), *where], elsewhere, env).stdout.split()
    assert Path(package) == source / "autotune" / "__init__.py" and Path(spaces) == source / "search_spaces"
    _lists_the_shipped_spaces(editable, elsewhere, env, source / "search_spaces")
