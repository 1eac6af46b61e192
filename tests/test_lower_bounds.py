"""The lower bounds CI installs (.ci/lower-bounds.txt, made by scripts/lower_bounds.py) are pyproject.toml's own: a
bound changed without regenerating the file fails here, and so does a dependency without a lower bound."""

from __future__ import annotations

import importlib.util
import tomllib

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("lower_bounds", REPO / "scripts" / "lower_bounds.py")
lower_bounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lower_bounds)


def test_the_committed_constraints_are_what_pyproject_makes_now() -> None:
    assert lower_bounds.CONSTRAINTS.read_text() == lower_bounds.constraints(), (
        "pyproject.toml's bounds changed; fix: python scripts/lower_bounds.py"
    )
    assert lower_bounds.main(["--check"]) == 0


def test_every_dependency_has_a_lower_bound_and_each_is_pinned() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [line for line in lower_bounds.constraints().splitlines() if not line.startswith("#")]
    assert len(pins) == len(dependencies) > 0
    for dependency, pin in zip(dependencies, pins, strict=True):
        bound = lower_bounds.lower_bound(dependency)  # raises where there is none
        assert pin.split(";")[0].endswith(f"=={bound}"), (dependency, pin)


@pytest.mark.parametrize(
    ("requirement", "bound"),
    [("optuna>=5", "5"), ("optuna>=5,<5.2", "5"), ("optuna-dashboard<0.22,>=0.17", "0.17"), ("x~=1.4", "1.4"),
     ("x==2.0.1", "2.0.1"), ("huggingface_hub[cli]>=0.20; python_version >= '3.11'", "0.20")],
)  # fmt: skip
def test_the_lower_bound_of_a_specifier(requirement: str, bound: str) -> None:
    assert lower_bounds.lower_bound(requirement) == bound


@pytest.mark.parametrize("requirement", ["optuna", "optuna<5.2", "optuna>=5,>=5.1"])
def test_a_dependency_without_one_lower_bound_is_an_error(requirement: str) -> None:
    with pytest.raises(lower_bounds.NoLowerBound, match="lower bound"):
        lower_bounds.lower_bound(requirement)


def test_check_fails_on_a_stale_file_and_writing_fixes_it(tmp_path, monkeypatch, capsys) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["optuna>=5,<5.2", "numpy>=1.26; python_version >= \'3.11\'"]\n')
    monkeypatch.setattr(lower_bounds, "PYPROJECT", pyproject)
    monkeypatch.setattr(lower_bounds, "REPO", tmp_path)
    monkeypatch.setattr(lower_bounds, "CONSTRAINTS", tmp_path / "lower-bounds.txt")
    assert lower_bounds.main(["--check"]) == 1  # no file yet
    assert lower_bounds.main([]) == 0
    assert lower_bounds.main(["--check"]) == 0
    pins = [line for line in (tmp_path / "lower-bounds.txt").read_text().splitlines() if not line.startswith("#")]
    assert pins == ["optuna==5", 'numpy==1.26; python_version >= "3.11"']
    pyproject.write_text(pyproject.read_text().replace("optuna>=5", "optuna>=5.1"))
    assert lower_bounds.main(["--check"]) == 1
    assert "+optuna==5.1" in capsys.readouterr().err
    pyproject.write_text('[project]\ndependencies = ["optuna"]\n')
    assert lower_bounds.main([]) == 2
    assert "no lower bound" in capsys.readouterr().err
