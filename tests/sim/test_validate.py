"""`autotune study validate` on the simulated engine reproduces the shape of the seed study's table: six workloads,
reference and candidate total tok/s and mean TPOT with intervals, gains in %, a verdict per workload."""

from __future__ import annotations

import json

import pytest

from autotune.evidence.validate import mean_interval, t_quantile, welch_difference
from tests.sim.test_sim_studies import direct_space
from tests.study.conftest import autotune


def test_validate_prints_the_seed_table_shape(tmp_path) -> None:
    studies = tmp_path / "studies"
    space = direct_space(tmp_path)
    done = autotune("study", "run", space, "--study", "direct", "--n-trials", "8", "--seed", "3", studies=studies)
    assert done.returncode == 0, done.stderr
    done = autotune("study", "validate", "--study", "direct", "--repeats", "2", "--json", studies=studies, timeout=600)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["simulated"] and record["repeats"] == 2
    assert [row["workload"] for row in record["rows"]] == [
        "space workload (random)", "random 128/4", "random 2000/100", "random 4000/200", "random 32000/100",
        "random 1000/2000"]  # fmt: skip
    for row in record["rows"]:
        assert row["reference_total_token_throughput"] > 0 and row["candidate_total_token_throughput"] > 0
        assert row["verdict"] in ("real", "within noise") and row["gain_ci_pct"] >= 0 and row["confidence"] == 0.95
        assert len(row["reference_samples"]) == len(row["candidate_samples"]) == 2
        assert row["reference_total_token_throughput"] == pytest.approx(sum(row["reference_samples"]) / 2)
        expected = row["candidate_total_token_throughput"] / row["reference_total_token_throughput"] - 1
        assert row["gain_pct"] == pytest.approx(100 * expected)
    assert (studies / "direct" / "validate.json").exists()
    table = autotune("study", "validate", "--study", "direct", "--repeats", "2", "--candidate", "baseline", "--confidence", "0.99",
                     studies=studies)  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "SIMULATED reference vs candidate" in table.stdout and table.stdout.count("within noise") == 6
    assert "99% interval" in table.stdout
    wrong = autotune("study", "validate", "--study", "direct", "--confidence", "0.9", studies=studies)
    assert wrong.returncode == 2 and "expected one of 0.95, 0.99" in wrong.stderr


def test_interval_arithmetic() -> None:
    assert t_quantile(2) == 4.303 and t_quantile(2.7) == 4.303 and t_quantile(100) == 1.96
    assert t_quantile(2, 0.99) == 9.925 and t_quantile(100, 0.99) == 2.576
    mean, half = mean_interval([10.0, 12.0, 14.0])
    assert mean == 12.0 and half == pytest.approx(4.303 * 2.0 / 3**0.5)
    diff, half = welch_difference([10.0, 12.0, 14.0], [20.0, 22.0, 24.0])
    assert diff == 10.0 and 0 < half < diff  # a clear difference: its interval excludes 0
    diff, half = welch_difference([10.0, 12.0, 14.0], [11.0, 13.0, 12.0])
    assert abs(diff) < half  # within noise
    # 99% intervals are wider: a difference real at 95% can be within noise at 99%
    a, b = [10.0, 11.0, 12.0], [12.5, 13.5, 14.5]
    (diff, half95), (_, half99) = welch_difference(a, b), welch_difference(a, b, 0.99)
    assert half95 < abs(diff) < half99
