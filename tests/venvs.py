"""A fresh venv for tests that install a package into one (the packaging tests, the engine plug-in test), offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def fresh_venv(path: Path, *extra: Path) -> Path:
    """A venv at ``path`` that sees this interpreter's packages (autotune's dependencies, setuptools, pip) and the
    ``extra`` directories, but not this interpreter's autotune unless ``extra`` holds the checkout; its python.

    A venv made from a venv inherits only the base interpreter's packages, so this one's site directories are listed
    in a .pth (whose own .pth files, an editable autotune's among them, are not run). No pip of its own: Python's
    bundled one would bring a setuptools too old to build wheels ahead of ours. Skips, saying why, where no venv can
    be made here."""
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot make a venv here: {made.stderr.strip()[-300:]}")
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    ours = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages")) and Path(entry).is_dir()]
    (Path(purelib) / "parent-site.pth").write_text("".join(f"{entry}\n" for entry in [*ours, *map(str, extra)]))
    return python
