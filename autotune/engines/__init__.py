"""Engine adapters, by name. A registry is a plain dict; an unknown name lists the valid ones."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from autotune.config import Hardware, ServerConfig
from autotune.engines.base import Engine, LaunchSpec, Rule
from autotune.engines.sglang import SglangEngine
from autotune.engines.transformers import TransformersEngine
from autotune.engines.trtllm import TrtllmEngine
from autotune.engines.vllm import VllmEngine
from autotune.errors import UnsupportedConfig, UsageError

ENGINES: dict[str, type[Engine]] = {
    cls.name: cls for cls in (VllmEngine, SglangEngine, TrtllmEngine, TransformersEngine)
}


def get_engine(name: str, executable: Sequence[str] | None = None) -> Engine:
    """The adapter for ``name``, invoking the engine through ``executable`` (None: the engine's usual command).

    Raises:
        UsageError: no adapter has that name; the message lists the valid ones.
    """
    try:
        cls = ENGINES[name]
    except KeyError:
        raise UsageError(f"no engine adapter named {name!r}; valid engines: {', '.join(ENGINES)}") from None
    return cls(executable)


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


__all__ = ["ENGINES", "Engine", "LaunchSpec", "Rule", "broken_rules", "get_engine"]
