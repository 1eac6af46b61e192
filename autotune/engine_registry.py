"""The engine registry: every engine name and where its adapter class lives, built-in or installed as a plug-in.

A name maps to an import target, ``"package.module:Class"``, the form of an entry point: the built-in adapters are
listed here, and any installed distribution adds its own under the entry-point group ``autotune.engines`` (the way
pytest and optuna-dashboard find plug-ins)::

    [project.entry-points."autotune.engines"]
    myengine = "my_package.adapter:MyEngine"

Names are known without importing any adapter, so ``ServerConfig`` validates its ``engine`` against this registry
while the adapters import ``ServerConfig``: that is why this module lives outside ``autotune.engines`` and imports
nothing of autotune but its errors. A class is imported when it is first asked for (``adapter_class``); entry points
are read once, on the first lookup.
"""

from __future__ import annotations

import importlib
import logging
from functools import cache
from importlib.metadata import entry_points

from autotune.errors import UsageError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "autotune.engines"
# The adapters shipped with autotune: adding one is its file, its test and one line here.
BUILTIN_ENGINES: dict[str, str] = {
    "vllm": "autotune.engines.vllm:VllmEngine",
    "sglang": "autotune.engines.sglang:SglangEngine",
    "trtllm": "autotune.engines.trtllm:TrtllmEngine",
    "transformers": "autotune.engines.transformers:TransformersEngine",
}


@cache
def engine_targets() -> dict[str, str]:
    """Every registered engine name → its adapter's import target: the built-in ones, then the installed plug-ins
    (a plug-in cannot replace a built-in adapter: it is skipped with a warning)."""
    targets = dict(BUILTIN_ENGINES)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in targets and targets[point.name] != point.value:
            log.warning("engine plug-in %s = %s ignored: %r is already %s", point.name, point.value, point.name,
                        targets[point.name])  # fmt: skip
            continue
        targets[point.name] = point.value
    return targets


def engine_names() -> tuple[str, ...]:
    """The registered engine names, built-in ones first."""
    return tuple(engine_targets())


def unknown_engine_message(name: str) -> str:
    """What to say of an engine name nobody registered: the valid ones, and how a plug-in registers."""
    return (f"unknown engine {name!r}; valid engines: {', '.join(engine_names())} (an engine installed as a plug-in "
            f"registers under the entry-point group {ENTRY_POINT_GROUP!r})")  # fmt: skip


def registered_engine(name: str) -> str:
    """``name`` when an engine of that name is registered (a pydantic validator: a ValueError becomes the field's
    validation error)."""
    if name not in engine_targets():
        raise ValueError(unknown_engine_message(name))
    return name


@cache
def adapter_class(name: str) -> type:
    """The adapter class registered as ``name``, imported on first use.

    Raises:
        UsageError: no engine of that name (the message lists the valid ones), or its plug-in cannot be imported or
            does not name a class.
    """
    target = engine_targets().get(name)
    if target is None:
        raise UsageError(f"{unknown_engine_message(name)}; fix: use one of them, or install the engine's plug-in")
    module_name, _, attribute = target.partition(":")
    try:
        found = importlib.import_module(module_name)
        for part in attribute.split(".") if attribute else ():
            found = getattr(found, part)
    except Exception as exc:  # whatever a plug-in's import raises: say which plug-in and how to fix it
        raise UsageError(f"engine {name!r}: its adapter {target} cannot be loaded ({exc}); fix: reinstall the "
                         "package that registers it, or uninstall it") from None  # fmt: skip
    if not isinstance(found, type):
        raise UsageError(f"engine {name!r}: {target} is not a class; fix: the entry point must name the adapter class")
    return found
