"""Datasets users name, and where they come from: ``autotune dataset fetch sharegpt`` downloads one into the cache
(``AUTOTUNE_CACHE_DIR``, default ``~/.cache/autotune``; ``datasets/`` under it), where every later study finds it.

A workload that names its file (``workload.path``) reads it there; where that file is missing, a file of the same name
in the cache stands in (so the shipped spaces' ``path: ShareGPT_V3_unfiltered_cleaned_split.json`` works from any
directory once fetched). The download streams to a temporary file beside the target and renames it when whole: an
interrupted fetch leaves nothing a study would read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from autotune.engines.hub import hub_offline, shorten_reason
from autotune.errors import UsageError
from autotune.settings import Settings

ProgressCallback = Callable[[int, int | None], None]  # (bytes so far, total bytes or None when not announced)


@dataclass(frozen=True)
class RemoteDataset:
    """A public dataset file: where it is published, its file name, its size (for the user to plan) and on what
    network host it lives (so that an offline hub setting refuses it at once)."""

    name: str
    url: str
    file_name: str
    approx_mb: int
    on_hub: bool = True


DATASETS: dict[str, RemoteDataset] = {
    "sharegpt": RemoteDataset(
        "sharegpt",
        "https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/"
        "ShareGPT_V3_unfiltered_cleaned_split.json",
        "ShareGPT_V3_unfiltered_cleaned_split.json",
        642,
    ),
}
SHAREGPT = DATASETS["sharegpt"]


def cached_file(file_name: str) -> Path:
    """Where the cache keeps a dataset file of that name."""
    return Settings().datasets_dir / file_name


def sharegpt_file(path: str | None) -> Path:
    """The ShareGPT file a workload reads: ``path`` where it exists, else the cache's file of that name (of
    ShareGPT_V3's name where no path is given).

    Raises:
        UsageError: in neither place; says where to get it and how (``autotune dataset fetch sharegpt``).
    """
    if path is not None and Path(path).expanduser().exists():
        return Path(path).expanduser()
    name = Path(path).name if path else SHAREGPT.file_name
    if (cached := cached_file(name)).exists():
        return cached
    looked = f"{path} (from {Path.cwd()}) nor {cached}" if path else str(cached)
    get = (f"`autotune dataset fetch sharegpt` downloads it ({SHAREGPT.approx_mb} MB) to {cached_file(SHAREGPT.file_name)}"
           f", where every study finds it; offline, download {SHAREGPT.url} elsewhere and copy it there")  # fmt: skip
    if name != SHAREGPT.file_name or path is None:
        get = f"set workload.path (bench: --dataset-path FILE) to your ShareGPT file, or {get}"
    raise UsageError(f"the ShareGPT dataset file is not here: neither {looked}; fix: {get}")


def fetch(dataset: str, env: Mapping[str, str] | None = None, on_progress: ProgressCallback | None = None,
          transport: httpx.BaseTransport | None = None) -> Path:  # fmt: skip
    """Download ``dataset`` (a name of ``DATASETS``) into the cache, unless it is there already.

    Args:
        dataset: its name, e.g. ``sharegpt``.
        env: the environment (default: this process's); ``HF_HUB_OFFLINE=1`` refuses at once.
        on_progress: called with the bytes written so far and the total, as the download goes.
        transport: httpx's transport (tests pass a ``httpx.MockTransport``).

    Returns:
        The cached file's path.

    Raises:
        UsageError: an unknown name (the known ones listed), offline, or the download failed (with the fix).
    """
    if dataset not in DATASETS:
        raise UsageError(f"unknown dataset {dataset!r}; fix: one of {', '.join(DATASETS)}")
    remote, target = DATASETS[dataset], cached_file(DATASETS[dataset].file_name)
    if target.exists():
        return target
    manual = f"download {remote.url} where the network allows and copy it to {target}"
    if remote.on_hub and hub_offline(os.environ if env is None else env):
        raise UsageError(f"{remote.name} is not in the cache ({target}) and HF_HUB_OFFLINE is set; fix: {manual}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        _download(remote.url, partial, on_progress, transport)
        partial.replace(target)
    except httpx.HTTPError as exc:
        raise UsageError(f"downloading {remote.name} failed ({shorten_reason(exc)}); fix: {manual}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target


def _download(url: str, to: Path, on_progress: ProgressCallback | None, transport: httpx.BaseTransport | None) -> None:
    client = httpx.Client(transport=transport, follow_redirects=True, timeout=httpx.Timeout(30.0))
    with client, client.stream("GET", url) as response, to.open("wb") as file:
        response.raise_for_status()
        total = int(response.headers["content-length"]) if "content-length" in response.headers else None
        done = 0
        for chunk in response.iter_bytes(2**20):
            file.write(chunk)
            done += len(chunk)
            if on_progress:
                on_progress(done, total)
