"""``study show``'s terminal views: every trial on one row that fits 80 columns, and one trial in full (``--trial N``).

A row holds what tells trials apart: its value, its outcome in words (the failure, ``pruned``, the SLO it misses with
the measured value and the limit, ``baseline``, the rule that rejected it), its cost, its load and the parameters that
vary between the study's trials, one ``name=value`` a line so that none is cut. Parameters every trial shares are
printed once above the table.

Every value is printed as text, never as markup: a knob's value ``[red]x[/]`` or ``:warning:`` reads as written, and
a control character in it (ESC, BEL) as its escape (``autotune.text.terminal_safe``), not obeyed by the terminal.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune.records import Outcome
from autotune.text import terminal_safe


def plain(text: str) -> Text:
    """``text`` for rich as it is: no markup, no emoji codes, control characters shown as escapes."""
    return Text(terminal_safe(text))


def slo_miss_text(trial, slos: dict[str, float]) -> str:
    """'misses SLO: p99_tpot_ms 63.2 > 50' for a measured trial that missed an SLO; '' otherwise."""
    from autotune.evidence.report import _slo_misses  # the report's wording, so both say the same

    misses = _slo_misses(trial, slos)
    return f"misses SLO: {misses}" if misses else ""


def outcome_parts(r: dict) -> list[str]:
    """What became of the trial, in words: its state when it did not complete, its failure, the SLO it misses."""
    state = "" if r["state"] == "COMPLETE" else r["state"].lower()
    parts = [r["failure_kind"] or state, r.get("slo_miss") or ""]
    parts += ["baseline"] * r["baseline"] + ([f"prior #{r['prior']}"] if r["prior"] else [])
    parts += [f"by {r['rejected_by']}"] if r["rejected_by"] else []
    parts += [f"taught {r['taught_rule']}"] if r["taught_rule"] else []
    parts += [f"dup of #{r['duplicate_of']}"] if r["duplicate_of"] is not None else []
    parts = [p for p in parts if p]
    return parts or ([Outcome.MEASURED.value] if r["state"] == "COMPLETE" and r["values"] else [])


def row_outcome(r: dict) -> str:
    return " ".join(outcome_parts(r))


def _outcome_cell(r: dict) -> str:
    """The outcome one part a line, each SLO missed on a line of its own (a miss is never split)."""
    lines = []
    for part in outcome_parts(r):
        head, sep, misses = part.partition("misses SLO: ")
        lines += [head, "misses SLO:", *misses.split(", ")] if sep else [part]
    return "\n".join(line for line in lines if line)


def varying(rows: list[dict]) -> tuple[list[str], dict]:
    """(the parameters whose value differs between trials, in first-seen order; those with one value in every trial
    that has them: an engine's own parameters are in its trials only)."""
    names = list(dict.fromkeys(name for r in rows for name in r["params"]))
    values = {name: {repr(r["params"][name]) for r in rows if name in r["params"]} for name in names}
    shared = {name: next(r["params"][name] for r in rows if name in r["params"]) for name in names
              if len(values[name]) == 1}  # fmt: skip
    return [name for name in names if name not in shared], shared


def value_text(value: float) -> str:
    """A trial's value to read: throughputs to one decimal, small values (a mix's ratio near 1, a latency in
    seconds) to four significant digits, so that 1.167 and 1.2 stay apart."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"


def load_text(load: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (load or {}).items())


def gpu_text(facts: dict | None) -> str:
    """Memory in use over the GPUs, before the launch → once ready → after the stop ("not released" if it stayed)."""
    if not facts:
        return ""
    used = [str(sum(facts[k].values())) if facts.get(k) else "-" for k in ("before", "ready", "after")]
    return "→".join(used) + ("" if facts.get("released") is not False else " not released")


def engine_baselines(rows: list[dict]) -> dict[str | None, dict]:
    """Each engine's baseline parameters: its first baseline trial's (an engine without one: absent)."""
    found: dict[str | None, dict] = {}
    for r in rows:
        if r["baseline"]:
            found.setdefault(r["engine"], r["params"])
    return found


def _shown_params(r: dict, names: list[str], baselines: dict[str | None, dict]) -> list[str]:
    """The varying parameters worth a line: a baseline's engine alone (its defaults); another trial's that differ
    from its engine's baseline (all of them where that engine has no baseline trial); the engine always."""
    params = r["params"]
    if r["duplicate_of"] is not None:  # its parameters are the measured trial's, on that trial's row
        return [f"as #{r['duplicate_of']}"]
    if r["baseline"]:
        return [f"{name}={params[name]}" for name in names if name == "engine" and name in params] + ["(its defaults)"]
    base = baselines.get(r["engine"])
    return [f"{name}={params[name]}" for name in names
            if name in params and (base is None or name == "engine" or base.get(name) != params[name])]  # fmt: skip


def _details(r: dict, names: list[str], baselines: dict[str | None, dict] | None = None) -> str:
    """The row's load, its parameters that differ from its engine's baseline and its GPUs, one item a line (an item
    is never split)."""
    lines = [f"{k}={v}" for k, v in (r["load"] or {}).items()]
    if len(r["benchmarks"]) > 1:
        lines[-1:] = [f"{lines[-1]} ({len(r['benchmarks'])} loads)"] if lines else []
    lines += _shown_params(r, names, baselines or {})
    lines += [f"GPUs {','.join(r['gpus'])}"] if r["gpus"] else []
    lines += [f"GPU MiB {gpu_text(r['gpu_memory_mib'])}"] if r["gpu_memory_mib"] else []
    return "\n".join(lines)


def print_trials(console: Console, name: str, rows: list[dict]) -> None:
    """One row a trial, readable at 80 columns: only the outcome column wraps (at spaces)."""
    names, shared = varying(rows)
    if shared:
        console.print(
            plain(
                "the same in every trial (None: the engine's default): "
                + ", ".join(f"{k}={v}" for k, v in shared.items())
            )
        )
    table = Table(title=plain(f"study {name}"), box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("outcome", ratio=1, min_width=12, overflow="fold")
    table.add_column("node-min", justify="right", no_wrap=True)
    table.add_column("load, changes from baseline", no_wrap=True)
    baselines = engine_baselines(rows)
    for r in rows:
        value = "-" if not r["values"] or r["failure_kind"] else value_text(r["values"][0])
        table.add_row(str(r["number"]), value, plain(_outcome_cell(r)), f"{r['node_minutes'] or 0:.1f}",
                      plain(_details(r, names, baselines)))  # fmt: skip
    console.print(table)
    console.print(plain(f"one trial in full: `autotune study show --study {name} --trial N`"), style="dim")


def print_trial(console: Console, r: dict, failure_reason: str) -> None:
    """One trial in full: every parameter, its load and value, its outcome and why, each load measured, its cost."""
    console.print(plain(f"trial {r['number']} ({r['state'].lower()}, engine {r['engine'] or '-'})"), style="bold")
    items = [("outcome", row_outcome(r)),
             ("value", "-" if not r["values"] or r["failure_kind"] else ", ".join(value_text(v) for v in r["values"])),
             ("load", load_text(r["load"]) or "-"), ("reason", failure_reason),
             ("node-minutes", f"{r['node_minutes'] or 0:.2f}"), ("GPUs", ",".join(r["gpus"] or [])),
             ("GPU MiB before→ready→after", gpu_text(r["gpu_memory_mib"]))]  # fmt: skip
    for key, text in items:
        if text:
            console.print(plain(f"{key}: {text}"))
    console.print("parameters:")
    for key, value in r["params"].items():
        console.print(plain(f"  {key}={value}"))
    if r.get("workloads"):  # a mix trial: what each workload gave, relative to the study's baseline of it
        console.print(f"mix ({r.get('mix') or 'geomean'}) of the workloads:")
        for w in r["workloads"]:
            console.print(plain(f"  {w['name']} (weight {w['weight']:g}): {_workload_text(w)}"))
    console.print("loads measured:" if r["benchmarks"] else "no load measured")
    for level in r["benchmarks"]:
        measured = f"{level['value']:.1f}" if level.get("value") is not None else "-"
        note = level.get("failure_kind") or ("meets the SLOs" if level.get("feasible") else "misses SLO")
        where = " ".join(part for part in (level.get("workload"), load_text(level.get("load"))) if part) or "-"
        console.print(plain(f"  {where}: {measured}" + (f" ({note})" if note else "")))


def _workload_text(w: dict) -> str:
    if w.get("skipped"):
        return "skipped (the workloads left could not lift the mix above the best)"
    if w.get("value") is None:
        return f"failed ({w['failure_kind']})" if w.get("failure_kind") else "not measured"
    relative = f" = {w['relative']:.3f}x the baseline's" if w.get("relative") is not None else ""
    at = f" at {load_text(w['load'])}" if w.get("load") else ""
    return f"{w['value']:.1f}{relative}{at}" + ("" if w.get("feasible") else " (misses SLO)")
