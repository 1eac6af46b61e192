from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import REPO

SCRIPTED_SPACE = Path(__file__).parent / "scripted.yaml"
ENGINE = f"{sys.executable} -m autotune.testing.scripted"


def write_space(tmp_path: Path, env: dict | None = None, **changes) -> Path:
    """The scripted study space with extra engine env and top-level changes, written under tmp_path."""
    space = yaml.safe_load(SCRIPTED_SPACE.read_text())
    space["engines"]["vllm"]["fixed"]["env"].update(env or {})
    space["workload"]["path"] = str(SCRIPTED_SPACE.parent / "prompts.jsonl")
    space.update(changes)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def autotune(*args: str, studies: Path, timeout: float = 300, env_extra: dict | None = None, module: str = "autotune",
             **popen) -> subprocess.CompletedProcess:  # fmt: skip
    """Run the CLI as a user would (a subprocess, its own session), with studies under ``studies``; ``module``: a
    stand-in for ``autotune`` that runs its CLI (tests.study.killed_creator)."""
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "AUTOTUNE_HEARTBEAT_S": "1"} | (env_extra or {})
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, **popen)  # fmt: skip


def show(name: str, studies: Path, *extra: str) -> dict:
    done = autotune("study", "show", "--study", name, "--json", *extra, studies=studies)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def studies(tmp_path: Path) -> Path:
    return tmp_path / "studies"


POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def postgres_or_skip() -> None:
    """Skip the calling test, with the reason, where PostgreSQL (or psycopg) is not there to test against."""
    try:
        import psycopg

        psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", connect_timeout=3).close()
    except Exception as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 not reachable: {exc}")


@pytest.fixture
def pg_study():
    """A fresh study name on the PostgreSQL server (skipped where it is not reachable), deleted afterwards."""
    postgres_or_skip()
    name = f"study-{uuid.uuid4().hex[:8]}"
    yield name
    optuna.delete_study(study_name=name, storage=POSTGRES)
