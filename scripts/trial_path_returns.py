"""Count how often the `study run` path climbs back into an autotune module it already stands in.

    .venv/bin/python scripts/trial_path_returns.py [--n-trials 3] [--space quickstart]

Runs `autotune study run SPACE --n-trials N` in this process (in a temporary studies directory) under a profiler that
keeps, for the main thread, the stack of autotune modules whose functions are running. A *return* is a call from
module B into module A while A is already on the stack below B (A called B, directly or through others, and B now
calls back up into A): the path leaves a module and comes back to it. Printed: the number of distinct (B -> A) returns,
each one, and the modules the path entered. Callbacks registered with a library (Optuna calling the objective) are
not returns, because the library's frames are not autotune's and the objective's module is not yet on the stack.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class ModuleStack:
    """The profiler hook: a stack of (frame, module) for autotune frames, and the returns seen."""

    def __init__(self) -> None:
        self.frames: list[tuple[object, str]] = []
        self.returns: dict[tuple[str, str], int] = {}
        self.entered: set[str] = set()

    def __call__(self, frame, event, _arg):  # noqa: ANN001 - sys.setprofile's signature
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("autotune"):
            return
        if event == "call":
            self._enter(frame, module)
        elif self.frames and self.frames[-1][0] is frame:
            self.frames.pop()

    def _enter(self, frame, module: str) -> None:  # noqa: ANN001
        self.entered.add(module)
        if self.frames:
            caller = self.frames[-1][1]
            below = {m for _, m in self.frames[:-1]}
            if module != caller and module in below:
                self.returns[(caller, module)] = self.returns.get((caller, module), 0) + 1
        self.frames.append((frame, module))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-trials", type=int, default=3)
    parser.add_argument("--space", default="quickstart")
    args = parser.parse_args()
    from autotune.cli import app

    stack = ModuleStack()
    with tempfile.TemporaryDirectory() as studies:
        os.environ["AUTOTUNE_STUDIES_DIR"] = studies
        sys.setprofile(stack)
        threading.setprofile(None)
        with contextlib.suppress(SystemExit):
            app(["study", "run", args.space, "--n-trials", str(args.n_trials), "--study", "returns"])
        sys.setprofile(None)
    print(f"returns: {len(stack.returns)} distinct (module -> module it climbs back into)")
    for (caller, callee), n in sorted(stack.returns.items()):
        print(f"  {caller} -> {callee}  ({n} calls)")
    print(f"autotune modules entered: {len(stack.entered)}")


if __name__ == "__main__":
    main()
