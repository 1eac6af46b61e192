"""A real Slurm cluster on this host for the session (scripts/slurm-local.sh up, down at the end), and a PostgreSQL
database of its own for each test; each skips with the reason where it cannot be had."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SLURM_LOCAL = REPO / "scripts" / "slurm-local.sh"
POSTGRES_SERVER = "host=127.0.0.1 port=5432 user=postgres connect_timeout=3"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The environment that reaches the session's Slurm cluster (SLURM_CONF), stopped after the session."""
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no Slurm here ({', '.join(missing)} not found): apt-get install slurm-wlm munge slurmdbd")
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-local.sh runs Slurm as root (SlurmUser=root); not root here")
    # a short path: munge's socket lives there (a Unix socket's path has at most 107 bytes)
    env = os.environ | {"SLURM_LOCAL_DIR": str(tmp_path_factory.mktemp("slurm"))}
    up = subprocess.run([str(SLURM_LOCAL), "up"], env=env, capture_output=True, text=True, timeout=300)
    try:
        if up.returncode != 0:
            pytest.skip(f"scripts/slurm-local.sh up failed: {up.stderr.strip()[-500:]}")
        conf = up.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
        yield {"SLURM_CONF": conf, "SLURM_LOCAL_DIR": env["SLURM_LOCAL_DIR"]}
    finally:
        subprocess.run([str(SLURM_LOCAL), "down"], env=env, capture_output=True, timeout=300)


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """The SQLAlchemy URL of a new database autotune_slurm_* on the PostgreSQL at 127.0.0.1:5432, dropped after."""
    try:
        import psycopg

        server = psycopg.connect(POSTGRES_SERVER + " dbname=postgres", autocommit=True)
    except Exception as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 not reachable: {exc}")
    name = f"autotune_slurm_{uuid.uuid4().hex[:8]}"
    with server:
        server.execute(f"CREATE DATABASE {name}")
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
        finally:
            server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def slurm_command(env: dict[str, str], *argv: str, **kwargs) -> subprocess.CompletedProcess:
    """A Slurm client command against the session's cluster; its output as text."""
    return subprocess.run(list(argv), env=os.environ | env, capture_output=True, text=True, timeout=60, **kwargs)


def interpreter_bin() -> Path:
    """The directory of the interpreter running the tests, which holds its `autotune` command."""
    return Path(sys.executable).parent
