"""An engine's official container image, as `study best` prints a ``docker run`` of a configuration in it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import Version


@dataclass(frozen=True)
class ContainerImage:
    """An engine's official container image: ``name`` with ``{version}`` for the rendered version, and the words of
    the launch the image's entrypoint already says (vLLM's image runs ``vllm serve``; the others take the whole
    command)."""

    name: str
    entrypoint: tuple[str, ...] = ()

    def reference(self, version: Version | str) -> str:
        return self.name.format(version=version)

    def arguments(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as the image takes it: without the words its entrypoint already says."""
        n = len(self.entrypoint)
        return list(argv[n:]) if tuple(argv[:n]) == self.entrypoint else list(argv)
