"""``autotune study validate``: a reference and a candidate configuration, measured on a suite of workloads with
repeats, compared with intervals: the seed study's evidence table, with its noise made explicit.

Method. Each repeat launches each configuration afresh (reference, then candidate, alternating), so launch-to-launch
variance and the machine's drift fall on both alike; repeat r uses prompts seeded ``seed + r`` (no prefix cache carries
a repeat). Per configuration and workload: the mean and its interval (Student t, n−1 degrees of freedom; 95% by
default, or 99%). The gain's interval is Welch's interval of the difference of the means, divided by the reference
mean; a gain whose interval contains 0 is marked "within noise", otherwise "real". At 95%, a configuration compared
with itself is called "real" about 1 time in 20; at 99%, 1 in 100, with wider intervals.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotune.config import ServerConfig
from autotune.errors import AutotuneError
from autotune.launch import LaunchFailed, launch_for
from autotune.models import resolve_model
from autotune.objective import anchored_paths, engine_for
from autotune.space import SearchSpace, Workload

# The seed study's suite (seed-study.md): ShareGPT, then random input/output lengths with their prompt counts.
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


def measure(space: SearchSpace, config: ServerConfig, suite: list[NamedWorkload], repeat: int, workdir: Path) -> dict:
    """One launch of ``config`` (or one in-process simulation), every workload of the suite: results by workload."""
    engine = engine_for(space, config.engine)
    config = anchored_paths(config)
    seeded = {nw.name: nw.workload.model_copy(update={"seed": nw.workload.seed + repeat}) for nw in suite}
    with launch_for(engine, config, workdir, space.stall_timeout_s, space.workload.headers) as launch:
        try:
            launch.wait_ready(space.startup_timeout_s)
            return {name: launch.measure(workload) for name, workload in seeded.items()}
        except LaunchFailed as exc:
            log = f"; log: {launch.log_path}" if launch.log_path.exists() else ""
            raise AutotuneError(f"{config.engine} failed during validation ({exc}){log}") from None


def validate(space: SearchSpace, reference: ServerConfig, candidates: dict[str, ServerConfig],
             suite: list[NamedWorkload], repeats: int, workdir: Path, confidence: float = 0.95,
             on_step: Callable[[str], None] = lambda _: None) -> list[dict]:  # fmt: skip
    """Measure the reference and each candidate ``repeats`` times, alternating; one row per candidate and workload,
    with intervals at ``confidence`` (0.95 or 0.99)."""
    configs = {"reference": reference, **candidates}
    samples: dict[tuple[str, str], list[dict]] = {}
    for repeat in range(repeats):
        for index, (label, config) in enumerate(configs.items()):
            on_step(f"repeat {repeat + 1}/{repeats}: {label}")
            results = measure(space, config, suite, repeat, workdir / f"{index}-{repeat}")
            for name, result in results.items():
                samples.setdefault((label, name), []).append(result)
    return [_row(label, nw.name, samples[("reference", nw.name)], samples[(label, nw.name)], confidence)
            for label in candidates for nw in suite]  # fmt: skip


def _row(candidate: str, workload: str, reference: list[dict], measured: list[dict], confidence: float) -> dict:
    row: dict = {"candidate": candidate, "workload": workload, "repeats": len(reference), "confidence": confidence}
    for label, results in (("reference", reference), ("candidate", measured)):
        for metric in METRICS:
            values = [r[metric] for r in results if r.get("completed")]
            mean, half = mean_interval(values, confidence) if values else (math.nan, math.inf)
            row[f"{label}_{metric}"], row[f"{label}_{metric}_ci"] = mean, half
        row[f"{label}_failed"] = sum(r.get("failed", 0) for r in results)
    a = [r["total_token_throughput"] for r in reference]
    b = [r["total_token_throughput"] for r in measured]
    row["reference_samples"], row["candidate_samples"] = a, b  # total tok/s of each repeat: the evidence itself
    diff, half = welch_difference(a, b, confidence)
    base = statistics.fmean(a)
    row["gain_pct"], row["gain_ci_pct"] = 100 * diff / base, 100 * half / base
    row["verdict"] = "within noise" if abs(diff) <= half else "real"
    return row
