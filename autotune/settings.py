"""Process-wide settings, read once from the environment (prefix ``AUTOTUNE_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """``AUTOTUNE_DEBUG=1`` shows tracebacks instead of one-line errors; ``AUTOTUNE_STUDIES_DIR`` is where studies
    live (their SQLite files, logs and artifacts); ``AUTOTUNE_STORAGE`` is the Optuna storage of every command that
    takes ``--storage`` (e.g. one PostgreSQL database for every worker); ``AUTOTUNE_STORAGE_RETRY_S`` is how long a worker
    keeps retrying a storage that stopped answering (PostgreSQL restarting) before it stops; ``AUTOTUNE_CACHE_DIR`` is
    where ``autotune dataset fetch`` keeps the datasets it downloads (every later study finds them there)."""

    model_config = SettingsConfigDict(env_prefix="AUTOTUNE_")

    debug: bool = False
    studies_dir: Path = Path("studies")
    storage: str | None = None
    heartbeat_s: int = 10  # a dead worker's trial is retried after 3 heartbeats
    storage_retry_s: float = Field(120.0, ge=0)
    cache_dir: Path = Path("~/.cache/autotune")

    @property
    def datasets_dir(self) -> Path:
        """Where fetched datasets live (``autotune dataset fetch``)."""
        return self.cache_dir.expanduser() / "datasets"
