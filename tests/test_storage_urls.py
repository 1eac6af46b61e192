"""Storage URLs that cannot work: one line each, saying what is wrong (and the postgres extra only when it is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.study.conftest import postgres_or_skip

SHARED_POSTGRES = "127.0.0.1:5432"  # only connected to, never changed


def _list(storage: str, tmp_path: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "autotune", "study", "list", "--storage", storage], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("autotune: error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://", "in-memory SQLite database ends with the process"),
        ("sqlite:///:memory:", "in-memory SQLite database ends with the process"),
        ("postgresql+psycopg://u:secret@[::1/db", "malformed host or port"),
        ("postgresql+psycopg://u@[::1]:99999/db", "port 99999 out of range"),
        ("not a url", "not a database URL"),
    ],
)
def test_a_url_that_cannot_work_is_one_line_before_connecting(tmp_path, url, says) -> None:
    line = _one_line(_list(url, tmp_path))
    assert says in line and "fix: " in line and "secret" not in line


def test_a_missing_directory_of_a_sqlite_file_is_an_error_and_is_not_made(tmp_path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    line = _one_line(_list(f"sqlite:///{missing}/x.db", tmp_path))
    assert f"directory {missing} does not exist" in line and f"mkdir -p {missing}" in line
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("postgres@127.0.0.1:1/db", "nothing accepts connections at 127.0.0.1:1 (connection refused)"),
        ("postgres@{shared}/autotune_no_such_db", "database 'autotune_no_such_db' does not exist"),
        ("autotune_no_such_role:secret@{shared}/test", "refused user 'autotune_no_such_role'"),
    ],
)
def test_a_storage_that_refuses_says_why_not_install_the_extra(tmp_path, where, says) -> None:
    if "{shared}" in where:
        postgres_or_skip()
    line = _one_line(_list(f"postgresql+psycopg://{where.format(shared=SHARED_POSTGRES)}", tmp_path))
    assert says in line and "fix: " in line
    assert "postgres extra" not in line and "secret" not in line  # psycopg is installed; the password is masked


def test_the_postgres_extra_is_suggested_only_where_psycopg_cannot_be_imported(tmp_path) -> None:
    refused = "postgresql+psycopg://postgres@127.0.0.1:1/db"
    assert "postgres extra" not in _one_line(_list(refused, tmp_path))  # psycopg is installed here
    hidden = tmp_path / "hide-psycopg"
    (hidden / "psycopg").mkdir(parents=True)
    (hidden / "psycopg" / "__init__.py").write_text("raise ImportError('psycopg hidden for this test')\n")
    line = _one_line(_list(refused, tmp_path, pythonpath=str(hidden)))
    assert "driver 'postgresql+psycopg' not installed; fix: install the postgres extra" in line
