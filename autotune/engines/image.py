"""An engine's official container image, as `study best` prints a ``docker run`` of a configuration in it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import Version


@dataclass(frozen=True)
class ContainerImage:
    """An engine's official container image: ``name`` with ``{version}`` for the rendered version, the words of the
    launch the image's entrypoint already says (vLLM's image runs ``vllm serve``; the others take the whole command),
    and whether it is a GPU build (run with ``--gpus all``: no line is printed for a study measured on CPU, where it
    could neither start without NVIDIA's container runtime nor measure what the study did)."""

    name: str
    entrypoint: tuple[str, ...] = ()
    gpu: bool = True

    @property
    def docker_options(self) -> list[str]:
        """The ``docker run`` options the image needs: the host's GPUs for a GPU build."""
        return ["--gpus", "all"] if self.gpu else []

    def serves(self, on_cpu: bool) -> bool:
        """Whether the image can run a configuration measured on CPU (``on_cpu``) or on GPUs."""
        return not (on_cpu and self.gpu)

    def reference(self, version: Version | str) -> str:
        return self.name.format(version=version)

    def arguments(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as the image takes it: without the words its entrypoint already says."""
        n = len(self.entrypoint)
        return list(argv[n:]) if tuple(argv[:n]) == self.entrypoint else list(argv)
