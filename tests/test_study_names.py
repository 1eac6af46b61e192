"""A study name is confined to the studies directory: a name that is not a plain file name there (`..`, `../x`,
`./../../y`, an absolute path, '', `a/b`) is refused with one line naming the allowed characters, before anything is
written, whether it comes from --study, the space's `name` or a storage; every command that takes --study refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.errors import UsageError
from autotune.search.names import is_study_name, study_name
from tests.sim.test_sim_studies import direct_space
from tests.study.conftest import autotune

ALLOWED = "use letters, digits, '.', '_' and '-', not starting with '.' or '-', at most 100 characters"
OUTSIDE = ["..", "../x", "./../../y", "", "a/b"]  # and an absolute path (under tmp_path, below)


def _tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def _one_line_refusal(done) -> None:
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("autotune: error: study name ") and ALLOWED in line and "fix: --study " in line


@pytest.mark.parametrize("name", [*OUTSIDE, "ABSOLUTE"])
def test_run_refuses_a_name_outside_the_studies_dir(tmp_path, name) -> None:
    # the studies dir two levels down, so that ./../../y would land inside tmp_path, where the listing sees it
    studies = tmp_path / "home" / "work" / "studies"
    space = direct_space(tmp_path)
    name = str(tmp_path / "elsewhere") if name == "ABSOLUTE" else name
    before = _tree(tmp_path)
    done = autotune("study", "run", space, "--study", name, "--n-trials", "1", studies=studies)
    _one_line_refusal(done)
    assert _tree(tmp_path) == before  # nothing written, inside the studies dir or out


def test_a_space_name_that_is_not_a_file_name_is_refused(tmp_path) -> None:
    studies = tmp_path / "studies"
    space = Path(direct_space(tmp_path))
    content = yaml.safe_load(space.read_text())
    space.write_text(yaml.safe_dump(content | {"name": "../escaped"}))
    before = _tree(tmp_path)
    done = autotune("study", "run", str(space), "--n-trials", "1", studies=studies)
    _one_line_refusal(done)
    assert "the space's name in direct.yaml" in done.stderr and _tree(tmp_path) == before


@pytest.mark.parametrize("command", [("study", "show"), ("study", "best"), ("study", "report"), ("study", "validate"),
                                     ("dashboard",)])  # fmt: skip
def test_every_command_with_study_refuses_it(tmp_path, command) -> None:
    studies = tmp_path / "studies"
    before = _tree(tmp_path)
    _one_line_refusal(autotune(*command, "--study", "../x", studies=studies))
    assert _tree(tmp_path) == before


def test_the_validator() -> None:
    for name in ("quickstart", "llama-3.3-70b-instruct-8gpu", "a", "A_b-1.2", "x" * 100, "_under"):
        assert is_study_name(name) and study_name(name) == name
    for name in (*OUTSIDE, "/abs", ".", ".hidden", "x" * 101, "a b", "a\nb", "é", "a\\b", "a:b", "-dash"):
        assert not is_study_name(name)
        with pytest.raises(UsageError, match="plain file name"):
            study_name(name)
    with pytest.raises(UsageError) as refused:
        study_name("y" * 5000)
    assert len(str(refused.value)) < 400  # a huge name is not echoed whole
