"""A trial's note in optuna-dashboard: what became of it, on one screen, in Markdown.

The dashboard lists twenty-odd user attributes per trial and shows a rejected or crashed one as "Complete" with a
pessimistic value; the note says it in words: the outcome (rule, error line, where it was pruned, what it
duplicates, which SLO it misses), the launch command, the loads measured and the key metrics. ``trial_note`` is pure
(a finished trial in, Markdown out); ``save_trial_note`` stores it (optuna-dashboard is a dependency, so every trial
gets its note).
"""

from __future__ import annotations

import re
import textwrap

import optuna

from autotune.errors import AutotuneError
from autotune.evidence.export import printed_launch
from autotune.records import LoadRecord, Outcome, TrialRecord, batch, optuna_private
from autotune.space.schema import Objective

_WRAP = 100  # characters of a code line that fit a 1400-pixel window beside the dashboard's trial list
# the key metrics, as the benchmark names them, with their units
METRICS = {"total_token_throughput": "tok/s", "output_throughput": "tok/s", "p99_ttft_ms": "ms", "mean_ttft_ms": "ms",
           "p99_tpot_ms": "ms", "mean_tpot_ms": "ms"}  # fmt: skip


def trial_note(trial: optuna.trial.FrozenTrial, objective: Objective) -> str:
    """The Markdown note of a finished trial.

    Args:
        trial: the trial as Optuna stored it (state, values, user attributes written by ``autotune.search.objective``).
        objective: the study's objective (metric names, SLO limits).

    Returns:
        Markdown: a headline with the outcome, the launch command, the loads and the metrics.
    """
    record = TrialRecord.of(trial)
    outcome = Outcome.of(trial)
    parts = [f"### Outcome: {outcome}", _headline(trial, record, outcome, objective)]
    if record.simulated is not None:
        parts.append("_SIMULATED: the numbers come from autotune's simulator, the command is the real engine's._")
    if record.launch:
        parts += ["**Launch command**", _fenced(printed_launch(record.launch).splitlines(), "sh")]
    else:
        parts.append("Not launched.")
    parts += _workloads(record) + _loads(record) + _metrics(record, objective)
    return "\n\n".join(parts) + "\n"


def _headline(trial: optuna.trial.FrozenTrial, record: TrialRecord, outcome: Outcome | str,
              objective: Objective) -> str:  # fmt: skip
    reason = record.failure_reason or ""
    metrics = record.metrics
    if record.workloads and outcome in (Outcome.MEASURED, Outcome.MISSES_SLO):
        stopped = f"; stopped early: at most {record.mix_bound:.3f}" if record.mix_bound is not None else ""
        missed = [w.name for w in record.workloads if w.measured and not w.feasible]
        misses = f"; misses its SLO on {', '.join(missed)}" if missed else ""
        return (f"**{outcome.text}**: the mix ({record.mix}) of {len(record.workloads)} workloads' "
                f"{_metric_names(objective)[0]} relative to the baseline = {(trial.values or [0])[0]:.3f}"
                f"{stopped}{misses}.")  # fmt: skip
    if outcome == Outcome.MEASURED:
        return f"**{outcome.text}**: {_objective_values(trial, objective)}."
    if outcome == Outcome.MISSES_SLO:
        missed = [f"{metric} {metrics[metric]:.1f} > limit {limit:g}" for metric, limit in objective.slo.items()
                  if metrics.get(metric) is not None and metrics[metric] > limit]  # fmt: skip
        return f"**{outcome.text}** at its closest load: {'; '.join(missed) or 'see the loads below'}."
    if outcome == Outcome.DUPLICATE:
        earlier = f"**{outcome.text} of trial #{record.duplicate_of}**: the same launch, not run again"
        return earlier + (f"; that trial's outcome: {record.failure_kind}." if record.failure_kind else ".")
    if outcome == Outcome.PRUNED:
        at = (record.pruned_at or "?").replace("/", " of ", 1)
        steps = trial.intermediate_values
        then = f"; {_metric_names(objective)[0]} there: {steps[max(steps)]:.1f}" if steps else ""
        judged = "(the pruner judged it behind trials at that load)"
        return f"**{outcome.text}** at {at} of its first benchmark{then} {judged}."
    if outcome == Outcome.REJECTED:
        return f"**{outcome.text} by rule `{record.rejected_by or '?'}`** before launch:\n\n{_block(reason)}"
    if outcome == Outcome.ERROR:
        return f"**{outcome.text}** (a bug, not the configuration):\n\n{_block(record.error or '')}"
    return f"**{outcome.text if isinstance(outcome, Outcome) else outcome}**:\n\n{_block(reason)}"


def _block(text: str) -> str:
    """``text`` verbatim in a code block, wrapped: optuna-dashboard's trial page is as wide as its widest user
    attribute (thousands of pixels here), so a paragraph or a long line would run off the screen."""
    lines = textwrap.wrap(" ".join(text.split()), _WRAP, break_on_hyphens=False, break_long_words=False)
    return _fenced(lines, "text")


def _fenced(lines: list[str], language: str) -> str:
    """``lines`` as a Markdown code block whose fence is longer than any run of backticks in them: a value with a
    newline and ``` (an engine's ``extra_args``, an ``env`` value) would otherwise close the block, and what follows
    it would render live (a link, an image that calls out)."""
    fence = "`" * max(3, max((len(run) for line in lines for run in re.findall("`+", line)), default=0) + 1)
    return "\n".join([fence + language, *lines, fence])


def _objective_values(trial: optuna.trial.FrozenTrial, objective: Objective) -> str:
    values = trial.values or []
    return ", ".join(f"{name} = {value:.1f}" for name, value in zip(_metric_names(objective), values, strict=False))


def _metric_names(objective: Objective) -> list[str]:
    return [metric.name for metric in objective.metrics]


def _workloads(record: TrialRecord) -> list[str]:
    """A row per workload of a several-workload trial: its chosen load, throughput, relative, feasibility."""
    if not record.workloads:
        return []
    rows = ["| workload | weight | load | value | relative | feasible |", "|---|---|---|---|---|---|"]
    for w in record.workloads:
        if w.skipped:
            rows.append(f"| {w.name} | {w.weight:g} | skipped: could not lift the mix above the incumbent | | | |")
            continue
        value = f"{w.value:.1f}" if w.value is not None else w.failure_kind or ""
        relative = f"{w.relative:.3f}" if w.relative is not None else ""
        load = _load_text(w.load) if w.load is not None else ""
        rows.append(f"| {w.name} | {w.weight:g} | {load} | {value} | {relative} | {'yes' if w.feasible else 'no'} |")
    return [f"**Workloads** ({len(record.workloads)})", "\n".join(rows)]


def _loads(record: TrialRecord) -> list[str]:
    """The chosen load, and a row for every load measured (lightest first; by workload with several)."""
    benchmarks: list[LoadRecord] = record.benchmarks
    parts = [f"**Load**: {_load_text(record.load)}"] if record.load is not None and not record.workloads else []
    if not benchmarks:
        return parts
    several = bool(record.workloads)
    rows = ["| workload " * several + "| load | value | feasible | note |", "|---" * several + "|---|---|---|---|"]
    for level in benchmarks:
        value = f"{level.value:.1f}" if level.value is not None else ""
        missed = [f"misses {name.removeprefix('slo:')}" for name, v in (level.violations or {}).items()
                  if v > 0 and level.measured]  # fmt: skip
        note = ", ".join(filter(None, [level.failure_kind, "stopped early" * level.stopped_early, *missed]))
        named = f"| {level.workload} " if several else ""
        rows.append(f"{named}| {_load_text(level.load)} | {value} | {'yes' if level.feasible else 'no'} | {note} |")
    return [*parts, f"**Loads measured** ({len(benchmarks)})", "\n".join(rows)]


def _load_text(load: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in load.items()) or "the workload's own"


def _metrics(record: TrialRecord, objective: Objective) -> list[str]:
    """The key metrics at the chosen load (the objective's first), and what the trial cost."""
    metrics = record.metrics
    names = dict.fromkeys([*_metric_names(objective), *objective.slo, *METRICS])
    rows = [f"| {name} | {metrics[name]:.1f} {METRICS.get(name, '')} |" for name in names if name in metrics]
    parts = ["**Metrics**", "\n".join(["| metric | value |", "|---|---|", *rows])] if rows else []
    if record.node_minutes is not None:
        parts.append(f"**Cost**: {record.node_minutes:.2f} node-minutes")
    return parts


def save_trial_note(trial: optuna.Trial, note: str) -> None:
    """Show ``note`` on the trial's page in optuna-dashboard.

    optuna-dashboard keeps notes as study system attributes (so a finished trial's can still be written): its
    version and its text in pieces, as its ``save_note`` writes them, but in one storage call that reads this
    trial's note alone (``save_note`` makes four or more, two of which read every trial's note of the study).
    """
    trial_id = optuna_private.trial_id_of(trial)
    try:  # optuna-dashboard imported here: only a finished trial needs it
        version_key, prefix = optuna_private.dashboard_note_keys(trial_id)
    except ImportError:  # a dependency: a broken install, which would lose every trial's note
        raise AutotuneError("optuna-dashboard is missing, so trials get no dashboard note; "
                            "fix: pip install --force-reinstall autotune") from None  # fmt: skip

    def new_note(saved: dict) -> dict:
        pieces = optuna_private.dashboard_note_pieces(note, trial_id)
        old = sum(1 for key in saved if key.startswith(prefix))  # a longer note before: its extra pieces emptied
        return {version_key: saved.get(version_key, 0) + 1, **pieces,
                **{f"{prefix}{i}": "" for i in range(len(pieces), old)}}  # fmt: skip

    batch.update_study_system_attrs(
        trial.storage, optuna_private.study_id_of(trial.study), (version_key,), prefix, new_note
    )
