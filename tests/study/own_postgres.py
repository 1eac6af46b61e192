"""A PostgreSQL server of a test's own, to stop and start (the shared one on 5432 is never touched)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_BIN_GLOB = "/usr/lib/postgresql/*/bin"


class OwnPostgres:
    """initdb + pg_ctl in a temporary directory on a free port, run as the ``postgres`` user (it refuses root)."""

    def __init__(self, bin_dir: Path, data: Path, port: int, as_user: list[str]) -> None:
        self.bin_dir, self.data, self.port, self.as_user = bin_dir, data, port, as_user
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _pg_ctl(self, *args: str) -> None:
        command = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args]
        subprocess.run([*self.as_user, *command], check=True, capture_output=True, timeout=90)

    def start(self) -> None:
        options = f"-p {self.port} -h 127.0.0.1 -k {self.data} -c fsync=off"
        self._pg_ctl("-l", str(self.data / "server.log"), "-o", options, "start")

    def stop(self) -> None:
        """As an administrator stops it: every connection is cut (``-m fast``)."""
        self._pg_ctl("-m", "fast", "stop")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A started server of this test's own (skipped, with the reason, where one cannot be made), removed after."""
    bins = sorted(glob.glob(_BIN_GLOB))
    if not bins:
        pytest.skip(f"no PostgreSQL server binaries ({_BIN_GLOB}) to start a server of the test's own")
    bin_dir = Path(bins[-1])
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root: run it as the postgres user
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        as_user = [runuser, "-u", "postgres", "--"]
    top = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    data = top / "data"
    try:
        if as_user:
            shutil.chown(top, "postgres")
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        server = OwnPostgres(bin_dir, data, _free_port(), as_user)
        server.start()
    except (subprocess.SubprocessError, OSError, LookupError) as exc:
        shutil.rmtree(top, ignore_errors=True)
        pytest.skip(f"cannot start a PostgreSQL of the test's own: {exc}")
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            server.stop()
        shutil.rmtree(top, ignore_errors=True)
