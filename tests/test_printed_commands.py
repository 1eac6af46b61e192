"""Printed commands can be pasted: `study run`'s summary, `study best`, the HTML report and the dashboard note all
serve on --port 8000 (never the trial's own port); a knob that names a file (a chat template) is checked by
`autotune doctor` (a problem, with the fix) and flagged by `study best` ("this file must exist on the node")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config import ServerConfig
from autotune.evidence.notes import trial_note
from autotune.evidence.report import render_html
from autotune.evidence.reproduce import DEFAULT_PORT
from autotune.space.schema import Objective
from tests.study.conftest import ENGINE, autotune, write_space

TEMPLATE = "./templates/missing-chat-template.jinja"


def template_space(tmp_path: Path) -> Path:
    """The scripted space with a chat template (the scripted engine ignores the flag), one launch configuration."""
    path = write_space(tmp_path, params={"max_num_seqs": {"choices": [8], "default": 8}})
    space = yaml.safe_load(path.read_text())
    space["engines"]["vllm"]["fixed"]["chat_template"] = TEMPLATE
    space["engines"]["vllm"]["executable"] = [sys.executable, "-m", "autotune.testing.scripted"]
    space["workload"]["num_prompts"] = 8
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, str, Path]:
    """A one-trial study of the template space: its studies directory, `study run`'s output and the space."""
    tmp_path = tmp_path_factory.mktemp("printed")
    space, studies = template_space(tmp_path), tmp_path / "studies"
    node = tmp_path / "node"  # where the study runs: the template is there (study run checks it before a launch)
    (node / TEMPLATE).parent.mkdir(parents=True)
    (node / TEMPLATE).write_text("{{ messages }}")
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(studies), "AUTOTUNE_HEARTBEAT_S": "1"}
    done = subprocess.run([sys.executable, "-m", "autotune", "study", "run", str(space), "--n-trials", "1",
                           "--executable", ENGINE], cwd=node, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return studies, done.stdout, space


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`autotune doctor` run from ``cwd`` (where a study would start: relative paths are looked for there)."""
    env = os.environ | {"AUTOTUNE_STUDIES_DIR": str(cwd / "studies")}
    return subprocess.run([sys.executable, "-m", "autotune", "doctor", *args, "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _trial_port(studies: Path) -> str:
    study = optuna.load_study(study_name="scripted", storage=f"sqlite:///{studies / 'scripted.db'}")
    argv = study.trials[0].user_attrs["launch"]["argv"]
    return argv[argv.index("--port") + 1]


def test_study_run_summary_report_and_note_print_port_8000(finished) -> None:
    studies, summary, _ = finished
    trial_port = _trial_port(studies)
    assert trial_port != str(DEFAULT_PORT)  # the trial served on a port picked at run time
    launch = next(line for line in summary.splitlines() if "autotune.testing.scripted serve" in line)
    assert f"--port {DEFAULT_PORT}" in launch and f"--port {trial_port}" not in summary, summary
    study = optuna.load_study(study_name="scripted", storage=f"sqlite:///{studies / 'scripted.db'}")
    best = study.trials[0]
    html = render_html(study, best)
    command = html[html.index("<pre id='best-command'>") :].split("</pre>")[0]
    assert f"--port {DEFAULT_PORT}" in command and f"--port {trial_port}" not in command
    note = trial_note(best, Objective())
    assert f"--port {DEFAULT_PORT}" in note and f"--port {trial_port}" not in note
    assert f"this file must exist on the node: {TEMPLATE}" in summary


def test_study_best_flags_the_file_the_launch_reads(finished) -> None:
    studies, _, _ = finished
    printed = autotune("study", "best", studies=studies)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    flag = lines.index(f"# this file must exist on the node: {TEMPLATE} (chat_template)")
    # the launch reads the file where the study ran (an absolute path once it was found there)
    assert "--chat-template /" in lines[flag + 1] and f"{TEMPLATE.removeprefix('.')} " in lines[flag + 1]
    assert f"--port {DEFAULT_PORT}" in lines[flag + 1]
    as_json = json.loads(autotune("study", "best", "--json", studies=studies).stdout)
    assert as_json["files_needed"] == {"chat_template": TEMPLATE}


def test_doctor_reports_a_missing_file_with_the_fix_and_finds_it_once_there(finished, tmp_path) -> None:
    _, _, space = finished
    missing = doctor(str(space), cwd=tmp_path)
    checks = [c for c in json.loads(missing.stdout)["checks"] if TEMPLATE in c["detail"]]
    assert len(checks) == 1 and not checks[0]["ok"], missing.stdout
    assert "no such file; fix: put it at" in checks[0]["detail"] and "vllm chat_template" in checks[0]["detail"]
    assert missing.returncode == 1 and TEMPLATE in missing.stderr  # a real launch cannot start without it
    workdir = tmp_path / "node"
    (workdir / "templates").mkdir(parents=True)
    (workdir / TEMPLATE).write_text("{{ messages }}")
    found = doctor(str(space), cwd=workdir)
    check = next(c for c in json.loads(found.stdout)["checks"] if TEMPLATE in c["detail"])
    assert check["ok"] and check["detail"].endswith("found")


def test_doctor_flags_the_shipped_deepseek_spaces_template(tmp_path) -> None:
    done = doctor("deepseek-v32-h200x8", cwd=tmp_path)
    check = next(c for c in json.loads(done.stdout)["checks"] if "tool_chat_template_deepseekv32.jinja" in c["detail"])
    assert not check["ok"] and "sglang chat_template" in check["detail"] and "fix:" in check["detail"]
    assert done.returncode == 1


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("./t.jinja", True),
        ("templates/chat", True),
        ("t.JINJA", True),
        ("chatml", False),
        ("llama-2", False),
        ("{{ messages[0].content }}", False),
        ("a/{{ x }}", False),
    ],
)
def test_which_values_name_a_file(value: str, names: bool) -> None:
    from autotune.config import FILE_KNOBS, names_a_file  # the one place that says which knobs name files

    assert FILE_KNOBS == ("chat_template",)
    assert (names_a_file("chat_template", value) == value) is names
    assert names_a_file("model", "./weights.json") is None  # the model is a hub id or a directory, not this rule
    config = ServerConfig(engine="vllm", model="m", chat_template=value)
    assert config.files_needed() == ({"chat_template": value} if names else {})
