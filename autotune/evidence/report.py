"""A study as evidence: its trials and their measured loads as pandas tables, plotly figures, and one self-contained
HTML report.

Figures, by their stable titles: the optimization history; throughput per GPU against interactivity and against TTFT
(every measured load of every trial a point, with the Pareto front); the best configurations against load;
parallel coordinates over the parameters that vary; parameter importances; a per-engine comparison; where the time
went. Then the best command, the baseline-vs-best table and what the study cost. Every ranking follows the study's
direction (``autotune.search.ranking``).
"""

from __future__ import annotations

import html
import logging
import math
import warnings
from datetime import datetime
from enum import StrEnum

import optuna
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots
from pydantic import ValidationError

from autotune import records
from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.errors import UsageError
from autotune.evidence.export import printed_launch
from autotune.evidence.mix_report import is_mix_study, workload_gain_figure, workload_table_html
from autotune.records import RECORDED, Outcome, StudyRecord, TrialRecord
from autotune.search.ranking import feasible, maximizes, ranked
from autotune.space.schema import load_order

log = logging.getLogger(__name__)
ATTRS = ("engine", "failure_kind", "failure_reason", "duplicate_of", "baseline", "launched", "node_minutes",
         "total_token_throughput", "output_throughput", "p99_tpot_ms", "p99_ttft_ms", "mean_tpot_ms",
         "median_ttft_ms", "launch_s", "benchmark_s", "trial_s", "pruned_at")  # fmt: skip
ENGINE_DEFAULT, NOT_APPLICABLE = "engine default", "n/a"
TOKENS_PER_GPU = "total tokens/s per GPU"
TOP_CONFIGURATIONS = 3


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: number, state, outcome, feasible, value(s), GPUs, attributes, ``param:<name>`` columns."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        record = TrialRecord.of(trial)
        row = {"number": trial.number, "state": trial.state.name, "outcome": _outcome(trial),
               "feasible": feasible(trial), "value": trial.values[0] if trial.values else None,
               "simulated": record.simulated is not None, "gpus": _gpus(record.config)}  # fmt: skip
        row |= {name: _attr(record, name) for name in ATTRS}
        row |= {f"param:{name}": value for name, value in trial.params.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def loads_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per measured load of every trial (its sweep's levels): trial number, engine, load, its rank among the
    study's loads (lightest first), feasible, GPUs, the load's metrics, total tokens/s per GPU and tokens/s per user
    (1000 / mean TPOT: the speed at which one user sees tokens arrive)."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        record = TrialRecord.of(trial)
        gpus = _gpus(record.config)
        for level in record.measured_loads:  # a load that failed measured nothing
            row = {"number": trial.number, "engine": record.engine, "load": _load_label(level.load),
                   "order": load_order(level.load), "feasible": level.feasible, "gpus": gpus}  # fmt: skip
            rows.append(row | level.metrics)
    frame = pd.DataFrame(rows, columns=["number", "engine", "load", "order", "feasible", "gpus", *RECORDED])
    ranks = {order: rank for rank, order in enumerate(sorted(set(frame.order)))}
    frame = frame.assign(load_rank=frame.order.map(ranks)).drop(columns="order")
    tpot = pd.to_numeric(frame.mean_tpot_ms)
    return frame.assign(tokens_per_gpu=pd.to_numeric(frame.total_token_throughput) / pd.to_numeric(frame.gpus),
                        tokens_per_user=1000 / tpot.where(tpot > 0))  # fmt: skip


def _attr(record: TrialRecord, name: str):
    """A field of the record, or a metric of its chosen load, as the trials table shows it (None: not stored)."""
    if name in TrialRecord.model_fields:
        if name not in record.model_fields_set:  # never stored: no default shown in its place
            return None
        value = getattr(record, name)
        return str(value) if isinstance(value, StrEnum) else value
    return record.metrics.get(name)


def _outcome(trial: optuna.trial.FrozenTrial) -> str:
    """What the report groups a trial under: ``measured`` for any trial that served (an SLO miss, or a duplicate of
    a measured trial, included: its value is drawn), else its failure, ``pruned``, or its state while it has none."""
    if trial.state == optuna.trial.TrialState.PRUNED:
        return Outcome.PRUNED.value
    if trial.state != optuna.trial.TrialState.COMPLETE:
        return trial.state.name.lower()
    return str(records.failure_kind(trial) or Outcome.MEASURED)


def _gpus(config: dict | None) -> int | None:
    """GPUs the trial's launch occupied, by its engine's own rule on the stored configuration (None: unknown)."""
    if not config:
        return None
    try:
        return get_engine(config["engine"]).gpus_used(ServerConfig.model_validate(config))
    except (KeyError, UsageError, ValidationError):  # stored by another version of autotune: leave it out
        return None


def _load_label(load: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in load.items()) or "workload as written"


def _slos(study: optuna.Study) -> dict[str, float]:
    return StudyRecord.of(study).slo


def _slo_misses(trial: optuna.trial.FrozenTrial, slos: dict[str, float]) -> str:
    """The SLOs a measured trial missed, as 'p99_tpot_ms 63.2 > 50' (its SLO constraints are positive); '' if none."""
    if records.failure_kind(trial):
        return ""
    metrics = TrialRecord.of(trial).metrics
    misses = []
    for metric, limit in slos.items():
        if (trial.constraints or {}).get(f"slo:{metric}", 0) > 0:
            measured = metrics.get(metric)
            misses.append(f"{metric} {measured:.1f} > {limit:g}" if measured is not None else f"{metric} > {limit:g}")
    return ", ".join(misses)


def pareto_front(frame: pd.DataFrame, x: str, y: str, maximize_x: bool, maximize_y: bool) -> pd.DataFrame:
    """The rows of ``frame`` no other row beats on both ``x`` and ``y`` (in their directions), sorted by ``x``.
    Of identical points one is kept."""
    sign_x, sign_y = (1 if maximize_x else -1), (1 if maximize_y else -1)
    points = frame.dropna(subset=[x, y])
    ordered = points.assign(_x=sign_x * points[x], _y=sign_y * points[y]).sort_values(["_x", "_y"], ascending=False)
    # best x first: a row is on the front when its y beats every row before it (those have at least its x)
    beaten = ordered._y.cummax().shift(fill_value=-math.inf)
    return ordered[ordered._y > beaten].drop(columns=["_x", "_y"]).sort_values(x)


# -- figures ------------------------------------------------------------------------------------------------------
def history_figure(frame: pd.DataFrame, metric: str, maximize: bool) -> go.Figure:
    """Every trial in order: measured values (SLO misses marked), the best feasible value so far in the study's
    direction, and, on a row of their own, the trials that gave no value (failed, rejected, pruned)."""
    # A failure has no value: drawn at 0 it would look best in a minimise study, and drawn at any made-up value it
    # would stretch the axis; so failures get a marker row of their own under the measured trials.
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.82, 0.18], vertical_spacing=0.04)
    measured = frame[frame.outcome == "measured"].sort_values("number")
    for name, part, symbol in (("meets constraints", measured[measured.feasible], "circle"),
                               ("misses SLO", measured[~measured.feasible], "circle-open")):  # fmt: skip
        if not part.empty:
            points = go.Scatter(x=part.number, y=part.value, mode="markers", name=name, text=part.engine,
                                marker_symbol=symbol)  # fmt: skip
            figure.add_trace(points, row=1, col=1)
    best = measured[measured.feasible]
    so_far = best.value.cummax() if maximize else best.value.cummin()
    figure.add_trace(
        go.Scatter(x=best.number, y=so_far, mode="lines", line_shape="hv", name="best so far"), row=1, col=1
    )
    for outcome, part in frame[frame.outcome != "measured"].groupby("outcome"):
        figure.add_trace(go.Scatter(x=part.number, y=part.outcome, mode="markers", name=outcome, marker_symbol="x",
                                    text=part.failure_reason.fillna(part.pruned_at)), row=2, col=1)  # fmt: skip
    better = "higher" if maximize else "lower"
    figure.update_layout(title=f"Optimization history ({metric}, {better} is better; trials with no value below)")
    return figure.update_xaxes(title_text="trial", row=2, col=1).update_yaxes(title_text=metric, row=1, col=1)


def front_figure(loads: pd.DataFrame, x: str, maximize_x: bool, x_title: str) -> go.Figure:
    """Total tokens/s per GPU against ``x``: every measured load of every trial a point, coloured by engine (open: it
    misses an SLO), the Pareto front of the loads that meet the SLOs, and each engine's own front (dashed)."""
    shown = loads.dropna(subset=[x, "tokens_per_gpu"])
    shown = shown.assign(slo=shown.feasible.map({True: "meets SLOs", False: "misses an SLO"}))
    title = f"{TOKENS_PER_GPU} vs {x_title}: every measured load, the Pareto front dotted"
    figure = px.scatter(shown, x=x, y="tokens_per_gpu", color="engine", title=title,
                        symbol="slo" if not shown.feasible.all() else None,
                        symbol_map={"meets SLOs": "circle", "misses an SLO": "circle-open"},
                        hover_data=["number", "load", "gpus"])  # fmt: skip
    feasible = shown[shown.feasible]
    front = pareto_front(feasible, x, "tokens_per_gpu", maximize_x, True)
    figure.add_trace(go.Scatter(x=front[x], y=front.tokens_per_gpu, mode="lines+markers", name="Pareto front",
                                line={"dash": "dot", "color": "black"},
                                marker={"symbol": "circle-open", "size": 12, "color": "black"}))  # fmt: skip
    colours = {trace.name: trace.marker.color for trace in figure.data if trace.name in set(shown.engine)}
    for engine, part in feasible.groupby("engine"):  # each engine's own front: which engine wins where
        own = pareto_front(part, x, "tokens_per_gpu", maximize_x, True)
        figure.add_trace(go.Scatter(x=own[x], y=own.tokens_per_gpu, mode="lines", name=f"{engine} front",
                                    line={"dash": "dash", "width": 1, "color": colours.get(engine)}))  # fmt: skip
    return figure.update_layout(xaxis_title=x_title, yaxis_title=TOKENS_PER_GPU)


def load_figure(loads: pd.DataFrame, best: list[optuna.trial.FrozenTrial]) -> go.Figure:
    """The best configurations' sweeps (``best``, best first): throughput and latencies at every load measured."""
    panels = {
        "total_token_throughput": "total tokens/s",
        "p99_ttft_ms": "P99 TTFT (ms)",
        "p99_tpot_ms": "P99 TPOT (ms)",
    }
    figure = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels.values()))
    for rank, trial in enumerate(best):
        sweep = loads[loads.number == trial.number].sort_values("load_rank")
        colour = px.colors.qualitative.Plotly[rank % len(px.colors.qualitative.Plotly)]
        name = f"#{rank + 1}: trial {trial.number} ({TrialRecord.of(trial).engine})"
        for column, metric in enumerate(panels, start=1):
            line = go.Scatter(x=sweep.load, y=sweep[metric], mode="lines+markers", line_color=colour, name=name,
                              legendgroup=name, showlegend=column == 1)  # fmt: skip
            figure.add_trace(line, row=1, col=column)
    order = loads.sort_values("load_rank").load.unique().tolist()
    figure.update_xaxes(type="category", categoryorder="array", categoryarray=order, title_text="load", tickangle=-30)
    return figure.update_layout(title=f"The best {len(best)} configurations against load (their sweeps)")


def parallel_figure(study: optuna.Study, metric: str, maximize: bool) -> go.Figure:
    """Feasible trials over the parameters that vary among them (an axis that never changes says nothing): None is
    the engine's default, a parameter of another engine than the trial's is n/a."""
    trials = [t for t in study.get_trials(deepcopy=False) if feasible(t) and t.values]
    names = list(dict.fromkeys(name for t in trials for name in t.params))
    dimensions = []
    for name in names:
        values = sorted({t.params[name] for t in trials if name in t.params}, key=_value_order)
        if len(values) < 2:
            continue
        labels = [ENGINE_DEFAULT if v is None else str(v) for v in values]
        codes = [values.index(t.params[name]) if name in t.params else len(values) for t in trials]
        if len(values) in codes:
            labels.append(NOT_APPLICABLE)
        dimensions.append({"label": name, "values": codes, "tickvals": list(range(len(labels))), "ticktext": labels})
    values = [t.values[0] for t in trials]
    dimensions.append({"label": metric, "values": values})
    line = {"color": values, "colorscale": "Viridis", "reversescale": not maximize, "showscale": True}
    # slanted names and small ticks: a space varies a dozen parameters or more
    figure = go.Figure(go.Parcoords(dimensions=dimensions, line=line, labelangle=-30, tickfont={"size": 10}))
    title = f"Parallel coordinates: feasible trials over the parameters that vary, by {metric}"
    return figure.update_layout(title={"text": title, "y": 0.97, "yanchor": "top"}, height=560,
                                margin={"t": 170, "l": 90})  # fmt: skip


def _value_order(value: object) -> tuple:
    """None (the engine's default) first, then numbers by size, then text."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, int | float):
        return (1, value, "")
    return (2, 0, str(value))


def importance_figure(study: optuna.Study, metric: str) -> go.Figure | None:
    """Optuna's parameter importances (PED-ANOVA) over the feasible trials, where the study allows them."""

    def measured(trial: optuna.trial.FrozenTrial) -> float:
        # a failure's value is a stand-in (0, or 1e12 when minimising), no measurement: NaN leaves it out
        return trial.values[0] if feasible(trial) else math.nan

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not a line per failed trial left out
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            figure = optuna.visualization.plot_param_importances(study, target=measured, target_name=metric)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        log.warning("Parameter importances: not drawn (%s)", exc)
        return None
    finally:
        optuna.logging.set_verbosity(verbosity)
    return figure.update_layout(height=max(450, 22 * len(figure.data[0].y)) if figure.data else 450)


def engine_figure(frame: pd.DataFrame, metric: str) -> go.Figure:
    measured = frame[(frame.outcome == "measured") & frame.feasible]
    figure = px.box(measured, x="engine", y="value", points="all", hover_data=["number"],
                    title="Per engine: trials that met their constraints")  # fmt: skip
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


def figures(study: optuna.Study) -> dict[str, go.Figure]:
    """Every figure of the report by its stable title, in the report's order (one not drawable is left out)."""
    frame, loads = trials_frame(study), loads_frame(study)
    metric, maximize = _metric(study), maximizes(study)
    # a duplicate repeats an earlier trial's outcome without a sweep of its own
    launched = [t for t in ranked(study.get_trials(deepcopy=False), maximize) if not records.is_duplicate(t)]
    drawn = {
        "Optimization history": history_figure(frame, metric, maximize),
        "Throughput per GPU vs interactivity": front_figure(loads, "tokens_per_user", True,
                                                            "tokens/s per user (1000 / mean TPOT ms)"),
        "Throughput per GPU vs TTFT": front_figure(loads, "p99_ttft_ms", False, "P99 TTFT (ms)"),
        "Best configurations against load": load_figure(loads, launched[:TOP_CONFIGURATIONS]),
        "Parallel coordinates": parallel_figure(study, metric, maximize),
        "Parameter importances": importance_figure(study, metric),
        "Per-engine comparison": engine_figure(frame, metric),
        "Where the time went": time_figure(frame),
        "Per-workload gain": workload_gain_figure(study),  # a several-workload study's
    }  # fmt: skip
    return {title: figure for title, figure in drawn.items() if figure is not None}


def _metric(study: optuna.Study) -> str:
    return study.metric_names[0] if study.metric_names else "value"


# -- tables and text ----------------------------------------------------------------------------------------------
def gain_column(metric: str, maximize: bool) -> str:
    """The header of a baseline table's gain column: what its numbers mean."""
    better = "higher" if maximize else "lower"
    return f"best vs this: change of {metric} from this baseline to the best (+ = better: {better})"


def baseline_rows(study: optuna.Study, best: optuna.trial.FrozenTrial) -> pd.DataFrame:
    """Each engine's baseline and the best trial, display-ready (text in every cell) for the HTML report and the
    terminal: configuration, trial, outcome (measured, the failure, or the SLOs missed), the study's objective
    metrics and its SLO metrics, and per objective metric the best's change from each baseline, signed so that
    + is better in the metric's direction."""
    metrics = study.metric_names or ["value"]
    slos = _slos(study)
    best_values = _shown_values(best, metrics, slos)
    rows = [(f"{TrialRecord.of(t).engine} baseline", t, False) for t in study.get_trials(deepcopy=False)
            if records.is_baseline(t)] + [(f"best ({TrialRecord.of(best).engine})", best, True)]  # fmt: skip
    table = []
    for label, trial, is_best in rows:
        values = _shown_values(trial, metrics, slos)
        misses = _slo_misses(trial, slos)
        row = {"configuration": label, "trial": str(trial.number),
               "outcome": f"misses SLO: {misses}" if misses else _outcome(trial)}  # fmt: skip
        row |= {name: "" if value is None else f"{value:.1f}" for name, value in values.items()}
        for index, metric in enumerate(metrics):
            maximize = maximizes(study, index)
            row[gain_column(metric, maximize)] = "" if is_best else _gain(values[metric], best_values[metric], maximize)
        table.append(row)
    return pd.DataFrame(table)


def _gain(this: float | None, best: float, maximize: bool) -> str:
    """The best's change from ``this`` in % of ``this``, + where the best is better; '' where this measured nothing."""
    if not this:
        return ""
    return f"{((best - this) if maximize else (this - best)) / this * 100:+.1f}%"


def _shown_values(trial: optuna.trial.FrozenTrial, metrics: list[str], slos: dict[str, float]) -> dict:
    """A trial's objective values and SLO metrics, or None for each where it measured nothing (failed, pruned)."""
    measured = trial.state == optuna.trial.TrialState.COMPLETE and not records.failure_kind(trial)
    values = dict(zip(metrics, trial.values if measured else [None] * len(metrics), strict=True))
    stored = TrialRecord.of(trial).metrics
    return values | {m: stored.get(m) if measured else None for m in slos if m not in values}


def cost_line(frame: pd.DataFrame) -> str:
    """What the study cost: node-hours in all and on failures, and how many launches failed."""
    minutes = pd.to_numeric(frame.node_minutes).fillna(0.0)
    failed = frame.failure_kind.notna()
    failed_launches = int((failed & frame.launched.eq(True)).sum())
    simulated = " (the simulator's virtual costs)" if frame.simulated.any() else ""
    return (f"Cost{simulated}: {minutes.sum() / 60:.1f} node-hours in all, {minutes[failed].sum() / 60:.1f} "
            f"node-hours on failures; {failed_launches} failed launches.")  # fmt: skip


def render_html(study: optuna.Study, best: optuna.trial.FrozenTrial | None) -> str:
    """The whole report as one HTML document (plotly's JavaScript inlined once: it opens offline)."""
    frame = trials_frame(study)
    metric = _metric(study)
    simulated = "SIMULATED " if frame.simulated.any() else ""
    parts = [f"<h1>{simulated}autotune study {html.escape(study.study_name)}</h1>",
             f"<p>{len(frame)} trials; generated {datetime.now():%Y-%m-%d %H:%M}. Outcomes: "
             f"{html.escape(', '.join(f'{k} {v}' for k, v in frame.outcome.value_counts().items()))}.</p>",
             f"<p id='cost'>{html.escape(cost_line(frame))}</p>"]  # fmt: skip
    if best is not None:
        parts += [f"<h2>Best: trial {best.number}, {html.escape(metric)} = {best.values[0]:.2f}</h2>",
                  f"<pre id='best-command'>{html.escape(printed_launch(TrialRecord.of(best).launch))}</pre>",
                  workload_table_html(study, best) if is_mix_study(study) else
                  baseline_rows(study, best).to_html(index=False, classes="baseline")]  # fmt: skip
    for index, (title, figure) in enumerate(figures(study).items()):
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
