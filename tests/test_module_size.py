"""Modules stay under 400 lines (the brief's rule): a module that grows past it is split by what it does."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
LIMIT = 400


def test_every_module_of_the_package_is_under_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) >= LIMIT}  # fmt: skip
    assert long == {}, f"over {LIMIT} lines: {long}"
