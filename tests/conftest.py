from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config import Hardware
from autotune.testing.sim import H200X8

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def h200x8() -> Hardware:
    return H200X8


@pytest.fixture(scope="session")
def quickstart_studies(tmp_path_factory) -> Path:
    """A studies directory holding a short quickstart study (the default `autotune study run`, 8 trials)."""
    from tests.study.conftest import autotune

    studies = tmp_path_factory.mktemp("quickstart") / "studies"
    done = autotune("study", "run", "--n-trials", "8", "--seed", "2", studies=studies, timeout=600)
    assert done.returncode == 0, done.stderr
    (studies / "run.out").write_text(done.stdout)
    return studies
