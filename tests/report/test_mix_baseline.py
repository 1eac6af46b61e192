"""Issue #51 item 1: a several-workload study's table shows the baseline's own number on each workload, says where
the baseline missed the workload's SLO (the tuning made it servable), and says what the mix value is relative to."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.evidence.mix_table import references_text, table_lines, workload_rows

SHORT, LONG = "random-1024-256", "random-4000-200"


def _trial(number_attrs: dict, value: float, seqs: int) -> optuna.trial.FrozenTrial:
    return create_trial(
        state=TrialState.COMPLETE, values=[value], params={"max_num_seqs": seqs},
        distributions={"max_num_seqs": CategoricalDistribution([64, 128, 256])}, user_attrs=number_attrs,
    )  # fmt: skip


def _study() -> optuna.Study:
    """Trial 0, the baseline, meets the SLO on SHORT and misses it on LONG (4325.3); trial 1 meets both, and sets
    LONG's reference (4603.8) since the baseline could not; it is the best."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("workloads", [{"name": SHORT}, {"name": LONG}])
    study.set_user_attr("mix_reference:" + SHORT, 7000.0)
    study.set_user_attr("mix_reference:" + LONG, 4603.8)
    baseline = {"baseline": True, "workloads": [
        {"name": SHORT, "feasible": True, "value": 7000.0, "relative": 1.0},
        {"name": LONG, "feasible": False, "value": 4325.3, "relative": 0.94},
    ]}  # fmt: skip
    tuned = {"workloads": [
        {"name": SHORT, "feasible": True, "value": 7350.0, "relative": 1.05},
        {"name": LONG, "feasible": True, "value": 4603.8, "relative": 1.0},
    ]}  # fmt: skip
    study.add_trial(_trial(baseline, 0.97, 128))
    study.add_trial(_trial(tuned, 1.025, 256))
    return study


def test_the_baseline_column_is_the_baselines_own_number_and_says_it_missed_the_slo():
    study = _study()
    rows = {row.workload: row for row in workload_rows(study, study.trials[1])}
    long = rows[LONG]
    assert (long.baseline, long.baseline_trial, long.baseline_feasible) == (4325.3, 0, False)
    assert long.gain_note == "baseline misses SLO → feasible"
    assert long.gain_pct == round(100 * (4603.8 / 4325.3 - 1), 1)
    assert (long.reference, long.reference_trial) == (4603.8, 1)
    short = rows[SHORT]
    assert (short.baseline, short.baseline_feasible, short.gain_note, short.gain_pct) == (7000.0, True, "", 5.0)


def test_the_printed_cells_and_the_reference_line_name_the_baselines_miss():
    study = _study()
    rows = workload_rows(study, study.trials[1])
    cells = {line[0]: line for line in table_lines(rows, "total_token_throughput")}
    assert cells[LONG][2] == "4325.3 (misses SLO)"
    assert cells[LONG][4].startswith("baseline misses SLO → feasible (+6.4%)")
    assert cells[SHORT][4] == "+5.0%"
    text = references_text(rows)
    assert f"{LONG}: trial 1's 4603.8 (the baseline misses its SLO)" in text
    assert f"{SHORT}: trial 0's 7000.0" in text
