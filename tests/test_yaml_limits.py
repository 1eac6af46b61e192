"""YAML a user wrote cannot cost more than its size: aliases that would expand into millions of values are refused
before anything is expanded, and an error echoes at most a few dozen characters of a bad value (issue #21, item 6)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import parse_space
from tests.conftest import REPO, SPACES

runner = CliRunner()
TINY = (SPACES / "vllm-cpu-tiny.yaml").read_text()
MAX_ERROR_LINE = 500  # characters of what is wrong: a terminal shows it whole in a few rows


def alias_bomb(levels: int = 9) -> str:
    """Anchors ``a`` … ``i``, each a list of nine aliases of the one before: 90 nodes, 9⁹ values expanded."""
    lines = ["bomb:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
    names = "abcdefghijklmnop"[:levels]
    for previous, name in itertools.pairwise(names):
        lines.append(f"  {name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    # the space: params.extra_args.choices is the 9^9-value list (1 GB and a 226 MB "one-line" error before)
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb() + TINY.replace("\nparams:\n", "\nparams:\n  extra_args: {choices: *i}\n", 1))
    # the CLI runs under a parent of its own, so that the peak memory of its children is the CLI's alone
    measure = textwrap.dedent(f"""
        import resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "autotune", "space", "validate", {str(path)!r}])
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stdout)
        sys.exit(done.returncode)
    """)
    done = subprocess.run([sys.executable, "-c", measure], cwd=REPO, capture_output=True, text=True, timeout=600)
    peak_mb = int(done.stdout.split()[-1]) / 1024
    assert done.returncode == 2, done.stderr[:300]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < MAX_ERROR_LINE, done.stderr[:300]
    assert lines[0].startswith(f"autotune: error: {path}: line ") and "aliases repeat more than" in lines[0]
    assert "fix:" in lines[0]
    assert peak_mb < 400, f"the CLI peaked at {peak_mb:.0f} MB"  # an import of autotune: under 100 MB


def test_aliases_may_repeat_up_to_the_bound(tmp_path: Path) -> None:
    from autotune.yamlload import MAX_ALIAS_VALUES, AliasBomb, load_yaml

    block = "shared: &block [" + ", ".join(["v"] * 99) + "]\n"  # 100 values: the list and its 99 items
    uses = MAX_ALIAS_VALUES // 100
    within = block + "".join(f"use{i}: *block\n" for i in range(uses))
    assert len(load_yaml(within)) == uses + 1
    with pytest.raises(AliasBomb) as refused:
        load_yaml(within + "one_more: *block\n")
    assert refused.value.problem_mark.line == uses + 1  # the alias that crossed the bound
    shared = TINY.replace("max_num_seqs: {choices: [4, 16, 64, 128]", "max_num_seqs: {choices: &sizes [4, 16, 64, 128]")
    shared = shared.replace("max_concurrency: {choices: [16, 64]", "max_concurrency: {choices: *sizes")
    assert parse_space(shared).params["max_concurrency"].choices == [4, 16, 64, 128]  # a space sharing a list


LONG = "x" * 100_000


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["hardware"].update(gpus=LONG), "hardware.gpus"),  # pydantic's error echoes the input
        (lambda d: d["params"]["max_num_seqs"].update(default=LONG), "params.max_num_seqs.default"),
        (lambda d: d["engines"]["vllm"]["fixed"].update(max_num_seqs=[LONG] * 3), "fixed.max_num_seqs"),
        (lambda d: d["params"].update({LONG: {"choices": [1]}}), "params.xxx"),  # an unknown knob, as long as it is
    ],
    ids=["schema", "default", "knob value", "knob name"],
)
def test_an_error_echoes_a_long_value_cut(change, where: str, tmp_path: Path) -> None:
    document = yaml.safe_load(TINY)
    change(document)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(document, width=10**9))
    done = runner.invoke(app, ["space", "validate", str(path)])
    assert done.exit_code == 2, done.output[:300]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune: error: {path}: "), done.stderr[:300]
    what, fix = lines[0].split("; fix: ")
    assert fix
    assert where in what and len(what) < MAX_ERROR_LINE, f"{len(what)} characters: {what[:300]}"
    assert LONG[:200] not in lines[0]  # the fix names no value (an unknown knob's lists the knobs there are)


def test_a_document_nested_thousands_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(TINY + "\nnotes: " + "[" * 5000 + "]" * 5000 + "\n")
    done = runner.invoke(app, ["space", "validate", str(path)])
    assert done.exit_code == 2, done.output[:300]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and "nested too deep" in lines[0], lines[:3]
