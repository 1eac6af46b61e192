"""What ``study best`` (and the end of ``study run``) prints: the best launch and the seed study's evidence table.

The launch comes from the user's space (an ``extra_args`` or ``env`` value may hold anything): it is printed with its
control characters as escapes (``autotune.text.terminal_safe``), and the table's cells as text, never as markup."""

from __future__ import annotations

import optuna
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune.cli.trials_table import value_text
from autotune.cli.workloads_view import mix_metric_text, mix_table
from autotune.config import ServerConfig
from autotune.errors import AutotuneError
from autotune.evidence.export import file_notes, printed_launch
from autotune.evidence.mix_table import is_mix_study
from autotune.records import TrialRecord
from autotune.search.ranking import best_trial
from autotune.space.metrics import metric_unit
from autotune.text import terminal_safe


def print_best(study: optuna.Study) -> None:
    best = best_trial(study)
    if best is None:
        raise AutotuneError(f"study {study.study_name!r}: no feasible trial (every configuration failed or was rejected); "
                            f"see `autotune study show --study {study.study_name}`")  # fmt: skip
    record = TrialRecord.of(best)
    simulated = "SIMULATED " if record.simulated is not None else ""
    metric = study.metric_names[0] if study.metric_names else "value"
    if is_mix_study(study):
        metric = mix_metric_text(record, metric)
    unit = metric_unit(metric)  # '' for a mix's ratio
    print(
        f"{simulated}best: trial {best.number}, {metric} = {value_text(best.values[0])}" + (f" {unit}" if unit else "")
    )
    notes = file_notes(ServerConfig.model_validate(record.config)) if record.config is not None else []
    print(terminal_safe("".join(f"{note}\n" for note in notes) + printed_launch(record.launch)))
    if is_mix_study(study):
        Console(width=max(Console().width, 160)).print(mix_table(study, best, simulated))
        return
    Console().print(baseline_table(study, best, simulated))


def baseline_table(study: optuna.Study, best: optuna.trial.FrozenTrial, simulated: str) -> Table:
    """The seed study's evidence table (autotune.evidence.report.baseline_rows), for the terminal."""
    from autotune.evidence.report import baseline_rows

    rows = baseline_rows(study, best)
    # the gain columns' headers explain themselves at length: under the table, so that the columns stay narrow
    gains = [column for column in rows.columns if column.startswith("best vs this")]
    title = Text(terminal_safe(f"{simulated}baseline vs best ({study.study_name})"))
    table = Table(title=title, caption="; ".join(gains))
    short = {
        gain: "best vs this" + (f" ({name})" if len(gains) > 1 else "")
        for gain, name in zip(gains, study.metric_names or ["value"], strict=False)
    }
    for column in rows.columns:
        table.add_column(
            short.get(column, column), justify="left" if column in ("configuration", "outcome") else "right"
        )
    for row in rows.itertuples(index=False):
        table.add_row(*(Text(terminal_safe(cell)) for cell in row))
    return table
