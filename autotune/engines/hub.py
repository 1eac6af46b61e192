"""Model references as users write them, and where a model's tokenizer is: resolved the way the engines resolve it.

A model is a local directory (``/models/llama``, ``./tiny``) or a Hugging Face hub id (``meta-llama/Llama-3.3-70B-
Instruct``), optionally pinned to a revision (``deepseek-ai/DeepSeek-V3.2@a1b2c3d``: a branch, tag or commit). The
benchmark's ``random`` and ``sharegpt`` workloads count prompt lengths with the model's own tokenizer, so the
tokenizer is found before any launch, in this order:

1. ``workload.tokenizer`` of the space (a ``tokenizer.json``, a directory holding one, or a hub id), where set;
2. the local model directory's ``tokenizer.json``;
3. the Hugging Face cache the engine reads: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``,
   taken from the engine's environment (the space's ``env`` over this process's), at the revision asked (``main``
   where none is);
4. where the hub is reachable and ``HF_HUB_OFFLINE`` is not set: a download of ``tokenizer.json`` alone (never the
   weights) into that same cache, with huggingface_hub's progress bar.

Only the public API of ``huggingface_hub`` is used (``try_to_load_from_cache``, ``hf_hub_download``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import httpx
from tokenizers import Tokenizer

from autotune.config import split_revision
from autotune.engines.models import load_tokenizer
from autotune.errors import UsageError

TOKENIZER_FILE = "tokenizer.json"
# an id as the hub spells one: NAME or ORG/NAME, each of letters, digits, '-', '_' and '.'; then @REVISION
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ModelRef:
    """A model as written in a space: a local path, or a hub id and the revision pinned with ``@`` (None: main)."""

    name: str
    revision: str | None = None
    local: bool = False

    @classmethod
    def parse(cls, model: str) -> ModelRef:
        """``model`` as a user writes it: an existing path is local; else ``ORG/NAME[@REVISION]`` is a hub id.

        Raises:
            UsageError: neither an existing path nor a hub id (a directory that is not there, say).
        """
        if Path(model).expanduser().exists():
            return cls(model, None, local=True)
        name, revision = split_revision(model)
        if _HUB_ID.match(name) and not name.startswith("."):
            return cls(name, revision)
        raise UsageError(f"model {model!r} is neither a local directory nor a hub id; fix: give the model's "
                         "directory (it must exist here) or its hub id as ORG/NAME[@REVISION]")  # fmt: skip

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}" if self.revision else self.name


@dataclass(frozen=True)
class TokenizerSource:
    """Where a model's tokenizer was found: its file, how (``where``) and the reference ``autotune bench --tokenizer``
    takes to find it again from any directory (an absolute path, or a hub id that resolves from the cache)."""

    file: Path
    where: Literal["workload.tokenizer", "model directory", "Hugging Face cache", "downloaded"]
    reference: str

    def load(self) -> Tokenizer:
        """The tokenizer itself (read once per file and process)."""
        return _load(self.file)


@lru_cache(maxsize=16)
def _load(file: Path) -> Tokenizer:
    return load_tokenizer(file)  # read once per file and process: every benchmark of a study counts with it


def hub_cache_dir(env: Mapping[str, str]) -> Path:
    """The hub cache an engine started with ``env`` reads, as huggingface_hub computes it."""
    if cache := env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(cache).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def hub_offline(env: Mapping[str, str]) -> bool:
    """Whether ``env`` tells huggingface_hub (and so the engines) not to reach the hub."""
    return any(env.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve_tokenizer(model: str, env: Mapping[str, str] | None = None, override: str | None = None,
                      download: bool = True) -> TokenizerSource:  # fmt: skip
    """The tokenizer of ``model`` for an engine started with ``env`` added to this process's environment.

    Args:
        model: the model as the space names it (a local directory or a hub id, optionally ``@REVISION``).
        env: the engine's own environment variables (the space's ``env``), over ``os.environ``.
        override: ``workload.tokenizer``: a tokenizer.json, a directory holding one, or a hub id.
        download: fetch ``tokenizer.json`` from the hub where it is not cached (and the hub is not offline).

    Raises:
        UsageError: it is nowhere autotune may look, with where it looked and the fix.
    """
    environment = {**os.environ, **(env or {})}
    if override:
        return _resolve(ModelRef.parse(override), environment, download, "workload.tokenizer")
    return _resolve(ModelRef.parse(model), environment, download, None)


def _resolve(ref: ModelRef, env: Mapping[str, str], download: bool, named_by: str | None) -> TokenizerSource:
    if ref.local:
        path = Path(ref.name).expanduser()
        file = path / TOKENIZER_FILE if path.is_dir() else path
        if not file.is_file():
            raise UsageError(f"no {TOKENIZER_FILE} in {path} (the model's tokenizer, which random and ShareGPT "
                             f"prompts are counted with); fix: set workload.tokenizer to a {TOKENIZER_FILE} or a hub "
                             "id whose tokenizer matches the model's")  # fmt: skip
        return TokenizerSource(file.resolve(), named_by or "model directory", str(file.resolve()))
    return _from_hub(ref, env, download, named_by)


def _from_hub(ref: ModelRef, env: Mapping[str, str], download: bool, named_by: str | None) -> TokenizerSource:
    import huggingface_hub  # its import reads the environment: only where a hub id is resolved

    cache = hub_cache_dir(env)
    cached = huggingface_hub.try_to_load_from_cache(str(ref.name), TOKENIZER_FILE, cache_dir=str(cache),
                                                    revision=ref.revision)  # fmt: skip
    if isinstance(cached, str):
        return TokenizerSource(Path(cached), named_by or "Hugging Face cache", str(ref))
    where = f"{TOKENIZER_FILE} of {ref} is not in the Hugging Face cache at {cache}"
    fetch = (f"fix: where the hub is reachable, run `hf download {ref.name} {TOKENIZER_FILE}"
             f"{f' --revision {ref.revision}' if ref.revision else ''} --cache-dir {cache}` (the tokenizer "
             "only), or set workload.tokenizer to a local tokenizer.json")  # fmt: skip
    if hub_offline(env):
        raise UsageError(f"{where} and HF_HUB_OFFLINE is set; {fetch}")
    if not download:
        raise UsageError(f"{where}; {fetch}")
    if unreachable := hub_unreachable(env):  # huggingface_hub retries for ~20 s; one look says as much at once
        raise UsageError(f"{where}, and the hub is not reachable from here ({unreachable}); {fetch}")
    try:
        file = huggingface_hub.hf_hub_download(ref.name, TOKENIZER_FILE, revision=ref.revision, cache_dir=str(cache),
                                               token=env.get("HF_TOKEN") or None)  # fmt: skip
    except Exception as exc:  # network, auth (a gated model) or a missing file: all mean "not to be had here"
        reason = shorten_reason(exc)
        raise UsageError(f"{where}, and downloading it failed ({reason}); {fetch} (a gated model needs HF_TOKEN "
                         "in the environment)") from None  # fmt: skip
    return TokenizerSource(Path(file), named_by or "downloaded", str(ref))


def hub_unreachable(env: Mapping[str, str], timeout_s: float = 5.0) -> str | None:
    """Why the hub (``HF_ENDPOINT``, default huggingface.co) cannot be reached from here, or None when it answers."""
    endpoint = env.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        httpx.head(endpoint, timeout=timeout_s, follow_redirects=False)
    except httpx.HTTPError as exc:
        return f"{endpoint}: {shorten_reason(exc)}"
    return None


def shorten_reason(exc: BaseException, width: int = 160) -> str:
    """An exception's first line, at most ``width`` characters (huggingface_hub's messages run to many lines)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= width else text[: width - 1] + "…"
