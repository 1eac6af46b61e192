"""Printed commands can be pasted: `study run`'s summary, `study best`, the HTML report and the dashboard note all
serve on --port 8000 (never the trial's own port); a knob that names a file (a chat template) is checked by
`autotune doctor` (a problem, with the fix) and flagged by `study best` ("this file must exist on the node"). Every
`autotune ...` command an error, a printed hint or a help text suggests parses against the CLI's command tree, and
every option a fix names exists. A study measured on CPU gets no `docker run --gpus all` of a GPU image, but a line
saying why (the `vllm bench serve` line: tests/test_printed_vllm_bench.py)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import typer
import typer.main
import yaml

from autotune.cli import app
from autotune.cli.run_summary import resume_hint
from autotune.config import ServerConfig
from autotune.engines import ENGINES, get_engine
from autotune.engines.image import ContainerImage
from autotune.evidence.export import container_text, docker_run, no_image_line, ran_on_cpu
from autotune.evidence.notes import trial_note
from autotune.evidence.report import render_html
from autotune.evidence.reproduce import DEFAULT_PORT
from autotune.records import StudyIdentity, write_study
from autotune.space.schema import Objective
from tests.conftest import REPO
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


# -- every `autotune ...` command the source suggests parses (issue #51, item 6) ------------------------------------
# A suggestion is a backticked `autotune ...` in a string of the package (an error, a printed hint, a help text) or
# what follows "fix:" / "next:". Inside a `raise` or a `print` it must parse, required options and arguments present,
# with its placeholders (NAME, N, an f-string's field) given a value. Elsewhere (help prose, a comment written into a
# file) a bare command path, or a path and one option name, is a mention ("the `autotune bench` line"): it need only
# name a real command and option.

SUGGESTION = re.compile(r"`(autotune [^`]*)`|(?:fix|next): (autotune [^;`\n)]*)")
PLACEHOLDER = re.compile(r"\{\}|[A-Z][A-Z0-9_]*")  # an f-string's field, NAME, N, THIS_FILE
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ENGINE_FLAG = re.compile(r"--[a-z][a-z0-9-]* in extra_args")  # a fix's engine flag, not one of autotune's
ROOT = typer.main.get_command(app)
_click_errors = sys.modules[typer.BadParameter.__module__]  # click's, or the copy recent typer carries


@dataclass(frozen=True)
class Suggestion:
    where: str  # file:line, or the command whose help says it
    command: str  # as written, an f-string's fields as {}
    must_run: bool  # in an error or a printed hint (not a mention in prose)

    def __str__(self) -> str:
        return f"{self.where}: {self.command}"


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _prints_or_raises(node: ast.AST) -> bool:
    if isinstance(node, ast.Raise):
        return True
    function = node.func if isinstance(node, ast.Call) else None
    return getattr(function, "id", getattr(function, "attr", None)) in ("print", "echo")


def source_suggestions() -> list[Suggestion]:
    """Every suggested command in the package's strings (docstrings aside: a command's is its help, read below)."""
    return [found for path in sorted((REPO / "autotune").rglob("*.py")) for found in _file_suggestions(path)]


def _file_suggestions(path: Path) -> list[Suggestion]:
    tree = ast.parse(path.read_text())
    docstrings = {id(body[0].value) for node in ast.walk(tree) if (body := getattr(node, "body", None))
                  and isinstance(body, list) and isinstance(body[0], ast.Expr)}  # fmt: skip
    skipped = docstrings | {
        id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values
    }
    found = []

    def visit(node: ast.AST, must_run: bool) -> None:
        text = None if id(node) in skipped else _text(node)
        for match in SUGGESTION.finditer(text or ""):
            command = (match[1] or match[2]).strip()
            found.append(Suggestion(f"{path.relative_to(REPO)}:{node.lineno}", command, must_run))
        for child in ast.iter_child_nodes(node):
            visit(child, must_run or _prints_or_raises(node))

    visit(tree, False)
    return found


def help_suggestions(command=ROOT, path: tuple[str, ...] = ("autotune",)) -> list[Suggestion]:
    """Every suggested command in the CLI's help: each command's and each option's."""
    texts = [command.help or "", *(getattr(param, "help", None) or "" for param in command.params)]
    found = [Suggestion(" ".join(path) + " --help", (m[1] or m[2]).strip(), False)
             for text in texts for m in SUGGESTION.finditer(text)]  # fmt: skip
    for name in getattr(command, "commands", {}):
        found += help_suggestions(command.get_command(None, name), (*path, name))
    return found


def option_names(command) -> set[str]:
    return {name for param in command.params for name in (*param.opts, *getattr(param, "secondary_opts", ()))}


def parse_problem(command: str, must_run: bool) -> str | None:
    """Why ``command`` would not run as written (placeholders given a value), or None: it names a real command and
    real options, and, where it ``must_run`` or says more than a mention, the CLI's parser accepts it."""
    words = [PLACEHOLDER.sub("1", word) if PLACEHOLDER.fullmatch(word) else word for word in shlex.split(command)]
    cli, path, rest = ROOT, ["autotune"], words[1:]
    while hasattr(cli, "get_command"):
        if not rest:
            return "names a group of commands, no command"
        sub = cli.get_command(None, rest[0])
        if sub is None:
            return f"no command {rest[0]!r} in `{' '.join(path)}`"
        cli, path, rest = sub, [*path, rest[0]], rest[1:]
    unknown = [word for word in rest if word.startswith("-") and word not in {*option_names(cli), "--help"}]
    if unknown:
        return f"no option {unknown[0]} of `{' '.join(path)}`"
    mention = len(rest) <= 1 and all(word.startswith("-") for word in rest)
    if "--help" in rest or (mention and not must_run):
        return None
    try:
        cli.make_context(" ".join(path), rest)
    except _click_errors.ClickException as exc:  # typer.Exit (--help) is not one: it cannot reach here
        return exc.format_message()
    return None


SUGGESTIONS = source_suggestions() + help_suggestions()


def test_the_scan_finds_the_suggestions_errors_and_help_make() -> None:
    """The extraction itself: hints in errors, printed hints and help texts are found, f-strings included."""
    found = {(s.command, s.must_run) for s in SUGGESTIONS}
    assert ("autotune study list --storage URL", True) in found  # an error's fix (autotune.cli.options)
    assert ("autotune study show --study {} --trial N", True) in found  # a printed hint with a field
    assert ("autotune space list", False) in found  # an option's help
    assert any(s.where.startswith("autotune/cli/best_view.py") for s in SUGGESTIONS)  # the example
    assert len(SUGGESTIONS) >= 30


@pytest.mark.parametrize(
    ("command", "must_run", "problem"),
    [
        ("autotune study show NAME", True, "unexpected extra argument"),  # the hint of issue #51 (exit 2)
        ("autotune space show", True, "Missing argument"),
        ("autotune study upgrade --study OLD --space PATH", True, "no option --space"),
        ("autotune stuudy list", False, "no command 'stuudy'"),
        ("autotune study", False, "names a group"),
        ("autotune bench --tokenizer", False, None),  # a mention of an option, in prose
        ("autotune bench", True, "Missing option '--base-url'"),  # the same as an instruction
        ("autotune study show --study NAME --trial N", True, None),
    ],
)
def test_the_check_refuses_what_the_cli_refuses(command: str, must_run: bool, problem: str | None) -> None:
    found = parse_problem(command, must_run)
    assert (found is None) if problem is None else (found is not None and problem in found), found


@pytest.mark.parametrize("suggestion", SUGGESTIONS, ids=str)
def test_every_suggested_autotune_command_parses(suggestion: Suggestion) -> None:
    assert parse_problem(suggestion.command, suggestion.must_run) is None, str(suggestion)


def test_the_commands_study_run_prints_parse(finished) -> None:
    """What `study run` prints once done ("next: autotune study best --study NAME · ..."), and on an interrupt, are
    built at run time: read from its real output and from the hint, each must run."""
    _, summary, _ = finished
    after = next(line for line in summary.splitlines() if line.startswith(("next: ", "see: ")))
    printed = [*after.split(": ", 1)[1].split(" · "), resume_hint("a-study", "sqlite:///a b.db").split(": ", 1)[1]]
    assert len(printed) == 4 and all(command.startswith("autotune ") for command in printed), printed
    assert [(command, parse_problem(command, must_run=True)) for command in printed] == [(c, None) for c in printed]


def test_every_option_a_fix_names_exists() -> None:
    """A fix that names an option (``fix: --study NAME``) names one the CLI has (an error once said ``--space``)."""
    options = {"--help"}

    def collect(command) -> None:
        options.update(option_names(command))
        for name in getattr(command, "commands", {}):
            collect(command.get_command(None, name))

    collect(ROOT)
    named = []
    for path in sorted((REPO / "autotune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for fix in re.findall(r"fix: (.*)", _text(node) or ""):
                # not autotune's options: another program's command (`hf download ...`), an engine's flag
                own = ENGINE_FLAG.sub("", re.sub(r"`(?!autotune )[^`]*`", "", fix))
                if "pip install" not in own:
                    named += [(f"{path.relative_to(REPO)}:{node.lineno}", o) for o in OPTION.findall(own)]
    assert len(named) >= 20
    assert [(where, option) for where, option in named if option not in options] == []


# -- a study measured on CPU: no `docker run --gpus all` of a GPU image ----------------------------------------------
CPU_LINE = ("# no docker run line: this configuration ran on CPU (gpus: 0) and vllm's official image "
            "(vllm/vllm-openai:v0.32.0) is a GPU build; run the launch command above on the node")  # fmt: skip


def test_study_best_of_a_cpu_study_prints_no_gpu_container_line(finished) -> None:
    studies, _, _ = finished  # the scripted space: hardware {gpus: 0}
    printed = autotune("study", "best", studies=studies)
    assert printed.returncode == 0, printed.stderr
    assert not any(line.startswith("docker run ") for line in printed.stdout.splitlines())
    assert "--gpus" not in printed.stdout
    assert printed.stdout.splitlines()[-1] == CPU_LINE
    assert autotune("study", "best", "--docker", studies=studies).stdout.splitlines() == [CPU_LINE]
    assert json.loads(autotune("study", "best", "--json", studies=studies).stdout)["docker"] is None


@pytest.mark.parametrize("engine", sorted(name for name in ENGINES if get_engine(name).image is not None))
def test_a_gpu_image_has_no_docker_run_for_a_cpu_configuration(engine: str) -> None:
    config = ServerConfig(engine=engine, model="m")
    assert docker_run(config, [], on_cpu=True) is None
    assert "--gpus all" in docker_run(config, [])  # the GPU study's line is as it was
    why = no_image_line(config)
    assert container_text(config, [], on_cpu=True) == why
    assert (
        "ran on CPU (gpus: 0)" in why and get_engine(engine).image.reference(get_engine(engine).version(config)) in why
    )


def test_an_image_that_is_not_a_gpu_build_runs_a_cpu_configuration_without_gpus() -> None:
    cpu_image, gpu_image = ContainerImage("cpu:{version}", gpu=False), ContainerImage("gpu:{version}")
    assert cpu_image.serves(on_cpu=True) and cpu_image.docker_options == []
    assert not gpu_image.serves(on_cpu=True) and gpu_image.serves(on_cpu=False)
    assert gpu_image.docker_options == ["--gpus", "all"]


@pytest.mark.parametrize(("hardware", "on_cpu"), [({"gpus": 0}, True), ({"gpus": 8, "gpu": "H200"}, False),
                                                  ({}, False), (None, False)])  # fmt: skip
def test_ran_on_cpu_reads_the_hardware_the_study_recorded(hardware: dict | None, on_cpu: bool) -> None:
    study = optuna.create_study()
    if hardware is not None:
        write_study(study, identity=StudyIdentity(hardware=hardware))
    assert ran_on_cpu(study) is on_cpu  # no record (an older study): taken as a GPU one, printed as it was
