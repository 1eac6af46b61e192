"""Issue #49 item 5 (part): a plug-in adapter missing ``default_version`` or ``default_executable`` fails when its
class is defined, with one line naming the class and the fix, not as a bare AttributeError at the first launch."""

from __future__ import annotations

import pytest

from autotune.engines.base import Engine
from autotune.errors import AutotuneError, EngineDefinitionError


def test_an_adapter_without_a_default_version_is_refused_where_it_is_defined() -> None:
    with pytest.raises(EngineDefinitionError) as info:

        class NoVersion(Engine):
            name = "no-version"
            default_executable = ("no-version",)

    message = str(info.value)
    assert "NoVersion sets no default_version; fix:" in message and "\n" not in message
    assert isinstance(info.value, AutotuneError)


def test_an_adapter_with_both_is_defined_and_an_intermediate_base_needs_neither() -> None:
    class Base(Engine):  # names no engine: a base for adapters, not one
        accepts = frozenset({"tp"})

    class Complete(Base):
        name = "complete"
        default_version = "1.0.0"
        default_executable = ("complete",)

    assert Complete.default_executable == ("complete",) and "tp" in Complete.accepts
