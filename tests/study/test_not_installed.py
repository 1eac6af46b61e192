"""An engine that is not installed stops `study run` after its first launch, with the fix on one line, and costs the
study no trial: after the fix, the next run runs the whole budget. The failure is classified from the launch alone
(``FailureKind.NOT_INSTALLED``): the engine's own package missing, or a program that cannot be executed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import FailureKind, LaunchFailed
from autotune.serving.seam import Launch
from tests.study.conftest import ENGINE, autotune, show, write_space

# what `python3 -m sglang.launch_server` and `import vllm` print where the package is missing
SGLANG_MISSING = ("/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
                  "(ModuleNotFoundError: No module named 'sglang')")  # fmt: skip
VLLM_MISSING = (
    "Traceback (most recent call last):\n  File \"/venv/bin/vllm\", line 5\nModuleNotFoundError: No module named 'vllm'"
)


@pytest.mark.parametrize(
    ("engine", "returncode", "log", "kind"),
    [
        ("sglang", 1, SGLANG_MISSING, FailureKind.NOT_INSTALLED),
        ("vllm", 1, VLLM_MISSING, FailureKind.NOT_INSTALLED),
        ("vllm", 1, "ImportError: ... No module named 'vllm._C'", FailureKind.NOT_INSTALLED),  # a broken install
        ("trtllm", 1, "ModuleNotFoundError: No module named 'tensorrt_llm'", FailureKind.NOT_INSTALLED),
        ("vllm", 127, "run-vllm.sh: line 2: vllm: command not found", FailureKind.NOT_INSTALLED),
        ("vllm", 126, "run-vllm.sh: line 2: /opt/vllm: cannot execute binary file: Exec format error",
         FailureKind.NOT_INSTALLED),
        # another package's module is the configuration's business (an attention kernel it chose), not the engine's
        ("vllm", 1, "ModuleNotFoundError: No module named 'flashinfer'", FailureKind.CRASH),
        ("transformers", 1, "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
         "the package flash_attn seems to be not installed", FailureKind.UNSUPPORTED),
        ("sglang", 1, "ModuleNotFoundError: No module named 'sglang_router'", FailureKind.CRASH),
    ],
)  # fmt: skip
def test_a_missing_engine_is_told_from_a_configuration_failure(engine, returncode, log, kind) -> None:
    assert get_engine(engine).classify_failure(returncode, log) is kind


def test_the_module_of_a_python_m_command_is_the_engine_itself() -> None:
    engine = get_engine("vllm", [sys.executable, "-m", "my_vllm_fork.serve"])
    assert engine.classify_failure(1, "python: No module named my_vllm_fork.serve") is FailureKind.NOT_INSTALLED


def test_a_program_that_cannot_be_executed_fails_the_launch_as_not_installed(tmp_path) -> None:
    program = tmp_path / "vllm"
    program.write_bytes(b"\x7fELF not for this machine")  # executable bit, but no format the kernel runs
    program.chmod(0o755)
    launch = Launch(get_engine("vllm", [str(program)]), ServerConfig(engine="vllm", model="m"), tmp_path / "trial")
    with pytest.raises(LaunchFailed) as failed, launch:
        pass
    assert failed.value.kind is FailureKind.NOT_INSTALLED and "Exec format error" in failed.value.reason
    assert "Exec format error" in launch.log_path.read_text()


def _missing_vllm(tmp_path: Path) -> str:
    """An --executable whose every launch fails as a `vllm` entry point does where the package is missing."""
    script = tmp_path / "vllm_cli.py"
    script.write_text(f"import sys\nprint({VLLM_MISSING!r}, file=sys.stderr)\nsys.exit(1)\n")
    return f"{sys.executable} {script}"


def test_study_stops_after_the_first_launch_and_a_rerun_after_the_fix_runs_the_whole_budget(tmp_path, studies) -> None:
    space = write_space(tmp_path)
    done = autotune("study", "run", str(space), "--n-trials", "4", "--seed", "1", "--executable", _missing_vllm(tmp_path),
                    studies=studies)  # fmt: skip
    assert done.returncode == 1, done.stderr
    # stderr also has the progress lines (plain, off a terminal); the failure itself is one line, no traceback
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("autotune: error:")]
    assert "Traceback" not in done.stderr
    assert error.startswith("autotune: error: trial 0: engine vllm cannot start here (engine exited with code 1: ")
    assert "No module named 'vllm'" in error and "fix: pip install vllm where `" in error
    assert error.endswith(f"log: {studies / 'scripted' / 'trials' / '0' / 'server.log'}")
    trials = show("scripted", studies)["trials"]
    # the baseline's launch does not count; the baseline is queued again, for the run after the fix
    assert [(t["state"], t["launched"], t["baseline"]) for t in trials] == [
        ("FAIL", True, True),
        ("WAITING", False, True),
    ]

    # the fix: an executable that starts (the scripted engine, by this interpreter: PATH's python may lack autotune)
    rerun = autotune("study", "run", str(space), "--n-trials", "4", "--seed", "1", "--executable", ENGINE,
                     studies=studies)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    shown = show("scripted", studies)
    trials = shown["trials"]
    assert shown["budget"]["launches"] == 4  # the whole budget: the failed launch of the missing engine not counted
    assert sum(t["launched"] for t in trials if t["state"] == "COMPLETE") == 4
    assert any(t["baseline"] and t["values"] for t in trials)  # the baseline was measured after all
