"""The top level a user scripts with: every name of ``autotune.__all__`` imports and says what it is, and
``import autotune`` alone imports none of them (the CLI and every subprocess import it)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import autotune


def _written_docstring(obj: object) -> str:
    """The docstring written on ``obj`` itself: not a base class's, not a dataclass's generated signature."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    name = getattr(obj, "__name__", "")
    return "" if not doc or doc.startswith(f"{name}(") else doc.strip()


def test_every_public_name_imports_and_has_a_docstring() -> None:
    assert set(autotune.__all__) == set(autotune._EXPORTS)
    missing = [name for name in autotune.__all__ if not _written_docstring(getattr(autotune, name))]
    assert not missing, f"public names without a docstring: {missing}"
    assert autotune.__doc__ and autotune.__version__


def test_star_import_gives_the_public_names() -> None:
    namespace: dict = {}
    exec("from autotune import *", namespace)
    assert set(autotune.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="not_a_name"):
        autotune.not_a_name  # noqa: B018


def test_import_autotune_imports_nothing_else_of_it() -> None:
    code = "import sys, autotune; print(sorted(m for m in sys.modules if m.startswith('autotune.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
