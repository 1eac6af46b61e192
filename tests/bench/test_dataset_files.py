"""A workload's file is read bounded and checked early: a missing file, a directory, a device, a binary or an empty
file, a record over the bound or not a record is one line naming the file (and the line), from the reader, from
``space validate`` and from ``bench``, before anything is sent or launched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.bench.datasets import build_requests, check
from autotune.cli import app
from autotune.errors import UsageError
from autotune.serving.process import free_port
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Workload
from tests.conftest import REPO, SPACES

runner = CliRunner()
HUGE = 10 * 2**30  # a sparse file of this size holds no data on disk
RSS_LIMIT_KIB = 2**20  # 1 GiB: the tuner's peak resident memory while reading any of them
ADDRESS_SPACE_LIMIT = 3 * 2**30  # the child's cap, so that a reader that does hold the file fails instead of the host


def bad_file(tmp_path: Path, case: str) -> Path:
    """A file (or not) that gives no prompts, for each way a workload's path can be wrong."""
    path = tmp_path / "prompts.jsonl"
    if case == "missing":
        return path
    if case == "directory":
        path.mkdir()
    elif case == "binary":
        path.write_bytes(b'{"prompt": "ok"}\n' + bytes(range(128, 256)) * 8)  # a gzip or a model file, say
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "device":
        return Path("/dev/zero")
    elif case == "not records":
        path.write_text('{"prompt": "fine"}\n{"prompt": 5}\n')
    return path


CASES = {  # the case, and what its one line says
    "missing": "No such file",
    "directory": "is a directory",
    "binary": "prompts.jsonl:2: not UTF-8",
    "empty": "holds no prompts",
    "device": "not a regular file",
    "not records": "prompts.jsonl:2: not a JSON object with a 'prompt'",
}


@pytest.mark.parametrize("case", [case for case in CASES if case != "missing"])  # a missing one always was
def test_the_reader_refuses_a_file_that_gives_no_prompts(case, tmp_path) -> None:
    workload = Workload(dataset="jsonl", path=str(bad_file(tmp_path, case)), num_prompts=4)
    with pytest.raises(UsageError, match=CASES[case]):
        check(workload)
    with pytest.raises(UsageError, match=CASES[case]):
        build_requests(workload, word_tokenizer())


@pytest.mark.parametrize(
    ("items", "fragment"),
    [([{"conversations": []}, 7], "s.json:1: not a conversation"),
     ([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt"}]}], 's.json:1: a turn without a text "value"'),
     ([{"conversations": [{"value": "one turn"}]}], "holds no prompts")],
)  # fmt: skip
def test_sharegpt_items_that_are_not_conversations_are_named(items, fragment, tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(items))
    with pytest.raises(UsageError, match=fragment):
        check(Workload(dataset="sharegpt", path=str(path)))


def test_a_sharegpt_file_that_is_not_utf8_names_its_line(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b'[{"conversations": []},\n {"conversations": [{"value": "\xff\xfe"}]}]')
    with pytest.raises(UsageError, match="s.json:2: not UTF-8"):
        check(Workload(dataset="sharegpt", path=str(path)))


_READ = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from autotune.bench.datasets import build_requests, check
from autotune.sim.words import word_tokenizer
from autotune.space.schema import Workload
workload = Workload(dataset=sys.argv[1], path=sys.argv[2], num_prompts=10)
errors = []
for read in (lambda: check(workload), lambda: build_requests(workload, word_tokenizer())):
    try:
        read()
        errors.append(None)
    except BaseException as exc:  # MemoryError included: what a reader that holds the file hits at the cap
        errors.append(f"{{type(exc).__name__}}: {{exc}}")
print(json.dumps({{"errors": errors, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


@pytest.mark.parametrize(
    ("dataset", "start", "fragment"),
    [("jsonl", None, "not a regular file"),  # /dev/zero
     ("jsonl", b"", "huge:1: a line over 16 MiB"),
     ("sharegpt", b"", "huge:1: does not hold a JSON array"),
     ("sharegpt", b'[{"conversations": "', "huge:1: no whole JSON item within 16 MiB")],
)  # fmt: skip
def test_dev_zero_and_a_huge_sparse_file_are_refused_in_bounded_memory(dataset, start, fragment, tmp_path) -> None:
    if start is None:
        path = Path("/dev/zero")
    else:
        path = tmp_path / "huge"
        path.write_bytes(start)
        os.truncate(path, HUGE)  # the rest reads as zeros, without taking disk space
    done = subprocess.run([sys.executable, "-c", _READ.format(limit=ADDRESS_SPACE_LIMIT), dataset, str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for error in report["errors"]:
        assert error is not None and error.startswith("UsageError") and fragment in error, report
    assert report["peak_rss_kib"] < RSS_LIMIT_KIB, report


def jsonl_space(tmp_path: Path, dataset_path: Path) -> Path:
    space = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
    space["workload"] = {"dataset": "jsonl", "path": str(dataset_path), "num_prompts": 4}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_space_validate_refuses_a_workload_file_that_gives_no_prompts(case, tmp_path) -> None:
    space = jsonl_space(tmp_path, bad_file(tmp_path, case))
    done = runner.invoke(app, ["space", "validate", str(space)])
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.output, done.output
    assert lines[0].startswith(f"autotune: error: {space}: workload.path: ") and "fix:" in lines[0], lines[0]
    assert CASES[case] in lines[0]


@pytest.mark.parametrize("case", ["device", "empty", "binary"])
def test_bench_refuses_the_file_before_it_contacts_the_server(case, tmp_path) -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"  # were the server asked first, this would fail differently
    done = runner.invoke(app, ["bench", "--base-url", nothing_there, "--model", "m", "--dataset", "jsonl",
                               "--dataset-path", str(bad_file(tmp_path, case))])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert CASES[case] in done.stderr and "unreachable" not in done.stderr and "Traceback" not in done.output
