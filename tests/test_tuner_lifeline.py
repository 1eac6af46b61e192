"""A process that called ``die_with(pid)`` dies when that process does, even when it is not its parent (a study
worker's parent is multiprocessing's fork server, which a SIGKILLed tuner leaves running)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap

from tests.conftest import REPO

WATCHER = "import os, sys, time\nfrom autotune.search.tuner_lifeline import die_with\n" \
    "die_with(int(sys.argv[1]))\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n"  # fmt: skip


def test_a_worker_dies_when_the_tuner_it_watches_is_killed() -> None:
    # the tuner starts the worker through an intermediate process, as run_node does through the fork server
    tuner_code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        middle = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)"]
        subprocess.Popen(middle + [sys.executable, "-c", {WATCHER!r}, str(os.getpid())])
        time.sleep(600)
    """)
    tuner = subprocess.Popen([sys.executable, "-c", tuner_code], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
    try:
        worker = int(tuner.stdout.readline())  # it watches the tuner from here on
        watched = os.pidfd_open(worker)
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait()
        readable, _, _ = select.select([watched], [], [], 60)  # the worker's exit is the event; 60 s only bounds a hang
        assert readable, "the worker outlived the tuner it watches"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the intermediate process (and the worker, where it failed)
            os.killpg(tuner.pid, signal.SIGKILL)


def test_a_worker_whose_tuner_is_already_gone_exits_at_once() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    done = subprocess.run([sys.executable, "-c", WATCHER, str(gone.pid)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 1 and not done.stdout
