"""``autotune study validate``: a reference and a candidate configuration, measured on a suite of workloads with
repeats, compared with intervals: the seed study's evidence table, with its noise made explicit.

Method. Each repeat launches each configuration afresh (reference, then candidate, alternating), so launch-to-launch
variance and the machine's drift fall on both alike; repeat r uses prompts seeded ``seed + r`` (no prefix cache carries
a repeat). Per configuration and workload: the mean and its interval (Student t, n−1 degrees of freedom; 95% by
default, or 99%). The gain's interval is Welch's interval of the difference of the means, divided by the reference
mean; a gain whose interval contains 0 is marked "within noise", otherwise "real". At 95%, a configuration compared
with itself is called "real" about 1 time in 20; at 99%, 1 in 100, with wider intervals.

Load and SLOs. A study measures each configuration at several loads (``max_concurrency``, ``request_rate``) and keeps
the best load that meets its SLOs (``autotune.search.sweep``); the comparison it reports is between configurations at their
chosen loads. So each configuration is validated at its study's chosen load (a ``Contender``), on every workload of
the suite (a workload that sets its own load keeps it), and the study's SLOs are judged on each side's means: a side
that misses one is shown as missing it, whatever its throughput. The gain is in the study's first objective metric,
signed so that + is better in its direction.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench.results import BenchmarkResult
from autotune.config import ServerConfig
from autotune.engines.models import resolve_model
from autotune.errors import AutotuneError, LaunchFailed
from autotune.search.backends import anchored_paths, serving_backend
from autotune.search.ranking import sign
from autotune.space.schema import Objective, SearchSpace, Workload

# The seed study's suite (the hand-tuned study autotune automates): ShareGPT, then random input/output lengths with
# their prompt counts.
SEED_SUITE = (("random 128/4", 128, 4, 1000), ("random 2000/100", 2000, 100, 500), ("random 4000/200", 4000, 200, 500),
              ("random 32000/100", 32000, 100, 100), ("random 1000/2000", 1000, 2000, 100))  # fmt: skip
# Student's t two-sided quantiles by degrees of freedom, and the normal one beyond the table (df > 60)
_T_QUANTILES = {
    0.95: ({1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
            12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}, 1.960),
    0.99: ({1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250, 10: 3.169,
            12: 3.055, 15: 2.947, 20: 2.845, 30: 2.750, 60: 2.660}, 2.576),
}  # fmt: skip
CONFIDENCES = tuple(_T_QUANTILES)
METRICS = ("total_token_throughput", "output_throughput", "mean_tpot_ms", "mean_ttft_ms")


@dataclass(frozen=True)
class NamedWorkload:
    name: str
    workload: Workload
    keeps_load: bool = False  # it sets its own max_concurrency or request_rate: both sides are measured at that


@dataclass(frozen=True)
class Contender:
    """A configuration to measure, at the load its study chose for it (what the client sends: ``max_concurrency``,
    ``request_rate``; empty: the workload as written), and where it comes from (``trial 7 (best)``)."""

    config: ServerConfig
    load: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # of a several-workload study: the load its trial chose for each workload, by name (in place of ``load``)
    workload_loads: dict[str, dict[str, Any]] = field(default_factory=dict)

    def workload(self, named: NamedWorkload, repeat: int) -> Workload:
        """``named``'s workload at this contender's load (for that workload), its prompts seeded for ``repeat``."""
        load = {} if named.keeps_load else self.workload_loads.get(named.name, self.load)
        return named.workload.model_copy(update=load | {"seed": named.workload.seed + repeat})


@dataclass(frozen=True)
class Step:
    """Where validation is: ``done`` of ``total`` measurements finished; now repeat ``repeat`` of ``label``, launching
    (``workload`` None) or measuring ``workload``."""

    done: int
    total: int
    repeat: int
    repeats: int
    label: str
    workload: str | None

    def text(self) -> str:
        doing = f"measuring {self.workload}" if self.workload is not None else "launching"
        return f"repeat {self.repeat}/{self.repeats}, {self.label}: {doing}"


def load_text(load: dict[str, Any]) -> str:
    """``max_concurrency=32``, or what an empty load means."""
    return ", ".join(f"{name}={value}" for name, value in load.items()) or "the workload's own load"


def slo_misses(means: dict[str, float], slo: dict[str, float]) -> dict[str, float]:
    """The SLO metrics whose mean is over its limit (or was never measured: NaN), with the mean."""
    return {metric: means.get(metric, math.nan) for metric, limit in slo.items()
            if not means.get(metric, math.nan) <= limit}  # fmt: skip


def misses_text(misses: dict[str, float], slo: dict[str, float]) -> str:
    """``p99_tpot_ms 63.2 > 50``, one per missed SLO."""
    return ", ".join(f"{metric} {value:.1f} > {slo[metric]:g}" for metric, value in misses.items())


def study_suite(space: SearchSpace) -> list[NamedWorkload]:
    """A several-workload space's own workloads, by name: what its study tuned for is what it validates on."""
    return [NamedWorkload(w.name or f"workload {i}", w) for i, w in enumerate(space.mix_workloads())]


def seed_suite(space: SearchSpace, context: int | None) -> list[NamedWorkload]:
    """The space's own workload (the seed's ShareGPT) and the seed's five random workloads, scaled to the space:
    prompt counts by the space's num_prompts / 1000, lengths down to fit ``context`` (the longest is 32000 + 100)."""
    base = space.workload
    prompts = base.num_prompts / 1000
    lengths = min(1.0, context / (32000 + 100)) if context else 1.0
    suite = [NamedWorkload(f"space workload ({base.dataset})", base)]
    for name, input_len, output_len, count in SEED_SUITE:
        scaled = Workload(dataset="random", input_len=max(1, round(input_len * lengths)),
                          output_len=max(2, round(output_len * lengths)), num_prompts=max(4, round(count * prompts)),
                          endpoint=base.endpoint, max_concurrency=base.max_concurrency, seed=42)  # fmt: skip
        label = name if lengths == 1.0 else f"{name} ×{lengths:.3g}"
        suite.append(NamedWorkload(label, scaled))
    return suite


def context_of(config: ServerConfig) -> int | None:
    model = resolve_model(config.model)
    return config.max_model_len or (model.max_positions if model else None)


def t_quantile(df: float, confidence: float = 0.95) -> float:
    """Student's t two-sided quantile, rounded down to the nearest tabulated degrees of freedom (conservative)."""
    table, normal = _T_QUANTILES[confidence]
    if df < 1:
        return math.inf
    return table[max(k for k in table if k <= df)] if df <= 60 else normal


def mean_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its interval."""
    if len(values) < 2:
        return statistics.fmean(values), math.inf
    sem = statistics.stdev(values) / math.sqrt(len(values))
    return statistics.fmean(values), t_quantile(len(values) - 1, confidence) * sem


def welch_difference(a: list[float], b: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """mean(b) − mean(a) and the half-width of Welch's interval."""
    diff = statistics.fmean(b) - statistics.fmean(a)
    if min(len(a), len(b)) < 2:
        return diff, math.inf
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return diff, t_quantile(df, confidence) * math.sqrt(va + vb)


def measure(space: SearchSpace, contender: Contender, suite: list[NamedWorkload], repeat: int, workdir: Path,
            on_workload: Callable[[str | None], None] = lambda _: None) -> dict[str, BenchmarkResult]:  # fmt: skip
    """One launch of the contender's configuration (or one in-process simulation), every workload of the suite at
    the contender's load: results by workload. ``on_workload`` hears None before the launch, then each workload's
    name before it is measured."""
    backend = serving_backend(space, contender.config.engine)
    config = anchored_paths(contender.config)
    on_workload(None)
    headers = space.mix_workloads()[0].headers
    serving = backend.serve(config, workdir, stall_timeout_s=space.stall_timeout_s, headers=headers)
    with serving as launch:
        try:
            launch.wait_ready(space.startup_timeout_s)
            results = {}
            for named in suite:
                on_workload(named.name)
                results[named.name] = launch.measure(contender.workload(named, repeat))
            return results
        except LaunchFailed as exc:
            log = f"; log: {launch.log_path}" if launch.log_path.exists() else ""
            raise AutotuneError(f"{config.engine} failed during validation ({exc}){log}") from None


def validate(space: SearchSpace, reference: Contender, candidates: dict[str, Contender], suite: list[NamedWorkload],
             repeats: int, workdir: Path, confidence: float = 0.95, on_step: Callable[[Step], None] = lambda _: None,
             objective: Objective | None = None) -> list[dict]:  # fmt: skip
    """Measure the reference and each candidate ``repeats`` times, alternating, each at its own load; one row per
    candidate and workload, with intervals at ``confidence`` (0.95 or 0.99), the gain in ``objective``'s first metric
    (default: the space's) and its SLOs judged on each side's means."""
    objective = objective or space.objective
    contenders = {"reference": reference, **candidates}
    total = repeats * len(contenders) * len(suite)
    position = {named.name: i for i, named in enumerate(suite)}
    samples: dict[tuple[str, str], list[BenchmarkResult]] = {}
    for repeat in range(repeats):
        for index, (label, contender) in enumerate(contenders.items()):
            before = (repeat * len(contenders) + index) * len(suite)  # measurements finished before this launch

            def step(workload: str | None, label: str = label, before: int = before, repeat: int = repeat) -> None:
                done = before + (position[workload] if workload is not None else 0)
                on_step(Step(done, total, repeat + 1, repeats, label, workload))

            results = measure(space, contender, suite, repeat, workdir / f"{index}-{repeat}", step)
            for name, result in results.items():
                samples.setdefault((label, name), []).append(result)
    return [_row(label, nw, samples[("reference", nw.name)], samples[(label, nw.name)], confidence, objective)
            for label in candidates for nw in suite]  # fmt: skip


def workload_slo(named: NamedWorkload, objective: Objective) -> dict[str, float]:
    """The SLOs a workload is judged by: its own (a several-workload space's may have them), else the objective's."""
    return dict(named.workload.slo) if named.workload.slo is not None else dict(objective.slo)


def _row(candidate: str, named: NamedWorkload, reference: list[BenchmarkResult], measured: list[BenchmarkResult],
         confidence: float, objective: Objective) -> dict:  # fmt: skip
    metric, slo = objective.metrics[0], workload_slo(named, objective)
    row: dict = {"candidate": candidate, "workload": named.name, "repeats": len(reference), "confidence": confidence,
                 "metric": metric.name, "direction": metric.direction, "slo": slo}  # fmt: skip
    shown = dict.fromkeys((*METRICS, metric.name, *slo))
    for label, results in (("reference", reference), ("candidate", measured)):
        for name in shown:
            values = [r.metric(name) for r in results if r.completed and r.metric(name) is not None]
            mean, half = mean_interval(values, confidence) if values else (math.nan, math.inf)
            row[f"{label}_{name}"], row[f"{label}_{name}_ci"] = mean, half
        row[f"{label}_failed"] = sum(r.failed or 0 for r in results)
        row[f"{label}_slo_misses"] = slo_misses({m: row[f"{label}_{m}"] for m in slo}, slo)
    row["slo_met"] = not (row["reference_slo_misses"] or row["candidate_slo_misses"])
    a = [_or_nan(r.metric(metric.name)) for r in reference]
    b = [_or_nan(r.metric(metric.name)) for r in measured]
    row["reference_samples"], row["candidate_samples"] = a, b  # the metric of each repeat: the evidence itself
    diff, half = welch_difference(a, b, confidence)
    base = statistics.fmean(a)
    better = sign(metric.direction) * diff
    row["gain_pct"], row["gain_ci_pct"] = 100 * better / base, 100 * half / base
    row["verdict"] = "within noise" if abs(diff) <= half else "real"
    return row


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
