"""The README and every page under docs/ show commands that work.

Every shell command in a ```bash or ```console block of README.md and docs/*.md that starts with `autotune` (after
`VAR=value` assignments, in any `&&` step, `.venv/bin/autotune` too) is checked, and so is each command of the
README's table of commands:

- Parsed, always: its subcommands exist in the CLI's command tree and every option it names is one of that command's.
  A synopsis line (`[--json | --docker]`) is parsed this way too. A command without placeholder syntax (`[`, `|`,
  `...`) is also run by the CLI itself with `--help` appended, which refuses an unknown command or option. One with a
  placeholder value (SPACE, NAME) is never run for real.
- Run for real, where it is cheap, offline and needs nothing a user makes first: `--version`, `knobs`, `space list`,
  `space show`, `space validate`, `command`, `init` and `dataset list`, in a temporary directory with an empty
  dataset cache and the hub offline. The quickstart (`study run` on the shipped simulated space) runs with its budget
  cut to 4 trials, and then the `study list/show/best/report` commands that read its study.
- Parsed only: whatever needs a GPU, an engine, a cluster, the network, a server or a study the reader made first
  (`doctor`, `study run` of another space, `study validate`, `study upgrade`, `bench`, `dataset fetch`, `dashboard`).

Also: the README stays short (at most 150 lines, its median sentence well under 25 words) and links every page.
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from autotune.cli import app
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(?:bash|console)\n(.*?)^```", re.S | re.M)
# `VAR=value` or `VAR=$(...)` before the program
ASSIGNMENTS = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=(?:\$\([^)]*\)|\S+)\s+)*")
PLACEHOLDER = re.compile(r"[\[\]|]|\.\.\.")  # synopsis syntax: what --help cannot be appended to
VALUE_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*")  # SPACE, NAME, N: parses, but is not a value to run with
TABLE_COMMAND = re.compile(r"^\| `(autotune [^`]*)` \|", re.M)  # the README's table of commands, first column

RUN_OFFLINE = {("--version",), ("knobs",), ("space", "list"), ("space", "show"), ("space", "validate"), ("command",),
               ("init",), ("dataset", "list")}  # fmt: skip
READ_THE_QUICKSTART = {("study", "list"), ("study", "show"), ("study", "best"), ("study", "report")}
QUICKSTART = "quickstart"
# documented to fail where a test runs them: (exit code, why)
EXPECTED_REFUSALS = {
    "space validate deepseek-v32-h200x8": (2, "its ShareGPT file (642 MB) is not in the test's empty dataset cache"),
}


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    args: tuple[str, ...]  # after `autotune`

    @property
    def text(self) -> str:
        return " ".join(self.args)

    @property
    def concrete(self) -> bool:
        return not any(PLACEHOLDER.search(arg) for arg in self.args)

    @property
    def runnable(self) -> bool:
        return self.concrete and not any(VALUE_PLACEHOLDER.fullmatch(arg) for arg in self.args)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: autotune {self.text}"


def _logical_lines(block: str) -> list[tuple[int, list[str]]]:
    """(offset of the first line, words) per command: comments dropped, `\\` and indented continuations joined."""
    joined: list[tuple[int, list[str]]] = []
    pending = False  # the previous line ended in a backslash
    for offset, raw in enumerate(block.splitlines()):
        line = raw.removeprefix("$ ")
        continued = line.rstrip().endswith("\\")
        words = shlex.split(line.rstrip().removesuffix("\\"), comments=True)
        if (pending or line[:1].isspace()) and joined:
            joined[-1][1].extend(words)
        elif words:
            joined.append((offset, words))
        pending = continued
    return joined


def _steps(words: list[str]) -> list[list[str]]:
    steps, current = [], []
    for word in words:
        if word in ("&&", "||", ";"):
            steps.append(current)
            current = []
        else:
            current.append(word)
    return [*steps, current]


def documented_commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in BLOCK.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            # assignments (`VAR=$(< file)`) are not words shlex keeps whole: strip them from the line first
            body = "\n".join(ASSIGNMENTS.sub("", line) for line in block.group(1).splitlines())
            for offset, words in _logical_lines(body):
                for step in _steps(words):
                    if step and Path(step[0]).name == "autotune":
                        found.append(DocCommand(str(page.relative_to(REPO)), first_line + offset, tuple(step[1:])))
        for row in TABLE_COMMAND.finditer(text):
            line = text.count("\n", 0, row.start()) + 1
            found.append(DocCommand(str(page.relative_to(REPO)), line, tuple(shlex.split(row.group(1))[1:])))
    return found


COMMANDS = documented_commands()
ROOT = typer.main.get_command(app)


def _resolve(args: tuple[str, ...]):
    """(the command the words name, its path, the words after the path), walking groups while a word names one."""
    ctx = ROOT.make_context("autotune", ["--help"], resilient_parsing=True)
    command, path, rest = ROOT, [], list(args)
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        if sub is None:  # a word that names no command: None, for the test of that command to report
            return None, (*path, rest[0]), rest[1:], ctx
        command, path, rest = sub, [*path, rest[0]], rest[1:]
    return command, tuple(path), rest, ctx


def _path(command: DocCommand) -> tuple[str, ...]:
    _, path, rest, _ = _resolve(command.args)
    return path or tuple(rest[:1])  # the root's own option (`--version`) names what runs


def _option_words(words: list[str]) -> set[str]:
    """The option names a command or synopsis line uses: `[--n-trials N | --more N]` names --n-trials and --more."""
    names = set()
    for word in words:
        for part in word.strip("[]").split("|"):
            part = part.strip("[]")
            if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", part):
                names.add(part.split("=", 1)[0])
    return names


def test_the_pages_show_the_commands_this_test_checks() -> None:
    """The extraction itself: it finds the README's commands, its continued lines and every page's blocks."""
    found = {c.text for c in COMMANDS}
    assert "study run" in found  # the set-up command's `.venv/bin/autotune study run`, and the quickstart
    init = next(c for c in COMMANDS if c.args[:1] == ("init",) and c.page == "README.md")
    assert init.args[-2:] == ("-o", "my.yaml") and "--slo" in init.args  # joined over its backslash
    assert "dashboard --study my-study" in found  # after `AUTOTUNE_STORAGE=$(< ...)` in docs/clusters.md
    synopsis = next(c for c in COMMANDS if c.page == "docs/studies.md" and c.args[:2] == ("study", "run"))
    assert "--warm-start-storage" in _option_words(list(synopsis.args))  # the synopsis's continued lines
    assert all(not c.text.startswith("#") for c in COMMANDS)
    assert ("study", "upgrade", "--study", "OLD", "--version", "NEW") in {c.args for c in COMMANDS}  # the table's
    pages_with_commands = {c.page for c in COMMANDS}
    assert {"README.md", "docs/studies.md", "docs/spaces.md", "docs/workloads.md"} <= pages_with_commands


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_every_documented_command_and_option_exists(command: DocCommand) -> None:
    resolved, path, rest, ctx = _resolve(command.args)
    assert resolved is not None, f"{command}: no command `autotune {' '.join(path)}`"
    assert not hasattr(resolved, "get_command") or rest[:1] == ["--version"], f"{command}: names a group, no command"
    known = {name for param in resolved.get_params(ctx) for name in (*param.opts, *param.secondary_opts)}
    unknown = _option_words(rest) - known
    assert not unknown, f"{command}: no such option {sorted(unknown)} of `autotune {' '.join(path)}`"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.concrete], ids=str)
def test_every_concrete_documented_command_is_accepted_by_the_cli(command: DocCommand) -> None:
    done = CliRunner().invoke(app, [*command.args, "--help"])
    assert done.exit_code == 0, f"{command}: {done.output}{done.stderr}"


def _sandbox(tmp_path: Path) -> dict[str, str | None]:
    """A reader's fresh machine: studies and datasets under tmp_path, the hub offline; None unsets what the
    developer's shell may set (a storage URL, tracebacks instead of one-line errors)."""
    (tmp_path / "cache").mkdir(exist_ok=True)
    return {"AUTOTUNE_STUDIES_DIR": str(tmp_path / "studies"), "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
            "HF_HUB_OFFLINE": "1", "AUTOTUNE_DEBUG": None, "AUTOTUNE_STORAGE": None}  # fmt: skip


def _assert_ran_as_documented(command: DocCommand, done) -> None:
    expected, why = EXPECTED_REFUSALS.get(command.text, (0, ""))
    if expected == 0:
        assert done.exit_code == 0, f"{command}: exit {done.exit_code}: {done.output}{done.stderr}"
        return
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == expected and len(lines) == 1 and "fix:" in lines[0], f"{command} ({why}): {done.stderr}"


OFFLINE = [c for c in COMMANDS if c.runnable and _path(c) in RUN_OFFLINE]


@pytest.mark.parametrize("command", OFFLINE, ids=str)
def test_cheap_documented_commands_run(command: DocCommand, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, list(command.args), env=_sandbox(tmp_path))
    _assert_ran_as_documented(command, done)


def test_the_commands_run_here_cover_every_page_that_has_them() -> None:
    """The offline set is not empty by accident: the README's, the spaces page's and the workloads page's run."""
    assert {"README.md", "docs/spaces.md", "docs/workloads.md"} <= {c.page for c in OFFLINE}
    assert set(EXPECTED_REFUSALS) <= {c.text for c in OFFLINE}  # a refusal documented and still shown


def _runs_the_quickstart(command: DocCommand) -> bool:
    if _path(command) != ("study", "run"):
        return False
    positional = [a for a in command.args[2:] if not a.startswith("-")]
    options = set(command.args[2:]) - {"--n-trials", *positional}
    return not options and (positional[:1] in ([], [QUICKSTART]))


@pytest.mark.slow
def test_the_quickstart_and_the_commands_that_read_its_study_run(tmp_path: Path, monkeypatch) -> None:
    quickstarts = [c for c in COMMANDS if _runs_the_quickstart(c)]
    assert {c.page for c in quickstarts} >= {"README.md", "docs/simulator.md"}
    env = {name: value for name, value in (os.environ | _sandbox(tmp_path)).items() if value is not None}
    # one run stands for them all (they name the same space); its budget cut to 4 trials keeps it short
    argv = [a for a in quickstarts[0].args if a != "--n-trials" and not a.isdigit()]
    done = subprocess.run([sys.executable, "-m", "autotune", *argv, "--n-trials", "4"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SIMULATED" in done.stdout + done.stderr

    monkeypatch.chdir(tmp_path)
    readers = [c for c in COMMANDS if c.runnable and _path(c) in READ_THE_QUICKSTART
               and ("--study" not in c.args or c.args[c.args.index("--study") + 1] == QUICKSTART)]  # fmt: skip
    assert {_path(c) for c in readers} == READ_THE_QUICKSTART
    for command in readers:
        _assert_ran_as_documented(command, CliRunner().invoke(app, list(command.args), env=_sandbox(tmp_path)))
    assert (tmp_path / "report.html").is_file()


README_LINES = 150
# a sentence ends at . ! or ? before a capital or code; a list item or a paragraph ends one too
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\[])")


def _prose_sentences(text: str) -> list[int]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    units, current = [], []
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        item = re.match(r"([-*]|\d+\.)\s+", stripped)
        if not stripped or stripped.startswith(("#", "|")) or item:
            units.append(" ".join(current))
            current = [stripped[item.end() :]] if item else []
        else:
            current.append(stripped)
    words = [len(s.split()) for unit in units for s in SENTENCE_END.split(re.sub(r"`[^`]*`", "X", unit))]
    return [n for n in words if n]


def test_the_readme_is_short_and_links_every_docs_page() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES, "move detail to a page under docs/ and link it"
    linked = {Path(target) for target in re.findall(r"\]\((docs/[^)#]+\.md)\)", text)}
    pages = {page.relative_to(REPO) for page in (REPO / "docs").glob("*.md")}
    assert pages - linked == set(), "link every docs page from the README's Documentation section"
    assert linked - pages == set(), "a README link names no page"
    assert statistics.median(_prose_sentences(text)) < 20


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    """.ci/run and the project's contract run these two lines exactly."""
    blocks = [b.group(1).strip() for b in BLOCK.finditer((REPO / "README.md").read_text())]
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/autotune study run" in blocks
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/pytest" in blocks
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/pytest"
        in (REPO / ".ci" / "run").read_text()
    )


def test_docs_links_between_pages_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).is_file():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []
