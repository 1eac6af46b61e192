"""A model directory saved in the Hugging Face cache's own layout, offline: what a GPU node's cache holds after
``hf download ORG/NAME``, so that a space can name the model by its hub id with ``HF_HUB_OFFLINE=1``.

The layout is huggingface_hub's: ``HF_HOME/hub/models--ORG--NAME/blobs/<sha256>`` holds each file once,
``snapshots/<REVISION>/<file>`` links to its blob, and ``refs/main`` names the revision ``main`` resolves to.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"  # a commit id as the hub writes one


def save_to_hub_cache(model_dir: Path, hf_home: Path, repo_id: str, revision: str = REVISION,
                      files: tuple[str, ...] | None = None) -> Path:  # fmt: skip
    """Copy ``model_dir``'s files (or just ``files`` of them) into ``hf_home``'s hub cache as ``repo_id`` at
    ``revision``, with ``refs/main`` pointing at it; returns the snapshot directory."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot, blobs = repo / "snapshots" / revision, repo / "blobs"
    snapshot.mkdir(parents=True, exist_ok=True)
    blobs.mkdir(parents=True, exist_ok=True)
    for source in sorted(model_dir.iterdir()):
        if not source.is_file() or (files is not None and source.name not in files):
            continue
        data = source.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / source.name
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot
