"""The calibrated mix: what the self-calibrating prior predicts a configuration's mix value to be.

A several-workload study's value is a mix (``autotune.search.mix``) of each workload's best feasible throughput
relative to the study's reference of that workload (its first baseline's, ``StudyRecord.mix_reference``). The model
predicts every workload (``Ranked.by_workload``). One residual model (``autotune.search.residuals``) is fitted to
every workload's measurements, each load tagged with its workload: the knob effects are shared (a model that
underrates data-parallel attention underrates it on every workload, and six workloads per launch give six times the
evidence), while each workload's own error shows in its workload-and-load effects (the analytic model's TTFT on long
prompts is off by another factor than on short ones). Against one model per workload, on the mix landscapes
(median node-minutes to 99% of the mix optimum, 10 seeds): DeepSeek on SGLang 940 -> 650, Llama 506 -> 543. The
corrected values, each workload judged by its own SLO, relative to the measured references make the
calibrated mix, in the unit of the trials' values: a mix study takes the calibrated picks and orders the incumbent's
neighbours as a one-workload study does (``autotune.search.calibration``).
"""

from __future__ import annotations

from dataclasses import replace

from optuna.trial import FrozenTrial

from autotune.records import LoadRecord
from autotune.search.prior import PredictedLoad, Ranked, best_feasible, predicted_mix
from autotune.search.residuals import Calibration, measured_configurations
from autotune.space.schema import SearchSpace

WORKLOAD = "workload"  # the key a load is tagged with: its workload's name


def _tagged(ranked: Ranked, workload: str) -> Ranked:
    """``ranked`` with ``loads`` the predictions of ``workload``, each load tagged with its name."""
    one = ranked.of_workload(workload)
    return replace(one, loads=tuple(PredictedLoad({**p.load, WORKLOAD: workload}, p.metrics) for p in one.loads))


class MixCalibration:
    """The residual model fitted to every workload's measurements of ``space`` (``trials``), and the references
    (measured) the calibrated values are relative to. A workload with no reference yet (the baseline could not serve
    it and no trial has) gives no calibrated mix: nothing is then predicted."""

    def __init__(self, space: SearchSpace, keyed: dict[str, Ranked], trials: list[FrozenTrial],
                 reference: dict[str, float]) -> None:  # fmt: skip
        self.reference = reference
        rows: list[tuple[Ranked, list[LoadRecord]]] = []
        for workload in space.mix_workloads():
            for ranked, loads in measured_configurations(space, keyed, trials, workload=workload.name):
                tagged = [level.model_copy(update={"load": {**level.load, WORKLOAD: workload.name}}) for level in loads]
                rows.append((_tagged(ranked, workload.name), tagged))
        self.fit = Calibration(rows)
        self.rows = self.fit.rows  # the measured loads it is fitted to, over every workload

    def value(self, space: SearchSpace, ranked: Ranked) -> float | None:
        """``ranked``'s calibrated mix value (None: predicted infeasible on a workload, or not to start)."""
        values = {}
        for workload in space.mix_workloads():
            one = _tagged(ranked, workload.name)
            corrected = self.fit.corrected(one) if one.loads else ()
            values[workload.name] = best_feasible(space, corrected, space.workload_slo(workload))
        return predicted_mix(space, values, self.reference)
