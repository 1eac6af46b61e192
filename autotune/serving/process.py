"""Launch an engine as a subprocess, wait until it serves, and always take it down again.

Hygiene (each rule learned the hard way on GPU nodes): the engine runs in its own session, so its whole process group
is killed (SIGTERM, then SIGKILL) and nothing outlives a trial; the port is checked free before launch and waited free
after; a readiness answer counts only while the started process is alive and serves the expected model (an orphan
from an earlier run once answered every health check on the same port); where GPUs exist, their memory must be
released before the next launch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from autotune.engines.base import Engine, LaunchSpec
from autotune.engines.readiness import Readiness
from autotune.errors import AutotuneError, EngineNotInstalled, ServerCrashed, ServerStartTimeout
from autotune.text import shorten

log = logging.getLogger(__name__)
_POLL_S = 0.5
_STOP_GRACE_S = 20.0
_LOG_TAIL_BYTES = 8000
_GPU_POLL_S = 0.5
# how long an engine may take to answer its version command: long enough for vLLM importing torch on a loaded host
PROOF_TIMEOUT_S = 120.0
_VERSION = re.compile(r"\d+\.\d+[\w.+-]*")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class StartProof:
    """Whether an engine's command was proven to start here: ``ok`` with its version, or ``detail`` says why not
    (``timed_out``: it did not answer in time, which proves nothing either way)."""

    ok: bool
    detail: str
    timed_out: bool = False


def program_missing(argv0: str) -> bool:
    """Whether the program of an engine's command is not there to run (not on PATH, or not an executable file)."""
    return (os.sep in argv0 and not os.access(argv0, os.X_OK)) or (os.sep not in argv0 and shutil.which(argv0) is None)


def prove_engine_starts(engine: Engine, env: Mapping[str, str] | None = None,
                        timeout_s: float | None = None) -> StartProof:  # fmt: skip
    """Run the engine's version command (``Engine.version_argv``: its ``--version``, or for ``PYTHON -m X`` whether
    that interpreter finds X) as a launch runs: same program, the launch's environment (``env`` on top of ours).
    Found on disk is no proof: ``python3 -m sglang.launch_server`` is found wherever python3 is."""
    argv, timeout_s = engine.version_argv(), timeout_s or PROOF_TIMEOUT_S
    if program_missing(argv[0]):
        return StartProof(False, f"{argv[0]} not found or not executable")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              env=os.environ | dict(env or {}))  # fmt: skip
    except subprocess.TimeoutExpired:
        what = f"{argv[0]} looking for {engine.module}" if engine.module is not None else f"`{shlex.join(argv)}`"
        return StartProof(False, f"{what} did not answer within {timeout_s:g} s", timed_out=True)
    except OSError as exc:
        return StartProof(False, f"{argv[0]}: {exc.strerror}")
    output = (done.stdout + done.stderr).splitlines()
    last = next((line for line in reversed(output) if line.strip()), "")
    if done.returncode != 0:
        what = (f"{argv[0]} cannot import {engine.module}" if engine.module is not None
                else f"`{shlex.join(argv)}` exited with code {done.returncode}")  # fmt: skip
        return StartProof(False, f"{what}: {shorten(last, 200)}")
    versions = [words[-1] for line in output if (words := line.split()) and _VERSION.fullmatch(words[-1])]
    return StartProof(True, f"version {versions[-1]}" if versions else "answers, version unknown")


def check_executable(engine: Engine, env: Mapping[str, str] | None = None) -> None:
    """Fail before any launch when the engine cannot start here: its program is missing, or (cheap to prove, so
    proven) a ``PYTHON -m X`` engine whose interpreter does not find X. Other commands are proven by their first
    launch, whose failure stops the study when it says the engine is not installed (``FailureKind.NOT_INSTALLED``).

    Raises:
        EngineNotInstalled: names the command, why it cannot start, and the fix.
    """
    argv0 = engine.executable[0]
    if program_missing(argv0):
        raise EngineNotInstalled(f"engine executable {argv0!r} not found or not executable; "
                                 f"{engine.not_installed_fix()}")  # fmt: skip
    if engine.module is not None:
        proof = prove_engine_starts(engine, env)
        if not proof.ok and not proof.timed_out:
            raise EngineNotInstalled(f"engine {engine.name} cannot start: {proof.detail}; "
                                     f"{engine.not_installed_fix()}")  # fmt: skip


def kill_group(pgid: int, grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM a process group, SIGKILL it after ``grace_s``; no error when it is already gone."""
    if not _is_group_id(pgid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _is_group_id(pgid: object) -> bool:
    # 0 would mean our own group to killpg, and 1 is init's: a corrupt or missing record must never reach killpg
    return isinstance(pgid, int) and not isinstance(pgid, bool) and pgid > 1 and pgid != os.getpgrp()


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (False for anything that is not another group's id)."""
    if not _is_group_id(pgid):
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader still counts as a member; look for a live one
    return any(_pgid_of(pid) == pgid and _state_of(pid) != "Z" for pid in _pids())


def group_record(pgid: int) -> dict:
    """What identifies a process group beyond its number: the machine's boot and the leader's start time.

    A restarted tuner (or another worker, possibly on another host of a PostgreSQL study) kills a dead worker's
    engine from this record; a group id alone could by then name another host's process, or a recycled one.
    """
    return {"pgid": pgid, "host": socket.gethostname(), "boot_id": _boot_id(), "started": _start_ticks(pgid)}


def recorded_group_alive(record: object) -> bool:
    """Whether the group of ``record`` (from ``group_record``) still runs on this machine, the same processes."""
    if not isinstance(record, dict) or record.get("boot_id") != _boot_id() or record.get("boot_id") is None:
        return False
    pgid = record.get("pgid")
    return _is_group_id(pgid) and _start_ticks(pgid) == record.get("started") and group_alive(pgid)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None when it is gone."""
    return _stat_int(pid, 19)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _pgid_of(pid: int) -> int | None:
    return _stat_int(pid, 2)


def _state_of(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from field 3 (state) on; empty when the process is gone. The name (field 2) may hold spaces
    and parentheses, so the fields start after its last ')'."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _stat_int(pid: int, index: int) -> int | None:
    fields = _stat_fields(pid)
    try:
        return int(fields[index])
    except (IndexError, ValueError):
        return None


def _listening_inodes(port: int) -> set[str]:
    """``socket:[inode]`` names of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    names = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                    names.add(f"socket:[{fields[9]}]")
    return names


def gpu_memory_used(gpus: Collection[str] | None = None) -> dict[str, int]:
    """Used memory (MiB) of each GPU (of ``gpus``, else all) by index, from nvidia-smi; empty where there is none."""
    if shutil.which("nvidia-smi") is None:
        return {}
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    used = {}
    for line in out.splitlines():
        index, _, mib = line.partition(",")
        if index.strip().isdigit() and mib.strip().isdigit() and (gpus is None or index.strip() in gpus):
            used[index.strip()] = int(mib)
    return used


def wait_gpus_released(before: dict[str, int], timeout_s: float = 120.0, margin_mib: int = 1024) -> bool:
    """Wait until every GPU uses no more than it did ``before`` the launch (plus a margin); True once it does.

    Relative to before, not to zero: memory another tenant held then is not ours to wait for; and only the GPUs of
    ``before``: another trial's GPUs on the node are not ours either.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        now = gpu_memory_used(tuple(before))
        held = {gpu: mib for gpu, mib in now.items() if mib > before.get(gpu, 0) + margin_mib}
        if not held:
            return True
        if time.monotonic() > deadline:
            log.warning("GPU memory still held after %.0f s (MiB by GPU: %s)", timeout_s, held)
            return False
        time.sleep(_GPU_POLL_S)


class ServerProcess:
    """One engine launch as a context manager.

    Args:
        spec: what to run (argv, env, files written into ``workdir`` first).
        workdir: the trial's directory: the engine runs there and logs to ``server.log``.
        port: the port ``spec`` serves on (must be free).
        ready: the engine's probe that it serves the expected model (``autotune.engines.readiness``).
        failed: given the log, the part of it that says the launch failed although the process still runs, else
            None (no callback: only an exit says so).
        headers: sent with every readiness probe (the launch's API key, the workload's custom headers).
        gpus: the GPUs (indexes) the launch may use, given to it as ``CUDA_VISIBLE_DEVICES``; None: as inherited.

    GPU memory (MiB by GPU index, where nvidia-smi exists) is read before the launch, once it is ready and after it
    stopped (``gpu_memory``), the last after waiting for the launch's memory to be released (``gpus_released``).
    """

    def __init__(self, spec: LaunchSpec, workdir: Path, port: int, ready: Readiness,
                 failed: Callable[[str], str | None] | None = None,
                 headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> None:  # fmt: skip
        self.spec, self.workdir, self.port, self.ready, self.failed = spec, workdir, port, ready, failed
        self.headers, self.gpus = dict(headers or {}), gpus
        self.log_path = workdir / "server.log"
        self.process: subprocess.Popen | None = None
        self.gpu_memory: dict[str, dict[str, int]] = {}
        self.gpus_released: bool | None = None

    @property
    def gpus_before(self) -> dict[str, int]:
        return self.gpu_memory.get("before", {})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pgid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> ServerProcess:
        if port_in_use(self.port):
            raise AutotuneError(f"port {self.port} is already in use before launch; another process would answer")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.gpu_memory = {"before": gpu_memory_used(self.gpus)}
        # by PCI bus, as nvidia-smi numbers them (CUDA's own order may differ): the GPUs leased are the GPUs used
        visible = {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if self.gpus else {}
        for name, content in self.spec.files.items():
            (self.workdir / name).write_text(content)
        with self.log_path.open("ab") as log_file:
            try:
                self.process = subprocess.Popen(self.spec.argv, cwd=self.workdir,
                                                env=os.environ | self.spec.env | visible, stdin=subprocess.DEVNULL,
                                                stdout=log_file, stderr=subprocess.STDOUT,
                                                start_new_session=True)  # fmt: skip
            except OSError as exc:
                # the program cannot be run at all: as a shell would say it (127 not found, 126 not executable)
                message = f"{self.spec.argv[0]}: {exc.strerror}"
                log_file.write(f"autotune: cannot execute {message}\n".encode())
                raise ServerCrashed(127 if exc.errno == errno.ENOENT else 126, message) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float) -> float:
        """Block until the engine's probe says it serves the expected model; returns the seconds it took.

        Raises:
            ServerCrashed: the process exited first.
            ServerStartTimeout: not ready within ``timeout_s``.
        """
        started, polls = time.monotonic(), 0
        with httpx.Client(base_url=self.base_url, timeout=5.0, headers=self.headers) as client:
            while time.monotonic() - started < timeout_s:
                if not self.alive():
                    raise ServerCrashed(self.process.returncode, self.log_tail())
                # the whole log: a failure message is soon buried under the answers to our own health polls
                if self.failed is not None and (evidence := self.failed(self.log_text())):
                    raise ServerCrashed(None, evidence)
                if self.ready(client) and self._owns_port():
                    self.gpu_memory["ready"] = gpu_memory_used(self.gpus)
                    return time.monotonic() - started
                # quick first looks for fast starters (the simulator), then no more than every _POLL_S
                time.sleep(min(_POLL_S, 0.05 * 1.5**polls))
                polls += 1
        raise ServerStartTimeout(f"engine not ready within {timeout_s:.0f} s")

    def _owns_port(self) -> bool:
        """True when a process of our group holds the listening socket (not an orphan answering on our port)."""
        if not self.alive():
            return False
        inodes = _listening_inodes(self.port)
        for pid in _pids():
            if _pgid_of(pid) != self.process.pid:
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                            return True
        return False

    def stop(self) -> None:
        """Kill the whole process group, reap it, and wait for the port (and GPUs) to be free."""
        if self.process is None:
            return
        kill_group(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        deadline = time.monotonic() + 30
        while port_in_use(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.gpus_before:
            self.gpus_released = wait_gpus_released(self.gpus_before)
            self.gpu_memory["after"] = gpu_memory_used(self.gpus)
