"""The report's part for a several-workload study: the seed's table per workload and a per-workload gain chart."""

from __future__ import annotations

import html

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.evidence.mix_table import TABLE_HEADERS, is_mix_study, references_text, table_lines, workload_rows
from autotune.search.ranking import best_trial


def workload_table_html(study: optuna.Study, best: optuna.trial.FrozenTrial) -> str:
    """Per workload: baseline vs the mix's best (gain), its own best and the regret, as an HTML table."""
    metric = study.metric_names[0] if study.metric_names else "value"
    rows = workload_rows(study, best)
    frame = pd.DataFrame(table_lines(rows, metric), columns=TABLE_HEADERS)
    caption = (f"<p>Each workload's {html.escape(metric)}: the study's baseline, the one launch command's (the mix's "
               "best) and each workload's own best trial; regret is what the one command costs on it. "
               f"{html.escape(references_text(rows))}.</p>")  # fmt: skip
    return caption + frame.to_html(index=False, classes="workloads")


def workload_gain_figure(study: optuna.Study) -> go.Figure | None:
    """Per workload, the gain over the baseline of the mix's best and of the workload's own best (None for a
    one-workload study, or before a feasible trial)."""
    best = best_trial(study)
    if best is None or not is_mix_study(study):
        return None
    rows = workload_rows(study, best)
    names = [row.workload for row in rows]
    own = [
        None if row.own_best is None or not row.baseline else 100 * (row.own_best / row.baseline - 1) for row in rows
    ]
    figure = go.Figure([
        go.Bar(name=f"the mix's best (trial {best.number})", x=names, y=[row.gain_pct for row in rows]),
        go.Bar(name="each workload's own best", x=names, y=own,
               text=[f"#{row.own_best_trial}" if row.own_best_trial is not None else "" for row in rows]),
    ])  # fmt: skip
    figure.update_layout(barmode="group", yaxis_title="gain over the baseline (%)", xaxis_title="workload",
                         title="one launch command for every workload, against each workload's own best")  # fmt: skip
    return figure
