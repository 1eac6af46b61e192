"""`autotune study validate` agrees with its study: each configuration is measured at the load the study chose for it,
under the study's SLOs, so that on the study's own workload the comparison has the study's sign; a side that misses an
SLO is shown missing it; progress is one line per launch and per workload when stderr is not a terminal.

The study is the README's simulated Llama-3.3-70B example (`autotune init ... --slo p99_tpot_ms=50 --simulate`: the
simulator in direct mode, loads max_concurrency 16..512), with 200 prompts and four trials to stay fast."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from autotune.cli.validate import _progress
from autotune.evidence.validate import Step
from tests.study.conftest import autotune, show

PROMPTS = 200


@pytest.fixture(scope="module")
def llama_study(tmp_path_factory) -> tuple[Path, Path]:
    """A finished simulated Llama study (its studies dir) and a workloads file holding only the study's workload."""
    tmp = tmp_path_factory.mktemp("llama")
    studies, space = tmp / "studies", tmp / "llama.yaml"
    made = autotune("init", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpus", "8", "--gpu-memory-gb", "141",
                    "--engine", "vllm", "--engine", "sglang", "--slo", "p99_tpot_ms=50", "--simulate", "-o", str(space),
                    studies=studies)  # fmt: skip
    assert made.returncode == 0, made.stderr
    content = yaml.safe_load(space.read_text())
    content["name"] = "llama"
    content["workload"]["num_prompts"] = PROMPTS
    space.write_text(yaml.safe_dump(content))
    done = autotune("study", "run", str(space), "--n-trials", "4", "--seed", "1", studies=studies)
    assert done.returncode == 0, done.stderr
    workloads = tmp / "space-only.yaml"
    workloads.write_text(yaml.safe_dump([{"name": "space workload", **content["workload"]}]))
    return studies, workloads


def _validate(studies: Path, workloads: Path, *extra: str):
    done = autotune("study", "validate", "--study", "llama", "--repeats", "2", "--workloads", str(workloads), *extra,
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_validate_compares_at_the_studys_loads_with_its_sign(llama_study) -> None:
    studies, workloads = llama_study
    trials = show("llama", studies)["trials"]
    best = best_of_shown(trials)
    baseline = best_of_shown([t for t in trials if t["baseline"]])
    assert best["values"][0] > baseline["values"][0]  # the study found a gain (so the sign below can be wrong)
    done = _validate(studies, workloads, "--json")
    record = json.loads(done.stdout)
    assert record["reference_load"] == baseline["load"] and record["candidate_load"] == best["load"]
    assert record["reference_source"] == f"trial {baseline['number']} (baseline)"
    assert record["slo"] == {"p99_tpot_ms": 50.0} and record["metric"] == "total_token_throughput"
    (row,) = record["rows"]
    # the study's own measurements, repeated: the same values (repeat 0 uses the study's seed), so the same sign
    assert row["gain_pct"] > 0 and row["slo_met"]
    assert row["reference_samples"][0] == pytest.approx(baseline["values"][0])
    assert row["candidate_samples"][0] == pytest.approx(best["values"][0])
    assert row["candidate_p99_tpot_ms"] <= 50 and row["reference_p99_tpot_ms"] <= 50
    # progress: a line per launch and per workload measured (stderr is not a terminal here)
    lines = [line for line in done.stderr.splitlines() if line.startswith("validate [")]
    assert len(lines) == 2 * 2 * 2 and lines[1] == "validate [0/4 done] repeat 1/2, reference: measuring space workload"
    assert lines[-1] == "validate [3/4 done] repeat 2/2, candidate: measuring space workload"


def test_validate_shows_a_side_that_misses_the_studys_slo(llama_study) -> None:
    studies, workloads = llama_study
    trials = show("llama", studies)["trials"]
    missed = next(t for t in trials if t["launched"] and t["load"] and not t["feasible"])  # served, but over its SLO
    table = _validate(studies, workloads, "--candidate", str(missed["number"])).stdout
    assert "candidate misses p99_tpot_ms" in table and "SLOs: p99_tpot_ms ≤ 50" in table
    record = json.loads((studies / "llama" / "validate.json").read_text())  # what the table showed
    (row,) = record["rows"]
    assert record["candidate_load"] == missed["load"] and not row["slo_met"]
    assert set(row["candidate_slo_misses"]) == {"p99_tpot_ms"} and row["candidate_slo_misses"]["p99_tpot_ms"] > 50
    assert row["reference_slo_misses"] == {}


def test_validate_refuses_a_workload_file_that_gives_no_prompts_before_any_launch(llama_study, tmp_path) -> None:
    studies, _ = llama_study
    empty = tmp_path / "prompts.jsonl"
    empty.write_bytes(b"")
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(yaml.safe_dump([{"name": "mine", "dataset": "jsonl", "path": str(empty)}]))
    done = autotune("study", "validate", "--study", "llama", "--repeats", "2", "--workloads", str(workloads),
                    studies=studies)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"autotune: error: {empty} holds no prompts; fix: put at least one prompt in it"
    ]


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_is_a_live_bar_on_a_terminal_and_lines_otherwise(terminal) -> None:
    out = io.StringIO()
    with _progress(Console(file=out, force_terminal=terminal, width=120)) as on_step:
        on_step(Step(3, 8, 2, 2, "candidate", "random 128/4"))
    assert "repeat 2/2, candidate: measuring random 128/4" in out.getvalue()
    if terminal:
        assert "3/8" in out.getvalue() and "━" in out.getvalue()  # rich's bar, M of N
    else:
        assert out.getvalue() == "validate [3/8 done] repeat 2/2, candidate: measuring random 128/4\n"


def best_of_shown(trials: list[dict]) -> dict:
    """The best feasible trial of `study show --json`'s rows (the study maximises total tok/s)."""
    feasible = [t for t in trials if t["feasible"]]
    return max(feasible, key=lambda t: (t["values"][0], -t["number"]))
