"""Optuna's and optuna-dashboard's private APIs, fenced in ``autotune.records.optuna_private``: the installed versions
are the tested ones, every private name it uses exists in them, and no other module of autotune touches one.

Supported (``SUPPORTED_OPTUNA``, ``SUPPORTED_OPTUNA_DASHBOARD``): optuna >=5.0,<5.2 and optuna-dashboard >=0.18,<0.22.
A release that renames a private name fails here, not in a user's study.
"""

from __future__ import annotations

import functools
import importlib
import re
from importlib.metadata import version
from pathlib import Path

import optuna
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from autotune.records import optuna_private

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
FENCE = PACKAGE / "records" / "optuna_private.py"
# the private access the fence keeps to itself: private modules of either package, a study's storage and ids
PRIVATE_ACCESS = re.compile(
    r"optuna\.storages\._|optuna_dashboard\._|\._storage\b|_study_id|\._trial_id\b|fixed_params"
)


@pytest.mark.parametrize(
    ("distribution", "supported", "named"),
    [
        ("optuna", optuna_private.SUPPORTED_OPTUNA, ">=5.0,<5.2"),
        ("optuna-dashboard", optuna_private.SUPPORTED_OPTUNA_DASHBOARD, ">=0.18,<0.22"),
    ],
)
def test_the_installed_versions_are_the_supported_ones(distribution: str, supported: SpecifierSet, named: str) -> None:
    assert supported == SpecifierSet(named)  # changing the range is a decision: this test and the docstring too
    installed = version(distribution)
    assert Version(installed) in supported, (
        f"{distribution} {installed} is installed, but autotune supports {distribution}{supported} only "
        "(autotune.records.optuna_private uses its private names); install a supported version"
    )


def _symbol(module: str, path: str) -> object:
    return functools.reduce(getattr, path.split("."), importlib.import_module(module))


@pytest.mark.parametrize(("module", "path"), optuna_private.PRIVATE_SYMBOLS, ids=lambda x: x)
def test_every_private_symbol_exists(module: str, path: str) -> None:
    try:
        _symbol(module, path)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{module}.{path} is gone ({exc}): autotune.records.optuna_private needs it")


def test_every_private_attribute_exists(tmp_path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'private.db'}")
    trial = study.ask()
    instances = {"optuna.study.Study": study, "optuna.trial.Trial": trial,
                 "optuna.trial.FrozenTrial": study.trials[0], "optuna.storages._CachedStorage": study._storage}  # fmt: skip
    assert set(instances) == set(optuna_private.PRIVATE_INSTANCE_ATTRIBUTES)
    for name, attributes in optuna_private.PRIVATE_INSTANCE_ATTRIBUTES.items():
        assert isinstance(instances[name], _symbol(*name.rsplit(".", 1)))
        missing = [attribute for attribute in attributes if not hasattr(instances[name], attribute)]
        assert not missing, f"{name} has no {missing}: autotune.records.optuna_private needs them"
    logger = _symbol("optuna.storages._rdb.storage", "_logger")  # the one that logs the lost-connection noise
    assert logger.name == optuna_private.RDB_STORAGE_LOGGER
    for name in optuna_private.RDB_STORAGE_CALLS:
        assert callable(getattr(optuna.storages.RDBStorage, name, None)), name
    # the accessors answer what the public API says of the same objects
    assert optuna_private.trial_id_of(trial) == study.trials[0]._trial_id
    assert optuna_private.storage_of(study).get_trial(optuna_private.trial_id_of(trial)).number == trial.number
    assert optuna_private.study_id_of(study) == optuna_private.storage_of(study).get_study_id_from_name(
        study.study_name
    )
    assert isinstance(optuna_private.rdb_of(optuna_private.storage_of(study)), optuna.storages.RDBStorage)


def test_no_module_but_the_fence_touches_a_private_name() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != FENCE
             for number, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE_ACCESS.search(line)]  # fmt: skip
    where = "\n".join(found)
    assert not found, f"private API of optuna/optuna-dashboard outside {FENCE.name}, fence it there:\n{where}"
    assert PRIVATE_ACCESS.search(FENCE.read_text())  # the pattern still finds what the fence does


def test_pyproject_bounds_the_versions_this_module_was_tested_with() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from tests.conftest import REPO

    declared = {Requirement(r).name: Requirement(r).specifier
                for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}  # fmt: skip
    assert declared["optuna"] == SpecifierSet(">=5,<5.2") and str(optuna_private.SUPPORTED_OPTUNA) == "<5.2,>=5.0"
    assert declared["optuna-dashboard"] == optuna_private.SUPPORTED_OPTUNA_DASHBOARD
