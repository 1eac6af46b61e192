"""autotune: a Bayesian autotuner for LLM inference servers (vLLM, SGLang, TensorRT-LLM).

What a script uses, at the top level (like ``optuna.create_study`` or ``httpx.get``)::

    import autotune

    space = autotune.load_space("quickstart")            # a file, or a shipped space's name
    study = autotune.run_study("quickstart", n_trials=8)  # a simulated study: no GPU needed
    best = autotune.best_trial(study)                     # its best feasible trial, in the study's direction

- spaces: ``load_space``, ``find_space``, ``shipped_spaces``, ``SearchSpace``, ``ServerConfig``, ``Hardware``,
  ``Workload``;
- studies: ``run_study`` (one worker, as ``autotune study run``), ``RunOptions``, ``prepare_study`` and
  ``run_trials`` (the same in two steps), ``best_trial``;
- the benchmark client: ``run_benchmark`` and ``ClientOptions`` (``vllm bench serve``'s metrics);
- records: ``BenchmarkResult`` (one measured load, as ``vllm bench serve`` writes it), ``TrialRecord`` (everything a
  trial stored: ``TrialRecord.of(frozen_trial)``), ``LoadRecord`` (one load of a trial's sweep), ``Outcome``;
- errors: ``AutotuneError`` (the root of every error autotune raises on purpose), ``UsageError``, ``SpaceError``,
  ``UnsupportedConfig``, ``EngineNotInstalled``, and ``FailureKind`` (why a launch measured nothing).

Fakes for tests (the scripted server, the simulator's helpers) are in ``autotune.testing``. Each name is imported
when first used, so ``import autotune`` stays cheap (the CLI and every subprocess import it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it (imported on first use: PEP 562)
_EXPORTS = {
    "load_space": "autotune.space.files",
    "find_space": "autotune.space.files",
    "shipped_spaces": "autotune.space.files",
    "SearchSpace": "autotune.space.schema",
    "Workload": "autotune.space.schema",
    "ServerConfig": "autotune.config",
    "Hardware": "autotune.config",
    "run_study": "autotune.search.workers",
    "run_trials": "autotune.search.workers",
    "RunOptions": "autotune.search.study",
    "prepare_study": "autotune.search.study",
    "best_trial": "autotune.search.ranking",
    "run_benchmark": "autotune.bench.runner",
    "ClientOptions": "autotune.bench.client",
    "AutotuneError": "autotune.errors",
    "UsageError": "autotune.errors",
    "SpaceError": "autotune.errors",
    "UnsupportedConfig": "autotune.errors",
    "EngineNotInstalled": "autotune.errors",
    "FailureKind": "autotune.errors",
    "BenchmarkResult": "autotune.bench.results",
    "LoadRecord": "autotune.records",
    "TrialRecord": "autotune.records",
    "Outcome": "autotune.records",
}
__all__ = [
    "AutotuneError",
    "BenchmarkResult",
    "ClientOptions",
    "EngineNotInstalled",
    "FailureKind",
    "Hardware",
    "LoadRecord",
    "Outcome",
    "RunOptions",
    "SearchSpace",
    "ServerConfig",
    "SpaceError",
    "TrialRecord",
    "UnsupportedConfig",
    "UsageError",
    "Workload",
    "best_trial",
    "find_space",
    "load_space",
    "prepare_study",
    "run_benchmark",
    "run_study",
    "run_trials",
    "shipped_spaces",
]  # the names of _EXPORTS (tests/test_public_api.py checks both)

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports them
    from autotune.bench.client import ClientOptions
    from autotune.bench.results import BenchmarkResult
    from autotune.bench.runner import run_benchmark
    from autotune.config import Hardware, ServerConfig
    from autotune.errors import (
        AutotuneError,
        EngineNotInstalled,
        FailureKind,
        SpaceError,
        UnsupportedConfig,
        UsageError,
    )
    from autotune.records import LoadRecord, Outcome, TrialRecord
    from autotune.search.ranking import best_trial
    from autotune.search.study import RunOptions, prepare_study
    from autotune.search.workers import run_study, run_trials
    from autotune.space.files import find_space, load_space, shipped_spaces
    from autotune.space.schema import SearchSpace, Workload


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # imported once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
