"""A study as evidence: its trials as a pandas table, plotly figures, and one self-contained HTML report.

Figures: the optimization history (every trial, infeasible and pruned ones at the bottom, coloured by outcome),
Optuna's parallel coordinates and parameter importances, the Pareto front of throughput against P99 latency, a
per-engine comparison, where the (GPU) time went, and the best command with the baseline-vs-best table.
"""

from __future__ import annotations

import html
import logging
import warnings
from datetime import datetime

import optuna
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio

from autotune.export import shell_script

log = logging.getLogger(__name__)
ATTRS = ("engine", "failure_kind", "failure_reason", "duplicate_of", "baseline", "total_token_throughput",
         "output_throughput", "p99_tpot_ms", "p99_ttft_ms", "mean_tpot_ms", "median_ttft_ms", "launch_s",
         "benchmark_s", "trial_s", "pruned_at")  # fmt: skip
LATENCY = "p99_tpot_ms"


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: number, state, outcome, value(s), attributes, and ``param:<name>`` columns."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        row = {"number": trial.number, "state": trial.state.name, "outcome": _outcome(trial),
               "value": trial.values[0] if trial.values else None,
               "simulated": "simulated" in attrs}  # fmt: skip
        row |= {name: attrs.get(name) for name in ATTRS}
        row |= {f"param:{name}": value for name, value in trial.params.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def _outcome(trial: optuna.trial.FrozenTrial) -> str:
    if trial.state == optuna.trial.TrialState.PRUNED:
        return "pruned"
    if trial.state != optuna.trial.TrialState.COMPLETE:
        return trial.state.name.lower()
    return trial.user_attrs.get("failure_kind") or "measured"


def history_figure(frame: pd.DataFrame, metric: str) -> go.Figure:
    """Every trial's value in order, failures at zero coloured by kind, and the best so far."""
    shown = frame.assign(value=frame.value.where(frame.outcome == "measured", 0.0).fillna(0.0))
    figure = px.scatter(shown, x="number", y="value", color="outcome", symbol="outcome",
                        hover_data=["engine", "failure_reason", "pruned_at"],
                        title="Optimization history (failed, rejected and pruned trials at 0, by outcome)")  # fmt: skip
    measured = shown[shown.outcome == "measured"].sort_values("number")
    figure.add_trace(go.Scatter(x=measured.number, y=measured.value.cummax(), mode="lines", name="best so far"))
    return figure.update_layout(xaxis_title="trial", yaxis_title=metric)


def pareto_figure(frame: pd.DataFrame) -> go.Figure:
    """Measured trials by total throughput and P99 TPOT, the Pareto-optimal ones joined by a line."""
    measured = frame[(frame.outcome == "measured") & frame[LATENCY].notna()].sort_values(LATENCY)
    front = measured[measured.total_token_throughput >= measured.total_token_throughput.cummax()]
    figure = px.scatter(measured, x=LATENCY, y="total_token_throughput", color="engine", hover_data=["number"],
                        title="Throughput vs P99 TPOT (the Pareto front joined)")  # fmt: skip
    figure.add_trace(go.Scatter(x=front[LATENCY], y=front.total_token_throughput, mode="lines+markers",
                                name="Pareto front", line={"dash": "dot"}))  # fmt: skip
    return figure


def engine_figure(frame: pd.DataFrame, metric: str) -> go.Figure:
    measured = frame[frame.outcome == "measured"]
    figure = px.box(measured, x="engine", y="value", points="all", hover_data=["number"],
                    title="Per engine: measured trials")  # fmt: skip
    return figure.update_layout(yaxis_title=metric)


def time_figure(frame: pd.DataFrame) -> go.Figure:
    """Where the time went: engine start-ups, benchmarks, failed launches, pruned trials (seconds, and trial counts)."""
    launched = frame[frame.trial_s.notna()]
    failed = launched.failure_kind.notna()
    parts = {
        "start-ups (measured)": launched[~failed & (launched.outcome == "measured")].launch_s.sum(),
        "benchmarks (measured)": launched[~failed & (launched.outcome == "measured")].benchmark_s.sum(),
        "failed launches": launched[failed].trial_s.sum(),
        "pruned trials": launched[launched.outcome == "pruned"].trial_s.sum(),
    }
    counts = {"rejected before launch": int((frame.failure_kind == "rejected").sum()),
              "duplicates (not relaunched)": int(frame.duplicate_of.notna().sum())}  # fmt: skip
    title = "Where the time went (s); " + ", ".join(f"{k}: {v} trials" for k, v in counts.items())
    return go.Figure(go.Bar(x=list(parts), y=[float(v or 0) for v in parts.values()])).update_layout(title=title)


def optuna_figures(study: optuna.Study) -> dict[str, go.Figure]:
    """Optuna's own parallel coordinates and parameter importances (PED-ANOVA), where the study allows them."""
    figures = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, plot in (("Parallel coordinates", optuna.visualization.plot_parallel_coordinate),
                           ("Parameter importances", optuna.visualization.plot_param_importances)):  # fmt: skip
            try:
                figures[name] = plot(study, target=lambda t: t.values[0], target_name=_metric(study))
            except (ValueError, RuntimeError, ZeroDivisionError) as exc:
                log.warning("%s: not drawn (%s)", name, exc)
    return figures


def _metric(study: optuna.Study) -> str:
    return study.metric_names[0] if study.metric_names else "value"


def baseline_table(frame: pd.DataFrame, best_number: int) -> pd.DataFrame:
    """Each engine's baseline and the best trial: total tok/s, mean TPOT, outcome, and the best's gain over each."""
    columns = ["number", "engine", "outcome", "total_token_throughput", "mean_tpot_ms"]
    baselines = frame.loc[frame.baseline == True, columns].assign(row="baseline")  # noqa: E712 (None is not False)
    best = frame.loc[frame.number == best_number, columns].assign(row="best")
    best_total = float(best.total_token_throughput.iloc[0])
    gains = [f"{(best_total / t - 1) * 100:+.1f}%" if t and t == t else "" for t in baselines.total_token_throughput]
    table = pd.concat([baselines.assign(**{"best vs this": gains}), best.assign(**{"best vs this": ""})])
    return table[["row", *columns, "best vs this"]]


def render_html(study: optuna.Study, best: optuna.trial.FrozenTrial | None) -> str:
    """The whole report as one HTML document (plotly's JavaScript inlined once: it opens offline)."""
    frame = trials_frame(study)
    metric = _metric(study)
    figures = {"Optimization history": history_figure(frame, metric), **optuna_figures(study),
               "Throughput vs P99 latency": pareto_figure(frame), "Per-engine comparison": engine_figure(frame, metric),
               "Where the time went": time_figure(frame)}  # fmt: skip
    simulated = "SIMULATED " if frame.simulated.any() else ""
    parts = [f"<h1>{simulated}autotune study {html.escape(study.study_name)}</h1>",
             f"<p>{len(frame)} trials; generated {datetime.now():%Y-%m-%d %H:%M}. Outcomes: "
             f"{html.escape(', '.join(f'{k} {v}' for k, v in frame.outcome.value_counts().items()))}.</p>"]  # fmt: skip
    if best is not None:
        parts += [f"<h2>Best: trial {best.number}, {html.escape(metric)} = {best.values[0]:.2f}</h2>",
                  f"<pre id='best-command'>{html.escape(shell_script(best.user_attrs['launch']))}</pre>",
                  baseline_table(frame, best.number).to_html(index=False, float_format="%.1f", classes="baseline")]  # fmt: skip
    for index, (title, figure) in enumerate(figures.items()):
        plot = pio.to_html(figure, full_html=False, include_plotlyjs="inline" if index == 0 else False,
                           div_id=f"figure-{index}")  # fmt: skip
        parts.append(
            f"<section class='figure' data-title='{html.escape(title)}'><h2>{html.escape(title)}</h2>{plot}</section>"
        )
    columns = ["number", "outcome", "engine", "value", "launch_s", "benchmark_s", "failure_reason"]
    parts += ["<h2>All trials</h2>", frame[columns].to_html(index=False, float_format="%.2f", na_rep="")]
    style = "body{font-family:sans-serif;margin:2em} pre{background:#f4f4f4;padding:1em;white-space:pre-wrap}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(study.study_name)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")  # fmt: skip
