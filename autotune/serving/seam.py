"""Serving a configuration: start it, wait until it serves, measure workloads on it, stop it.

One seam, owned by the trial: a ``Backend`` serves configurations (``serve`` gives a ``Serving``, a context manager:
enter starts, ``wait_ready``, ``measure`` a workload at a load, exit stops), and every backend returns the same
``BenchmarkResult``. Three implementations: an engine process (``ProcessBackend``, here: ``Launch`` over
``ServerProcess``), and the simulator behind HTTP or in process (``autotune.sim.backends``). Which one serves a space
is ``autotune.search.backends.serving_backend``'s choice; the trial, ``study validate`` and the prior ask it and never see
which.

Shared by a study's trials and by ``study validate``, so both classify failures alike, check the engine outlived each
benchmark, and scrub secrets from the server log. Every way a launch can fail as a property of the configuration
(it crashed, ran out of memory, never became ready, died or failed requests during a benchmark) is a
``LaunchFailed`` carrying its FailureKind; anything else is a bug and propagates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tokenizers import Tokenizer

from autotune.bench.client import ClientOptions, bearer
from autotune.bench.datasets import needs_tokenizer
from autotune.bench.results import BenchmarkResult
from autotune.bench.runner import Progress, ProgressHook, run_benchmark
from autotune.config import ServerConfig
from autotune.engines.base import Engine, LaunchSpec
from autotune.errors import FailureKind, LaunchFailed, ServerCrashed, ServerStartTimeout, UsageError
from autotune.serving.process import ServerProcess, free_port
from autotune.space.redact import scrub_file, secret_values
from autotune.space.schema import Workload


class Serving(Protocol):
    """A configuration being served: entered, it starts; exited, it stops (and nothing of it is left running)."""

    @property
    def spec(self) -> LaunchSpec:
        """What serves the configuration (the engine's command, or the simulator's)."""
        ...

    @property
    def command(self) -> LaunchSpec:
        """The engine's own command for the configuration: what a user runs once the study is done."""
        ...

    @property
    def port(self) -> int:
        """Where it serves."""
        ...

    @property
    def pgid(self) -> int | None:
        """Its process group while it runs (what a worker that finds the trial stale must kill); None: no process."""
        ...

    @property
    def log_path(self) -> Path:
        """Its log (never written by the simulator in process)."""
        ...

    def __enter__(self) -> Serving: ...

    def __exit__(self, *exc: object) -> None: ...

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until it served (LaunchFailed: it never did)."""
        ...

    def alive(self) -> bool:
        """Whether another load can be measured on it."""
        ...

    def measure(self, workload: Workload, on_progress: ProgressHook | None = None) -> BenchmarkResult:
        """``workload`` (at its load) measured on it, in the engine's own time (LaunchFailed: the load failed)."""
        ...

    def gpu_facts(self) -> dict:
        """GPU memory before, once ready and after; whether it was released (empty without GPUs or a process)."""
        ...


class Backend(Protocol):
    """What serves a study's configurations.

    Attributes:
        engine: the configurations' engine: its rules, version, GPU count and the command a user runs.
        launcher: the adapter whose program a served configuration starts (the engine itself, or the simulator standing
            in for it): what a study and ``autotune doctor`` check is installed before the first launch.
    """

    engine: Engine
    launcher: Engine

    def serve(self, config: ServerConfig, workdir: Path, *, stall_timeout_s: float = 60.0,
              headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> Serving:  # fmt: skip
        """``config`` ready to be served in ``workdir`` (not started: enter the context to start it)."""
        ...


class ProcessBackend:
    """The engine itself, as a process per configuration (``Launch``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = self.launcher = engine

    def serve(self, config: ServerConfig, workdir: Path, *, stall_timeout_s: float = 60.0,
              headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> Launch:  # fmt: skip
        """``config`` launched as the engine's process (once entered)."""
        return Launch(self.engine, config, workdir, stall_timeout_s, headers, gpus)


class Launch:
    """A context manager: the engine serving ``config`` on a free port, in ``workdir``; stopped (whole process group)
    and its log scrubbed of secrets on exit.

    Args:
        engine: the adapter that renders and classifies (the engine's, or the simulator's standing in for it).
        config: what to launch (paths already absolute: the engine runs in ``workdir``).
        workdir: the launch's directory: files, ``server.log``.
        stall_timeout_s: a request that receives nothing for this long fails as a timeout.
        headers: sent with every request and readiness probe, besides the launch's own API key (as a bearer token).
        gpus: the GPUs the engine may use (``CUDA_VISIBLE_DEVICES``), whose memory is watched; None: as inherited.
    """

    def __init__(self, engine: Engine, config: ServerConfig, workdir: Path, stall_timeout_s: float = 60.0,
                 headers: Mapping[str, str] | None = None, gpus: tuple[str, ...] | None = None) -> None:  # fmt: skip
        self.engine, self.config, self.stall_timeout_s = engine, config, stall_timeout_s
        self.port = free_port()
        self.spec = with_inherited_key(engine, engine.launch_spec(config, port=self.port))
        self.headers = {**(headers or {}), **bearer(engine.api_key(self.spec, os.environ))}
        self.server = ServerProcess(self.spec, workdir, self.port, engine.readiness(config), engine.failed_while_alive,
                                    self.headers, gpus)  # fmt: skip
        self.command = self.spec  # what runs is what a user runs (the simulator's server says otherwise)

    @property
    def pgid(self) -> int | None:
        return self.server.pgid

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    def __enter__(self) -> Launch:
        try:
            self.server.__enter__()
        except ServerCrashed as exc:  # the program could not be executed at all
            raise self._crashed(exc) from None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.server.stop()
        finally:
            scrub_file(self.server.log_path, secret_values(self.spec))

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until the engine served the expected model.

        Raises:
            LaunchFailed: it exited first (kind from its exit code and log), or was not ready in time (timeout).
        """
        try:
            return self.server.wait_ready(timeout_s)
        except ServerCrashed as exc:
            raise self._crashed(exc) from None
        except ServerStartTimeout as exc:
            # killed for taking too long; a log that names a cause (CUDA out of memory at its first request) wins
            tail = self.server.log_tail()
            raise LaunchFailed(self._cause_in_log(tail, FailureKind.TIMEOUT), str(exc), tail) from None

    def _crashed(self, exc: ServerCrashed) -> LaunchFailed:
        return LaunchFailed(self.engine.classify_failure(exc.returncode, exc.log_tail), str(exc), exc.log_tail)

    def alive(self) -> bool:
        """Whether the engine still runs (another load can be measured on it)."""
        return self.server.alive()

    def measure(self, workload: Workload, on_progress: ProgressHook | None = None) -> BenchmarkResult:
        """Benchmark ``workload`` on the running engine; the result and the checkpoints ``on_progress`` hears in the
        engine's own time (``engine_time``).

        Raises:
            LaunchFailed: the engine died during the benchmark, or a request failed: a load whose requests fail is that
                load's failure (configurations are compared on equal work, and one that drops requests does not
                serve the load), its kind the one the log names (out of memory at that load, say), else hang when
                every failed request timed out, else crash.
            UsageError: the workload's file gives no prompts (it changed since the checks before the launch): the
                client's input, never the configuration's failure.
        """
        options = ClientOptions(self.server.base_url, self.config.api_model_name, workload.endpoint,
                                workload.ignore_eos, stall_timeout_s=self.stall_timeout_s,
                                extra_body=workload.extra_body, headers=self.headers | workload.headers,
                                extensions=self.engine.request_extensions,
                                chat_length_field=self.engine.chat_length_field)  # fmt: skip
        hook = None if on_progress is None else self._in_engine_time(on_progress)
        raw = run_benchmark(options, workload, self._tokenizer(workload), on_progress=hook,
                            include_requests=False)  # fmt: skip
        result = BenchmarkResult.from_vllm_json(self.engine_time(raw.to_vllm_json()))
        if not self.server.alive():
            returncode, tail = self.server.process.returncode, self.server.log_tail()
            kind = self.engine.classify_failure(returncode, tail)
            raise LaunchFailed(kind, f"engine died during the benchmark (exit {returncode})", tail)
        if result.failed:
            # e.g. a KV pool allocated at the first requests that does not fit, or activations of a batch this large:
            # the log says CUDA out of memory
            errors, tail = result.errors_by_type, self.server.log_tail()
            otherwise = FailureKind.HANG if set(errors) == {"timeout"} else FailureKind.CRASH
            total = result.completed + result.failed
            share = "every request" if result.completed == 0 else f"{result.failed} of {total} requests"
            raise LaunchFailed(self._cause_in_log(tail, otherwise), f"ready, but {share} failed: {errors}", tail)
        return result

    def _tokenizer(self, workload: Workload) -> Tokenizer | None:
        """The model's tokenizer: found (or downloaded) before the first launch, so here it is found again without the
        network, or fails as the client's input; a JSONL workload without one sends its prompts as they are."""
        try:
            return self.engine.tokenizer(self.config, workload.tokenizer, download=False)
        except UsageError:
            if needs_tokenizer(workload):
                raise
            return None

    def engine_time(self, metrics: dict) -> dict:
        """Metrics measured against the server (a result, or a checkpoint's running ones) in the engine's own time:
        as measured (a simulator's server running faster than real time rescales them)."""
        return metrics

    def _in_engine_time(self, on_progress: ProgressHook) -> ProgressHook:
        def hear(progress: Progress) -> None:
            steady = progress.steady
            if steady is not None:  # the window the pruner judges: in the engine's time too, as the running value
                steady = dataclasses.replace(steady, metrics=self.engine_time(steady.metrics),
                                             batches=tuple(self.engine_time(b) for b in steady.batches))  # fmt: skip
            on_progress(dataclasses.replace(progress, metrics=self.engine_time(progress.metrics), steady=steady))

        return hear

    def _cause_in_log(self, tail: str, otherwise: FailureKind) -> FailureKind:
        """The failure kind the log names (out of memory, ...) for a server that is still up, else ``otherwise``."""
        kind = self.engine.classify_failure(None, tail)
        return otherwise if kind == FailureKind.CRASH else kind

    def gpu_facts(self) -> dict:
        """GPU memory (MiB by GPU) before the launch, once ready and after the stop; whether it was released."""
        return {**self.server.gpu_memory, "released": self.server.gpus_released}


def with_inherited_key(engine: Engine, spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with the engine's API-key variable added to its env when the engine would inherit it from ours: the
    launch then says it needs the key (its stored form names the variable) and its log is scrubbed of it."""
    name = engine.api_key_env
    if not name or name in spec.env or not os.environ.get(name):
        return spec
    return dataclasses.replace(spec, env={**spec.env, name: os.environ[name]})
