"""Errors and failure kinds.

Every error autotune raises on purpose derives from ``AutotuneError``; the CLI turns it into one line and an exit
code (``exit_code``), and ``AUTOTUNE_DEBUG=1`` shows the traceback instead. Below the CLI nothing raises
``ValueError``, ``KeyError``, ``SystemExit`` or another built-in exception on purpose, except where a protocol asks for
one (a pydantic validator, ``Mapping.__getitem__``, Optuna's storage API): tests/test_error_tree.py checks it::

    AutotuneError                 exit 1: a runtime problem
    ├── UsageError                exit 2: the user's input is wrong (bad flag value, unknown knob, unknown engine)
    │   └── SpaceError            exit 2: a search-space file is invalid; names the file, the key path and the fix
    ├── UnsupportedConfig         exit 1: a configuration breaks a static rule of its engine (names the rule)
    ├── EngineNotInstalled        exit 1: the engine cannot start on this machine for any configuration (names the fix)
    ├── EngineDefinitionError     exit 1: an engine adapter (a plug-in's, often) declares what autotune cannot use
    ├── LaunchFailed              a served configuration produced no measurement: its FailureKind, the engine's words
    │                             and its log's end (autotune.serving.seam; the trial records it, never the CLI)
    ├── ServerCrashed             the engine's process exited (or its log says it failed), with exit code and log tail
    ├── ServerStartTimeout        the engine's process did not become ready in time (it was killed)
    ├── StartupFailure            the simulator's model would not start a configuration: its FailureKind, the real
    │                             engine's message (the simulated launch turns it into LaunchFailed)
    └── HttpStreamError           one benchmark request failed (``error_type``: http_503, timeout, ...); the client
                                  records it in the request's result, it never ends a benchmark

``ServerCrashed`` and ``ServerStartTimeout`` come from ``autotune.serving.process.ServerProcess``; a launch turns them into
``LaunchFailed``. ``FailureKind`` is the taxonomy of why a server launch did not produce a measurement.
"""

from __future__ import annotations

from enum import StrEnum

from autotune.text import shorten

_PATH_WIDTH = 200  # characters of a key path in an error


class AutotuneError(Exception):
    """Root of all errors autotune raises on purpose."""

    exit_code = 1


class UsageError(AutotuneError):
    """The user's input cannot be used as given; the message says what to change."""

    exit_code = 2


class SpaceError(UsageError):
    """A search-space file is invalid.

    Args:
        source: the file (or ``<string>``) the space came from.
        path: the key path inside the file, dotted (``engines.vllm.params.max_num_seqs``), or a line/column.
        problem: what is wrong, with the bad value.
        fix: what to do about it.
    """

    def __init__(self, source: str, path: str, problem: str, fix: str) -> None:
        self.source, self.path, self.problem, self.fix = source, path, problem, fix
        where = f"{source}: {shorten(path, _PATH_WIDTH)}" if path else source  # its keys are the file's, any length
        super().__init__(f"{where}: {problem}; fix: {fix}")


class UnsupportedConfig(AutotuneError):
    """A configuration is known not to start (or not to mean what it says) on its engine.

    Args:
        rule: the name of the static rule it breaks.
        reason: why, in the engine's terms.
    """

    def __init__(self, rule: str, reason: str) -> None:
        self.rule, self.reason = rule, reason
        super().__init__(f"rejected by rule '{rule}': {reason}")


class EngineNotInstalled(AutotuneError):
    """The engine's command cannot start here, whatever the configuration: its program or its Python package is
    missing (``No module named 'sglang'``, ``command not found``, ``exec format error``). A problem of the machine,
    not of a configuration: a study stops rather than record it against the configuration it tried."""


class EngineDefinitionError(AutotuneError):
    """An engine adapter is declared wrongly (a knob it accepts that autotune does not know): raised when its class
    is defined, so a plug-in's mistake shows when it is first looked up, naming the class and the fix."""


class LaunchFailed(AutotuneError):
    """The configuration did not serve a benchmark: ``kind`` says how, ``reason`` in the engine's words, ``evidence``
    the end of its log (what learned rules read)."""

    def __init__(self, kind: FailureKind, reason: str, evidence: str = "") -> None:
        self.kind, self.reason, self.evidence = kind, reason, evidence or reason
        super().__init__(f"{kind.value}: {reason}")


class ServerCrashed(AutotuneError):
    """The engine exited before it was ready (or while serving), or its log says it failed (``returncode`` None)."""

    def __init__(self, returncode: int | None, log_tail: str) -> None:
        self.returncode, self.log_tail = returncode, log_tail
        last = next((line for line in reversed(log_tail.splitlines()) if line.strip()), "")
        what = "engine failed while running" if returncode is None else f"engine exited with code {returncode}"
        if returncode == 0:  # no error of its own: a server does not end by itself, so it never started serving
            what = "engine exited with code 0 before it was ready (it did not start a server: a flag that prints "
            what += "and exits, such as --help or --version, or a wrapper script that does not wait for the server)"
        super().__init__(f"{what}: {shorten(last, 200)}" if last else f"{what}; its log is empty")


class ServerStartTimeout(AutotuneError):
    """The engine did not become ready in time (it was killed)."""


class StartupFailure(AutotuneError):
    """The simulated engine cannot start this configuration; the message is the real engine's."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class HttpStreamError(AutotuneError):
    """A request failed; ``error_type`` is what the benchmark records (``http_503``, ``connection_reset``, ...)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class FailureKind(StrEnum):
    """Why a launch produced no measurement; stored with every failed trial."""

    REJECTED = "rejected"  # a static rule refused it; nothing was launched
    OOM = "oom"  # out of memory: weights, KV cache or activations do not fit
    UNSUPPORTED = "unsupported"  # the engine refuses the combination at start-up
    BAD_FLAG = "bad_flag"  # the engine's argument parser refuses a flag or value
    PORT_IN_USE = "port_in_use"
    NCCL = "nccl"  # collective communication failed (multi-GPU)
    TIMEOUT = "timeout"  # not ready within the start-up timeout
    HANG = "hang"  # ready, but produced no tokens
    CRASH = "crash"  # exited for any other reason
    NOT_INSTALLED = "not_installed"  # the engine itself is missing here: no configuration can start (not learned)
    NO_DATA = "no_data"  # a simulated engine's performance model has nothing for this configuration
    CLIENT_INPUT = "client_input"  # the benchmark's own input (the workload file) failed: not the engine (not learned)


# failures of this machine or of the client, not of the configuration tried: such a launch costs the study no budget,
# and its fixed configuration, if it had one, is queued again (autotune.search.budget, autotune.search.trial_queue)
NOT_THE_CONFIGURATIONS = frozenset({FailureKind.NOT_INSTALLED, FailureKind.CLIENT_INPUT})
