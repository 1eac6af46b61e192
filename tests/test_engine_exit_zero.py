"""Issue #51 item 9: an engine that exits 0 at start-up gives a reason, not ``engine exited with code 0: ``."""

from __future__ import annotations

from autotune.errors import ServerCrashed


def test_an_engine_that_exits_0_with_an_empty_log_says_why_it_is_a_failure() -> None:
    message = str(ServerCrashed(0, ""))
    assert message.startswith("engine exited with code 0 before it was ready (it did not start a server")
    assert "--help or --version" in message and message.endswith("its log is empty")


def test_an_engine_that_exits_0_keeps_its_last_log_line() -> None:
    message = str(ServerCrashed(0, "usage: vllm serve [-h] model\n\n"))
    assert "before it was ready" in message and message.endswith(": usage: vllm serve [-h] model")


def test_a_crash_keeps_its_code_and_last_line() -> None:
    assert str(ServerCrashed(1, "Traceback\nValueError: bad\n")) == "engine exited with code 1: ValueError: bad"
