"""What a study learns from its failures, beyond the exact configuration that failed.

- **Learned rules.** A failed start whose error names one parameter's value ("Unsupported speculative method:
  'mtp'") becomes a rule of the study: no later trial with that value is launched. A value counts as named when a
  word of it, or of the flags it renders to, appears in an error line of the engine's log and in no other parameter's
  value or flags; a value some trial already served with is never blamed. Rules live in the study's user
  attributes (``learned_rule:<param>=<value>``), so a restarted study and every worker on the storage see them.
- **Out-of-memory dominance.** Memory need is monotone in some knobs (docs/search.md, "Failures are learned"): a
  configuration that needs at least as much memory as one that ran out at a load runs out there too, so it is
  measured only below that load, and not launched at all when the other one ran out at its lightest load.
"""

from __future__ import annotations

import re
from typing import Any

import optuna

from autotune import records
from autotune.config import ServerConfig
from autotune.engines.base import Engine
from autotune.errors import FailureKind
from autotune.search import warm_rules
from autotune.text import shorten

LEARNABLE = (FailureKind.UNSUPPORTED, FailureKind.BAD_FLAG, FailureKind.CRASH)
_ERROR_LINE = re.compile(r"error|exception|unsupported|not supported|invalid|unrecognized|not implemented|assert",
                         re.IGNORECASE)  # fmt: skip
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_COMMON = {"none", "null", "true", "false", "auto", "default", "error", "the", "and", "for", "not", "with"}

# Knobs whose larger value needs more GPU memory (context, running requests, prefill chunk).
MORE_IS_MORE = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
# The memory fraction: a smaller one leaves the engine less room (weights and KV cache must fit inside it).
LESS_IS_MORE = ("gpu_memory_utilization",)
KV_BYTES = {None: 2, "auto": 2, "bf16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
LAYOUT = ("pp", "dp", "ep", "dp_attention", "dcp")  # with these equal, fewer tensor-parallel GPUs hold more each


def rule_name(param: str, value: Any) -> str:
    return f"learned:{param}={value}"


def learned_rules(study: optuna.Study) -> dict[str, dict]:
    """The study's learned rules by name: ``{param, value, kind, reason, trial}`` (``records.LearnedRule``), with
    where an inherited one came from and its state here (``warm_rules.rule_state``)."""
    record = records.StudyRecord.of(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)} if record.rechecks else {}
    return {name: rule.model_dump() | {"state": warm_rules.rule_state(record, name, rule, trials).text}
            for name, rule in record.learned_rules.items()}  # fmt: skip


def broken_learned_rule(study: optuna.Study, params: dict[str, Any], trial: optuna.Trial | None = None) -> dict | None:
    """The learned rule ``params`` (Optuna's, of a trial) break, or None.

    A rule inherited from a study of another engine version is re-checked once (``autotune.search.warm_rules``): the
    first ``trial`` that would break it is let through to launch (and marked ``rechecks``); for a caller without a
    trial (the refinement's look-ahead, the budget's "is anything left"), a rule still to re-check does not hold
    (a trial may yet launch what it refuses); one being re-checked does."""
    record = records.StudyRecord.of(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)} if record.rechecks else {}
    broken, to_claim = rule_broken(record, trials, params)
    if to_claim is not None and trial is not None:
        warm_rules.claim(study, trial, to_claim)
    return broken


def rule_broken(record: records.StudyRecord, trials: dict[int, optuna.trial.FrozenTrial],
                params: dict[str, Any]) -> tuple[dict | None, str | None]:  # fmt: skip
    """(the rule ``params`` break, as ``broken_learned_rule`` returns it, or None; the inherited rule of another
    version they would re-check, or None), from a study's record and trials already read."""
    to_claim = None
    for name, rule in record.learned_rules.items():
        if rule.param not in params or params[rule.param] != rule.value:
            continue
        if not warm_rules.needs_recheck(record, rule):
            return rule.model_dump() | {"name": name}, None
        state = warm_rules.rule_state(record, name, rule, trials)
        if state.claimable:
            to_claim = to_claim or name
        elif not state.dropped:
            return rule.model_dump() | {"name": name}, None
    return None, to_claim


def _error_words(log_text: str) -> set[str]:
    """Words of the log's error lines, CamelCase split and with trailing digits also dropped ("FlashAttention2 has
    been toggled on" names flash_attention_2)."""
    lines = [line for line in log_text.splitlines() if _ERROR_LINE.search(line)]
    words = {w.lower() for line in lines for w in _WORD.findall(_CAMEL.sub(" ", line.replace("_", " ")))}
    return words | {w.rstrip("0123456789") for w in words}


def _value_words(engine: Engine, config: ServerConfig, knobs: dict[str, Any]) -> set[str]:
    """Words of a parameter's value and of what it adds to the rendered command."""
    words = {w.lower() for value in knobs.values() for w in _WORD.findall(str(value).replace("_", " "))}
    unset = config.model_copy(update=dict.fromkeys(knobs))
    try:
        with_it = set(engine.command_spec(config).argv)
        without = set(engine.command_spec(unset).argv)
    except Exception:
        return words - _COMMON
    rendered = {w.lower() for arg in with_it - without for w in _WORD.findall(arg.replace("_", " "))}
    return (words | rendered) - _COMMON


def named_params(engine: Engine, config: ServerConfig, params: dict[str, dict[str, Any]], log_text: str) -> list[str]:
    """The parameters whose value the failure's error lines name (by a word no other parameter's value shares).

    Args:
        params: each parameter of the trial (Optuna name) → the knobs its value sets.
    """
    errors = _error_words(log_text)
    words = {name: _value_words(engine, config, knobs) for name, knobs in params.items()}
    named = []
    for name, own in words.items():
        others = set().union(*(w for n, w in words.items() if n != name))
        if (own - others) & errors:
            named.append(name)
    return named


def learn(study: optuna.Study, trial_number: int, param: str, value: Any, kind: FailureKind, reason: str) -> str:
    """Store the rule that ``param = value`` fails (one attribute per rule: workers add rules without a race)."""
    name = rule_name(param, value)
    rule = records.LearnedRule(
        param=param, value=value, kind=kind.value, reason=shorten(reason, 300), trial=trial_number
    )
    records.write_study(study, learned_rules={name: rule})
    return name


def needs_at_least(b: ServerConfig, a: ServerConfig) -> bool:
    """Whether ``b`` needs at least as much GPU memory as ``a`` (knobs compared one by one; all others equal)."""
    left, right = b.model_dump(), a.model_dump()
    for knob, value in left.items():
        other = right[knob]
        if knob in MORE_IS_MORE or knob in LESS_IS_MORE:
            if (value is None) != (other is None):
                return False
            if value is not None and (value < other if knob in MORE_IS_MORE else value > other):
                return False
        elif knob == "kv_cache_dtype":
            if KV_BYTES.get(value, 2) < KV_BYTES.get(other, 2):
                return False
        elif knob == "tp":
            if (value or 1) > (other or 1):
                return False
        elif value != other:
            return False
    return True


def oom_cap(study: optuna.Study, config: ServerConfig, number: int) -> tuple[int | None, int | str | None]:
    """(the lightest load index at which ``config`` is known to run out of memory, the trial that shows it).

    From every trial that ran out of memory (``oom_from_level``: its lightest failing load) whose configuration
    ``config`` needs at least as much memory as; and from those an earlier study of the same engine version saw
    (warm start: the witness is then "study:trial").
    """
    cap, witness = warm_rules.inherited_oom_cap(records.StudyRecord.of(study), config, needs_at_least, _stored)
    for trial in study.get_trials(deepcopy=False):
        level, stored = records.oom_from_level(trial), records.public_config(trial)
        if level is None or trial.number == number or stored is None:
            continue
        if (cap is None or level < cap) and needs_at_least(config, _stored(stored, config)):
            cap, witness = level, trial.number
    return cap, witness


def _stored(stored: dict, like: ServerConfig) -> ServerConfig:
    """A trial's stored (public) configuration, with the secrets it dropped taken from ``like`` so they compare."""
    return ServerConfig.model_validate(stored | {"env": like.env, "extra_args": like.extra_args})
