"""Several workloads in one study, end to end: every launch measured on each workload (its own load sweep), the mix
as the trial's value, an SLO missed on one workload making the mix infeasible, and `study best`'s seed table on a
six-workload simulated DeepSeek study."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

from tests.study.conftest import SCRIPTED_SPACE, autotune, show, write_space

LONG_PROMPTS = SCRIPTED_SPACE.parent / "prompts_long.jsonl"  # 300-331 words a prompt; prompts.jsonl has 8-71
PREFILL_MS = 0.5  # the scripted server's TTFT grows by this per prompt token: the long workload is slower
DEEPSEEK_SIX = SCRIPTED_SPACE.parent / "deepseek_six.yaml"


def mix_space(tmp_path: Path, long_slo: dict | None = None) -> Path:
    """The scripted space with two workloads, chat (the space's prompts, loads 1 and 4) and long (300-word prompts,
    its own loads 2 and 8), and two launch configurations (max_num_seqs 2, the baseline, or 8)."""
    path = write_space(tmp_path, env={"SCRIPTED_PREFILL_MS": str(PREFILL_MS)})
    space = yaml.safe_load(path.read_text())
    chat = space.pop("workload") | {"name": "chat", "num_prompts": 16}
    long = chat | {"name": "long", "path": str(LONG_PROMPTS), "loads": {"max_concurrency": [2, 8]}}
    if long_slo:
        long["slo"] = long_slo
    space["workloads"] = [chat, long]
    space["params"] = {"max_num_seqs": {"choices": [2, 8], "default": 2},
                       "max_concurrency": {"choices": [1, 4], "default": 4}}  # fmt: skip
    space["engines"]["vllm"]["fixed"]["dtype"] = "bfloat16"
    space["engines"]["vllm"]["executable"] = [sys.executable, "-m", "autotune.testing.scripted"]
    path.write_text(yaml.safe_dump(space))
    return path


def best_of_workload(trial: dict, name: str) -> dict:
    levels = [b for b in trial["benchmarks"] if b.get("workload") == name and b["feasible"]]
    return max(levels, key=lambda b: b["value"])


def test_every_launch_is_measured_on_each_workload_and_valued_by_their_mix(tmp_path, studies) -> None:
    done = autotune("study", "run", str(mix_space(tmp_path)), "--study", "mix", "--n-trials", "2", "--seed", "0",
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trials = [t for t in show("mix", studies)["trials"] if t["launched"] and t["duplicate_of"] is None]
    assert [t["params"]["max_num_seqs"] for t in trials] == [2, 8]
    references = {}
    for trial in trials:
        results = {w["name"]: w for w in trial["workloads"]}
        assert set(results) == {"chat", "long"} and trial["mix"] == "geomean"
        # each workload swept at its own loads, the chosen one its best feasible, its value that load's
        loads = {name: {b["load"]["max_concurrency"] for b in trial["benchmarks"] if b["workload"] == name}
                 for name in results}  # fmt: skip
        assert loads["chat"] <= {1, 4} and loads["long"] <= {2, 8} and len(loads["long"]) == 2
        for name, result in results.items():
            best = best_of_workload(trial, name)
            assert result["feasible"] and result["load"] == best["load"] and result["value"] == best["value"]
            references.setdefault(name, result["value"])  # the baseline's (trial 0) is every workload's reference
            assert math.isclose(result["relative"], result["value"] / references[name], rel_tol=1e-4)
        # the known difference: a long prompt's prefill adds at least 300 × 0.5 ms to its TTFT (a busy machine only
        # adds to it), a chat prompt's at most 71 × 0.5
        assert results["long"]["metrics"]["median_ttft_ms"] >= 10 + 300 * PREFILL_MS
        expected = math.sqrt(results["chat"]["relative"] * results["long"]["relative"])
        assert math.isclose(trial["values"][0], expected, rel_tol=1e-4) and trial["feasible"]
    baseline, tuned = trials
    assert baseline["values"] == [1.0]
    assert all(w["relative"] > 1.2 for w in tuned["workloads"])  # 8 streams at once instead of 2, on both
    # the value printed is named as what it is (a mix of ratios, not a throughput), to more than one decimal
    assert f"best: trial {tuned['number']}, the mix (geomean) of each workload's total_token_throughput relative to " \
        f"its reference = {tuned['values'][0]:.4g}" in done.stdout  # fmt: skip
    one = autotune("study", "show", "--study", "mix", "--trial", str(tuned["number"]), studies=studies).stdout
    chat, long = ({w["name"]: w for w in tuned["workloads"]}[name] for name in ("chat", "long"))
    assert f"  chat (weight 1): {chat['value']:.1f} = {chat['relative']:.3f}x the baseline's at max_concurrency=" in one
    assert f"  long (weight 1): {long['value']:.1f} = {long['relative']:.3f}x" in one
    assert sum(line.startswith("  long max_concurrency=") for line in one.splitlines()) == len(loads["long"])
    best = autotune("study", "best", "--study", "mix", studies=studies)
    assert best.returncode == 0, best.stderr
    assert "--max-num-seqs 8" in best.stdout and "baseline vs the mix's best" in best.stdout
    assert "# reproduce workload chat" in best.stdout and "# reproduce workload long" in best.stdout
    chosen = json.loads(autotune("study", "best", "--study", "mix", "--json", studies=studies).stdout)
    rows = {row["workload"]: row for row in chosen["workloads"]}
    assert rows["long"]["baseline"] == references["long"] and rows["long"]["gain_pct"] > 50
    assert rows["chat"]["own_best_trial"] == tuned["number"] and rows["chat"]["regret_pct"] == 0.0


def test_a_workload_that_misses_its_slo_makes_the_mix_infeasible(tmp_path, studies) -> None:
    # the long prompts' TTFT is at least 10 + 300 × 0.5 = 160 ms: over its own SLO on every configuration
    space = mix_space(tmp_path, long_slo={"p99_ttft_ms": 60})
    done = autotune("study", "run", str(space), "--study", "slo", "--n-trials", "2", "--seed", "0", studies=studies)
    assert "no feasible trial" in done.stderr
    trials = [t for t in show("slo", studies)["trials"] if t["launched"]]
    assert trials and all(not t["feasible"] for t in trials)
    for trial in trials:
        results = {w["name"]: w for w in trial["workloads"]}
        assert results["chat"]["feasible"] and not results["long"]["feasible"]
        # graded: (measured - limit) / limit at the long workload's closest load, > 0
        assert 0 < results["long"]["violations"]["slo:p99_ttft_ms"] <= 1
        assert not results["chat"]["skipped"]  # no incumbent: nothing is skipped, the sampler sees it all
    shown = autotune("study", "show", "--study", "slo", studies=studies)
    assert "misses" in shown.stdout


def test_a_six_workload_simulated_deepseek_study_prints_the_seed_table(tmp_path, studies) -> None:
    done = autotune("study", "run", str(DEEPSEEK_SIX), "--study", "six", "--n-trials", "14", "--seed", "0",
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    best = autotune("study", "best", "--study", "six", studies=studies)
    assert best.returncode == 0, best.stderr
    for name in ("sharegpt", "very-long", "long", "medium", "short", "generation-heavy"):
        assert f"│ {name} " in best.stdout, best.stdout
    assert "regret" in best.stdout and "gain" in best.stdout and "SIMULATED" in best.stdout
    chosen = json.loads(autotune("study", "best", "--study", "six", "--json", studies=studies).stdout)
    rows = chosen["workloads"]
    assert len(rows) == 6 and all(r["baseline"] and r["mix_best"] and r["gain_pct"] is not None for r in rows)
    gains = [1 + r["gain_pct"] / 100 for r in rows]
    assert math.isclose(chosen["values"][0], math.prod(gains) ** (1 / 6), rel_tol=1e-3)
    assert all(r["regret_pct"] >= 0 for r in rows)
    trials = show("six", studies)["trials"]
    stopped = [t for t in trials if t.get("mix_stopped_early")]
    for trial in stopped:  # a launch stopped early never leads: its value is at most its bound, below the best
        assert trial["values"][0] <= trial["mix_bound"] <= chosen["values"][0] + 1e-9
        assert any(w.get("skipped") for w in trial["workloads"])


def test_an_upgrade_of_a_mix_study_compares_each_workloads_throughput(tmp_path, studies) -> None:
    """The new version is 6x slower per token with 8 sequences and 10x faster with 2 (the baseline): the regression
    table has a row per configuration and workload, each with that workload's own throughput on either version, the old
    best (8 sequences) slower on both and the baseline not. Each version's change is several times the ±15% a busy
    machine moves a measurement by (the baseline once ran unchanged, and a loaded machine called it slower)."""
    done = autotune("study", "run", str(mix_space(tmp_path)), "--study", "mix", "--n-trials", "2", "--seed", "0",
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    old = {t["params"]["max_num_seqs"]: t for t in show("mix", studies)["trials"] if t["launched"]}
    upgraded = autotune("study", "upgrade", "--study", "mix", "--version", "0.99.0", "--n-trials", "2", "--json",
                        studies=studies, env_extra={"SCRIPTED_SLOWER": "--max-num-seqs=8:6,--max-num-seqs=2:0.1"})  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    table = json.loads(upgraded.stdout)
    rows = {(r["configuration"], r["workload"]): r for r in table["regression"]}
    assert set(rows) == {(c, w) for c in ("baseline", "max_num_seqs=8") for w in ("chat", "long")}
    new = {t["params"]["max_num_seqs"]: t for t in show(table["study"], studies)["trials"] if t["launched"]}
    for seqs, configuration in ((2, "baseline"), (8, "max_num_seqs=8")):
        for workload in ("chat", "long"):
            row = rows[configuration, workload]
            # the workload's own throughput, as each study measured that configuration (not the mix's relative)
            before = next(w for w in old[seqs]["workloads"] if w["name"] == workload)["value"]
            after = next(w for w in new[seqs]["workloads"] if w["name"] == workload)["value"]
            assert (row["old"], row["new"]) == ([before], [after])
            assert math.isclose(row["change"], after / before - 1, abs_tol=1e-4)
    for workload in ("chat", "long"):
        assert rows["max_num_seqs=8", workload]["verdict"].startswith("slower")
        assert not rows["baseline", workload]["verdict"].startswith("slower")
    assert rows["baseline", "chat"]["verdict"].startswith("faster")  # its time is mostly tokens: 2.5x the old
