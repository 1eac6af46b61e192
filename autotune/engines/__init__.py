"""Engine adapters, by name: the registry (``autotune.engine_registry``: built-in adapters and plug-ins found by
entry point) as a mapping of classes. An unknown name lists the valid ones."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from autotune.config import Hardware, ServerConfig
from autotune.engine_registry import adapter_class, engine_names
from autotune.engines.base import Engine, InitDefaults, LaunchSpec, Layout, Rule
from autotune.errors import UnsupportedConfig, UsageError


class EngineRegistry(Mapping[str, type[Engine]]):
    """Every registered engine name → its adapter class; a plug-in's class is imported when first looked up."""

    def __getitem__(self, name: str) -> type[Engine]:
        if name not in engine_names():
            raise KeyError(name)
        return _adapter(name)

    def __iter__(self) -> Iterator[str]:
        return iter(engine_names())

    def __len__(self) -> int:
        return len(engine_names())

    def __contains__(self, name: object) -> bool:
        return name in engine_names()


ENGINES = EngineRegistry()


def _adapter(name: str) -> type[Engine]:
    cls = adapter_class(name)
    if not issubclass(cls, Engine) or getattr(cls, "name", None) != name:
        raise UsageError(f"engine {name!r}: {cls.__module__}.{cls.__qualname__} is not an autotune Engine named "
                         f"{name!r}; fix: subclass autotune.engines.Engine and set name = {name!r}")  # fmt: skip
    return cls


def get_engine(name: str, executable: Sequence[str] | None = None) -> Engine:
    """The adapter for ``name``, invoking the engine through ``executable`` (None: the engine's usual command).

    Raises:
        UsageError: no adapter has that name (the message lists the valid ones), or its plug-in cannot be loaded.
    """
    return _adapter(name)(executable)


def broken_rules(engine: str, configs: Iterable[ServerConfig], hardware: Hardware) -> Iterator[str | None]:
    """For each configuration, the static rule it breaks, or None when it passes (lazily, so callers may stop early)."""
    adapter = get_engine(engine)
    for config in configs:
        try:
            adapter.check(config, hardware)
        except UnsupportedConfig as exc:
            yield exc.rule
        else:
            yield None


__all__ = ["ENGINES", "Engine", "EngineRegistry", "InitDefaults", "LaunchSpec", "Layout", "Rule", "broken_rules",
           "get_engine"]  # fmt: skip
