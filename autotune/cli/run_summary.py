"""What `study run` says around its trials: a header before the first (which study, where it is stored, which
space, whether it is simulated), and after the best configuration's table the load and SLO it was judged at, what it
changed from its engine's baseline ("why it won") and the commands to go on with."""

from __future__ import annotations

import shlex
from pathlib import Path

import optuna

from autotune import records
from autotune.errors import AutotuneError
from autotune.records import StudyRecord
from autotune.search import budget
from autotune.search.improvement import ImprovementChance
from autotune.search.ranking import best_trial
from autotune.search.setup import baseline_params
from autotune.search.study import RunOptions
from autotune.space.files import load_space
from autotune.space.metrics import metric_unit
from autotune.space.redact import mask_url
from autotune.space.schema import ENGINE_PARAM, SearchSpace


def header(space: SearchSpace, space_file: Path, options: RunOptions) -> str:
    """One line: the study, its storage (password masked), the space file, its engines, SIMULATED where so."""
    parts = [f"study {options.name}", f"storage {mask_url(options.storage)}", f"space {space_file}",
             "engines " + ", ".join(space.engines)]  # fmt: skip
    if space.simulate is not None:
        parts.append("SIMULATED: autotune's simulator stands in for the engines (no GPU is used)")
    return " · ".join(parts)


def _storage_option(storage: str | None) -> str:
    # the password masked (``***``): a printed command never shows it; the user puts it back, or sets AUTOTUNE_STORAGE
    return f" --storage {shlex.quote(mask_url(storage))}" if storage else ""


def resume_hint(name: str, storage: str | None) -> str:
    """Where the interrupted study's trials are: the command that lists them."""
    return f"so far: autotune study show --study {shlex.quote(name)}{_storage_option(storage)}"


def next_commands(name: str, storage: str | None) -> str:
    where = f"--study {shlex.quote(name)}{_storage_option(storage)}"
    return "next: " + " · ".join(f"autotune {command} {where}"
                                 for command in ("study best", "study report", "dashboard"))  # fmt: skip


def judged_at(study: optuna.Study, best: optuna.trial.FrozenTrial) -> str:
    """The load the best value was measured at and the SLO it met, with units ('' for a several-workload study,
    whose table gives a load per workload)."""
    slo = StudyRecord.of(study).slo
    limits = ", ".join(f"{metric} ≤ {limit:g} {metric_unit(metric)}".rstrip() for metric, limit in slo.items())
    load = ", ".join(f"{k}={v}" for k, v in (records.chosen_load(best) or {}).items())
    if records.workload_results(best):
        return f"SLO: {limits} (met on every workload)" if limits else ""
    parts = [
        f"measured at {load}" if load else "",
        f"SLO: {limits} (met)" if limits else "no SLO (the highest value wins)",
    ]
    return "; ".join(part for part in parts if part)


def _knob_value(value: object) -> str:
    return "default" if value is None else str(value)  # None: the flag is left out, the engine's default holds


def why_it_won(space: SearchSpace, best: optuna.trial.FrozenTrial) -> str:
    """The knobs in which the best configuration differs from its engine's baseline (the engine's defaults)."""
    engine = best.params.get(ENGINE_PARAM) or next(iter(space.engines))
    if engine not in space.engines:  # a study of an older space: its engine is no longer in the file
        return ""
    baseline = baseline_params(space, engine)
    changed = [f"{name} {_knob_value(baseline[name])} → {_knob_value(value)}" for name, value in best.params.items()
               if name != ENGINE_PARAM and name in baseline and baseline[name] != value]  # fmt: skip
    if not changed:
        return f"why it won: it is {engine}'s baseline (its defaults): no change measured better"
    return f"why it won: {len(changed)} change(s) from {engine}'s baseline: " + ", ".join(changed)


def space_of(study: optuna.Study) -> SearchSpace | None:
    """The space the study was run with, where its file is still there and reads (None: another machine's study)."""
    path = StudyRecord.of(study).space_path
    try:
        return load_space(Path(path)) if path else None
    except AutotuneError:
        return None


def unlikely_line(study: optuna.Study, chance: ImprovementChance | None, options: RunOptions) -> str | None:
    """The line of a run that ``--stop-when-unlikely`` stopped (its ``chance`` now under the threshold), or None."""
    if options.stop_when_unlikely is None or chance is None or not chance.below(options.stop_when_unlikely):
        return None
    launches = budget.count(study.get_trials(deepcopy=False)).launches
    return (f"stopped after {launches} launches of a budget of {budget.study_budget(study)}: {chance.text()}, "
            f"below --stop-when-unlikely {options.stop_when_unlikely:g}")  # fmt: skip


def after_lines(study: optuna.Study, space: SearchSpace, storage: str | None,
                chance: ImprovementChance | None) -> list[str]:  # fmt: skip
    """The lines after the best configuration's table (none where no trial is feasible: `study run` has then ended
    with the error that says so)."""
    best = best_trial(study)
    if best is None:
        return []
    lines = [judged_at(study, best), why_it_won(space, best), chance.text() if chance is not None else "",
             next_commands(study.study_name, storage)]  # fmt: skip
    return [line for line in lines if line]
