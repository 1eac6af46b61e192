"""The sources' performance-model residuals in a warm-started study: the knob effects they show rank this study
until it measures otherwise, their level is not taken, the warm prior's weight scales them, and a warm start
carries them only from a source whose space file is the one it ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.records import LoadRecord, StudyRecord, TrialRecord
from autotune.search.prior import PredictedLoad, Ranked
from autotune.search.residuals import Calibration, residual_rows
from autotune.search.study import RunOptions, prepare_study
from autotune.search.warm_start import WarmSource, snapshot, summary
from autotune.search.workers import run_trials
from autotune.space.files import load_space

REPO = Path(__file__).resolve().parent.parent
LANDSCAPE = REPO / "benchmarks" / "landscapes" / "qwen3-235b-trtllm-2000x500.yaml"
LOADS = [{"max_concurrency": c} for c in (8, 16, 32)]
THROUGHPUT = "total_token_throughput"


def ranked(seqs: int, dtype: str) -> Ranked:
    """A configuration the model predicts 100 tokens/s for at every load, whatever its knobs."""
    return Ranked("vllm", {"max_num_seqs": seqs, "dtype": dtype}, 100.0,
                  tuple(PredictedLoad(load, {THROUGHPUT: 100.0}) for load in LOADS))  # fmt: skip


def measured_at(throughput: float) -> list[LoadRecord]:
    return [LoadRecord(load=load, feasible=True, value=throughput, metrics={THROUGHPUT: throughput}) for load in LOADS]


# the source: the model was 3x low everywhere (its level there), and float32 half as fast as bfloat16 (a knob effect)
SOURCE = residual_rows([(ranked(s, d), measured_at(300.0 * (0.5 if d == "float32" else 1.0)))
                        for s in (2, 8) for d in ("float32", "bfloat16")], "a")  # fmt: skip
# this study: bfloat16 only so far, where the model is right
HERE = [(ranked(s, "bfloat16"), measured_at(100.0)) for s in (2, 8)]


def predicted(calibration: Calibration, seqs: int, dtype: str) -> float:
    return calibration.corrected(ranked(seqs, dtype))[0].metrics[THROUGHPUT]


@pytest.mark.parametrize(("weight", "low", "high"), [(1.0, 40.0, 70.0), (0.5, 60.0, 85.0), (0.0, 99.0, 101.0)])
def test_the_sources_knob_effect_ranks_an_unmeasured_value_as_far_as_the_weight_trusts_it(weight, low, high) -> None:
    """Nothing here measured float32: at weight 1 the source's effect (half) predicts it, at 0.5 half of that
    effect's log, at 0 this study alone (the model's own 100). The source's 3x level is taken at no weight."""
    calibration = Calibration(HERE, SOURCE, weight)
    assert calibration.rows == len(HERE) * len(LOADS)  # its own rows: the sources' are not this study's measurements
    assert low < predicted(calibration, 32, "float32") < high
    assert predicted(calibration, 32, "bfloat16") == pytest.approx(100.0, rel=0.2)


def test_what_this_study_measured_outweighs_the_source() -> None:
    """Measured here, float32 is as fast as bfloat16: the source's effect gives way to the measurements (the ridge
    pulls towards the source's effect, the rows away from it)."""
    here = HERE + [(ranked(s, "float32"), measured_at(100.0)) for s in (2, 8)]
    assert predicted(Calibration(here, SOURCE, 1.0), 32, "float32") > 85.0


def _space_copy(directory: Path, trials: int = 50) -> Path:
    """The landscape's space in ``directory`` (its table named by an absolute path), with ``trials``."""
    text = LANDSCAPE.read_text().replace("table: benchmarks/", f"table: {REPO}/benchmarks/")
    path = directory / "space.yaml"
    path.write_text(text.replace("\ntrials: 50\n", f"\ntrials: {trials}\n"))
    return path


def test_a_warm_start_carries_the_residuals_only_from_the_space_file_the_source_ran(tmp_path) -> None:
    path = _space_copy(tmp_path)
    storage = f"sqlite:///{tmp_path}/a.db"
    options = RunOptions(name="a", storage=storage, studies_dir=tmp_path, n_trials=3, seed=0, heartbeat_s=0)
    space = load_space(path)
    run_trials(prepare_study(space, path, options))
    source = [WarmSource(storage=storage, study="a")]

    carried = snapshot(space, source).residuals
    assert carried and {row.source for row in carried} == {"a"}
    assert all(THROUGHPUT in row.residuals for row in carried)
    warm = RunOptions(name="b", storage=storage, studies_dir=tmp_path, n_trials=3, seed=0, heartbeat_s=0,
                      warm_start=tuple(source))  # fmt: skip
    study = run_trials(prepare_study(space, path, warm))
    assert StudyRecord.of(study).warm_residuals == carried  # copied in: no later step opens the source again
    assert f"{len(carried)} performance-model residuals" in summary(study)[0]
    trials = [TrialRecord.of(t) for t in sorted(study.trials, key=lambda t: t.number)]
    assert sum(t.warm_of is not None for t in trials) <= 1  # the source's best alone is queued first
    # the first pick after the first configurations is the calibration's, which knows the runners-up's errors
    # (before the warm prior, which would queue the runners-up as the best it ranks)
    pick = next(t for t in trials if t.warm_of is None and not t.baseline)
    assert pick.warm_predicted is None
    assert pick.calibrated_predicted is not None or pick.neighbour_of is not None

    _space_copy(tmp_path, trials=49)  # edited since: its predictions could not be made again as the source ran
    assert snapshot(space, source).residuals == []
    path.unlink()  # moved away
    assert snapshot(space, source).residuals == []
