"""`study show` at 80 columns: parameter names and values whole, the SLO a trial misses in words; --trial N in full."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
NAME = "show80"
SLO = {"p99_tpot_ms": 50}
VARYING = {"max_model_len": [8192, 16384, 32768], "max_num_batched_tokens": [2048, 8192, 16384],
           "enable_chunked_prefill": [True, False, True]}  # fmt: skip
SHARED = {"gpu_memory_utilization": 0.9}


def _trial(i: int, value: float, constraints: dict, attrs: dict, state=optuna.trial.TrialState.COMPLETE):
    params = {name: values[i] for name, values in VARYING.items()} | SHARED
    distributions = {name: CategoricalDistribution([*VARYING.get(name, []), *([v] if name in SHARED else [])])
                     for name, v in params.items()}  # fmt: skip
    return optuna.trial.create_trial(state=state, value=value if state.is_finished() else None, params=params,
                                     distributions=distributions, constraints=constraints,
                                     user_attrs={"engine": "vllm", "node_minutes": 1.5, "benchmarks": []} | attrs)  # fmt: skip


@pytest.fixture
def studies(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    study = optuna.create_study(study_name=NAME, storage=f"sqlite:///{tmp_path / NAME}.db", direction="maximize")
    study.set_user_attr("objective", {"slo": SLO})
    # the baseline missed its SLO; trial 1 met it; trial 2 was rejected by a rule before launch
    study.add_trial(_trial(0, 1234.5, {"launch": 0.0, "slo:p99_tpot_ms": 0.264},
                           {"baseline": True, "p99_tpot_ms": 63.2, "outcome": "misses_slo", "load": {"max_concurrency": 64},
                            "benchmarks": [{"load": {"max_concurrency": 64}, "value": 1234.5, "feasible": False}]}))  # fmt: skip
    study.add_trial(_trial(1, 1500.0, {"launch": 0.0, "slo:p99_tpot_ms": -0.2},
                           {"p99_tpot_ms": 40.0, "outcome": "measured", "load": {"max_concurrency": 32}}))  # fmt: skip
    study.add_trial(_trial(2, 0.0, {"launch": 1.0, "slo:p99_tpot_ms": 1.0},
                           {"failure_kind": "rejected", "rejected_by": "tp_divides_heads", "outcome": "rejected",
                            "failure_reason": "rejected by 'tp_divides_heads': 64 heads over tp 3"}))  # fmt: skip
    return tmp_path


def _show(*args: str) -> str:
    done = runner.invoke(app, ["study", "show", "--study", NAME, *args], env={"COLUMNS": "80", "TERM": "dumb"})
    assert done.exit_code == 0, done.output
    return done.stdout


def test_show_fits_80_columns_with_whole_parameters_and_the_slo_miss(studies) -> None:
    text = _show()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    assert "…" not in text, text
    for i in (1, 2):  # each trial's changes from its engine's baseline, whole
        for name, values in VARYING.items():
            if values[i] != values[0]:
                assert any(f"{name}={values[i]}" in line for line in lines), f"{name}={values[i]} cut:\n{text}"
    # the baseline's row says it is the engine's defaults (issue #51: no knob listed that did not change); a knob a
    # trial keeps at the baseline's value is not listed (trial 2's enable_chunked_prefill=True, as the baseline's)
    assert "(its defaults)" in text
    assert sum("enable_chunked_prefill=True" in line for line in lines) == 0, text
    # a parameter every trial shares is said once, not in every row
    assert sum("gpu_memory_utilization=0.9" in line for line in lines) == 1
    # the baseline's row: its outcome says which SLO it misses, by how much (each miss whole on a line)
    baseline = lines[next(i for i, line in enumerate(lines) if line.split()[:2] == ["0", "1234.5"]) :][:4]
    assert "misses SLO:" in baseline[0] and "p99_tpot_ms 63.2 > 50" in baseline[1], text
    assert "rejected" in text and "tp_divides_heads" in "".join(text.split())


def test_show_one_trial_in_full(studies) -> None:
    text = _show("--trial", "0")
    assert "misses SLO: p99_tpot_ms 63.2 > 50" in text
    for name, value in {name: values[0] for name, values in VARYING.items()}.items() | SHARED.items():
        assert f"{name}={value}" in text
    assert "max_concurrency=64" in text
    row = json.loads(_show("--trial", "2", "--json"))
    assert row["failure_kind"] == "rejected" and row["feasible"] is False
    assert "64 heads over tp 3" in _show("--trial", "2")
    missing = runner.invoke(app, ["study", "show", "--study", NAME, "--trial", "7"])
    assert missing.exit_code == 2 and "no trial 7" in missing.output


def test_show_json_names_the_miss(studies) -> None:
    trials = json.loads(_show("--json"))["trials"]
    assert trials[0]["slo_miss"] == "misses SLO: p99_tpot_ms 63.2 > 50" and trials[1]["slo_miss"] == ""
