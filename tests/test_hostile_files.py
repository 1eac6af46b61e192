"""Files that are not what they claim: a study's SQLite file with an overwritten page, or empty, and a space file of
megabytes, each refused in one line naming the file and the fix, by every command that reads it."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import SpaceError
from autotune.search import study_file
from autotune.search.storage import open_storage
from autotune.space.files import load_space, parse_space
from autotune.yamlload import MAX_YAML_BYTES, TooLarge, load_yaml
from tests.conftest import SPACES

runner = CliRunner()
NAME = "damaged"
PAGE = 4096
COMMANDS = (["study", "list"], ["study", "show", "--study", NAME], ["study", "best", "--study", NAME],
            ["study", "report", "--study", NAME], ["study", "run", "--study", NAME, "--n-trials", "1"])  # fmt: skip


@pytest.fixture
def studies(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    study = optuna.create_study(study_name=NAME, storage=f"sqlite:///{tmp_path / NAME}.db", direction="maximize")
    for value in (1.0, 2.0, 3.0):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"engine": "vllm"}))
    return tmp_path


def _one_line_naming_the_file(command: list[str], path: Path, words: str) -> None:
    done = runner.invoke(app, command)
    assert done.exit_code == 1, (command, done.output)
    assert "Traceback" not in done.output and done.stdout == "", (command, done.output)
    line = done.stderr.strip().splitlines()[-1]  # `study run` says first which study it runs, on a line of its own
    assert done.stderr.count("autotune: error:") == 1 and line.startswith("autotune: error:"), (command, done.stderr)
    assert f"study file {path} is {words}" in line and "fix: restore it from a backup" in line, (command, line)


@pytest.mark.parametrize("page", [2, 3, 5])  # the schema's pages, and the tables every command reads
def test_an_overwritten_page_is_one_line_from_every_command(studies, page: int) -> None:
    path = studies / f"{NAME}.db"
    with path.open("r+b") as file:
        file.seek(page * PAGE)
        file.write(b"\xff" * PAGE)
    for command in COMMANDS:
        _one_line_naming_the_file(command, path, "damaged (SQLite: ")
    assert f"mv {path} {path}.damaged" in runner.invoke(app, ["study", "list"]).stderr


def test_an_empty_study_file_is_refused_not_started_over(studies) -> None:
    path = studies / f"{NAME}.db"
    path.write_bytes(b"")
    for command in COMMANDS:
        _one_line_naming_the_file(command, path, "empty (0 bytes)")
    assert path.stat().st_size == 0  # nothing was written over it


def test_a_new_study_file_is_never_seen_empty(tmp_path, monkeypatch) -> None:
    """Its schema is written under another name and the whole file linked into place: a second worker opening it
    meanwhile finds no file (a new study) or a whole one, never the empty file SQLite makes on connecting."""
    path = tmp_path / "new.db"
    seen: list[bool] = []
    made_by_optuna = optuna.storages.RDBStorage.__init__

    def watching(self, url: str, *args, **kwargs) -> None:
        seen.append(path.exists())
        made_by_optuna(self, url, *args, **kwargs)
        seen.append(path.exists() and path.stat().st_size > 0)

    monkeypatch.setattr(optuna.storages.RDBStorage, "__init__", watching)
    optuna.create_study(study_name="new", storage=open_storage(f"sqlite:///{path}"))
    assert seen[:2] == [False, False], seen  # the schema was made elsewhere while the file was not there
    assert seen[2:] == [True, True], seen  # then opened whole
    assert [p.name for p in tmp_path.iterdir()] == ["new.db"]  # no temporary file left beside it


def test_a_new_study_file_made_by_another_worker_first_is_the_one_used(tmp_path, monkeypatch) -> None:
    path = tmp_path / "raced.db"
    ours = optuna.storages.RDBStorage.__init__

    def another_worker_links_first(self, url: str, *args, **kwargs) -> None:
        ours(self, url, *args, **kwargs)
        if not path.exists():  # the other worker's study lands while ours is being made
            optuna.create_study(study_name="theirs", storage=f"sqlite:///{path}")

    monkeypatch.setattr(optuna.storages.RDBStorage, "__init__", another_worker_links_first)
    storage = open_storage(f"sqlite:///{path}")
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["theirs"]


def test_a_space_file_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    big = tmp_path / "big.yaml"
    shipped = (SPACES / "quickstart.yaml").read_text()
    big.write_text(shipped + "#" * MAX_YAML_BYTES)
    monkeypatch.setattr(Path, "read_text", lambda *_, **__: pytest.fail("read the whole file"))
    limit = f"over the {MAX_YAML_BYTES // 1024} KiB limit"
    with pytest.raises(SpaceError, match=rf"big\.yaml: \d+ KiB of YAML, {limit}; fix: keep it under"):
        load_space(str(big))
    monkeypatch.undo()
    done = runner.invoke(app, ["space", "validate", str(big)])
    assert done.exit_code == 2 and limit in done.stderr and "\n" not in done.stderr.strip()
    assert parse_space(shipped, "quickstart.yaml").name == "quickstart"  # a space of its size is read as before


def test_yaml_text_over_the_limit_is_refused_without_parsing() -> None:
    with pytest.raises(TooLarge, match=r"1\.0 MiB of YAML"):
        load_yaml("[" + "1, " * (1024**2 // 3) + "1]")
    assert load_yaml("a: [1, 2]") == {"a": [1, 2]}


def test_damaged_is_found_through_optunas_wrapping() -> None:
    import sqlite3

    import sqlalchemy

    cause = sqlalchemy.exc.DatabaseError("SELECT", {}, sqlite3.DatabaseError("database disk image is malformed"))
    try:
        try:
            raise cause
        except sqlalchemy.exc.DatabaseError as exc:
            raise optuna.exceptions.StorageInternalError("commit failed") from exc
    except optuna.exceptions.StorageInternalError as wrapped:
        error = study_file.damaged(wrapped, Path("/s/x.db"))
    assert "study file /s/x.db is damaged (SQLite: database disk image is malformed)" in str(error)
    locked = sqlalchemy.exc.OperationalError("SELECT", {}, sqlite3.OperationalError("database is locked"))
    assert study_file.damaged(locked, Path("/s/x.db")) is None  # a busy file is not a damaged one
