"""Reasons are cut at a word boundary, with where the whole text is, never mid-word (`(vLLM: 'Sele`); one helper does
it for every reason autotune shortens, and `study run`'s trial lines print a reason as written."""

from __future__ import annotations

import optuna
import pytest

from autotune.cli.trial_line import outcome, print_trial_line
from autotune.search.sweep import LoadResult
from autotune.text import shorten

# a real rule's reason (vLLM's sparse-attention rule), 230 characters: the old line cut it after 120, inside a word
RULE = ("rejected by rule 'sparse-attention-backend': DeepSeek-V3.2 uses sparse attention; backend FLASH_ATTN is dense "
        "(vLLM: 'Selected backend … is not valid for this configuration. Reason: [sparse not supported]'); "
        "use one of ['FLASHMLA_SPARSE']")  # fmt: skip
LOG = ("engine exited with code 1: /usr/bin/python3: Error while finding module specification for "
       "'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang') and then a good deal more text after it "
       "that goes on for a while")  # fmt: skip


@pytest.mark.parametrize("limit", [20, 37, 60, 119, 120, 121, 150])
def test_cut_after_a_whole_word_within_the_limit(limit: int) -> None:
    cut = shorten(LOG, limit)
    assert len(cut) <= limit and cut.endswith("…")
    kept = cut.removesuffix("…")
    assert LOG.startswith(kept) and LOG[len(kept)] in " ,;:('\"", (limit, cut)  # the next character ends a word


def test_short_text_is_kept_on_one_line_and_the_full_text_is_named_only_after_a_cut() -> None:
    assert shorten("engine  died\n  while loading", 80, "server.log") == "engine died while loading"
    assert shorten(LOG, 60, "studies/s/trials/3/server.log").endswith("… (full text: studies/s/trials/3/server.log)")


def test_a_word_longer_than_the_limit_is_cut_inside() -> None:
    path = "/very/long/path/" + "x" * 100
    assert shorten(path, 30) == path[:29] + "…"


def _failed_trial(reason: str, **attrs) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(value=0.0, user_attrs={"failure_kind": "crash", "failure_reason": reason, **attrs})


def test_a_trial_line_cuts_a_log_reason_at_a_word_and_names_the_log() -> None:
    line = outcome(_failed_trial(LOG, server_log="studies/s/trials/3/server.log"))
    assert line.startswith("crash: engine exited with code 1: ") and line.endswith(
        "… (full text: studies/s/trials/3/server.log)"
    )
    kept = line.removeprefix("crash: ").split("…")[0]
    assert LOG.startswith(kept) and LOG[len(kept)] == " "


def test_a_rule_reason_is_printed_whole_as_written(capsys) -> None:
    print_trial_line(None, _failed_trial(RULE))
    printed = " ".join(capsys.readouterr().err.split())
    assert printed == f"trial -1: crash: {RULE}"  # not cut, and its [brackets] are not taken for markup


def test_a_sweep_level_keeps_its_reason_cut_at_a_word() -> None:
    kept = LoadResult({"max_concurrency": 4}, failure="crash", reason=LOG * 3).record().failure_reason
    assert len(kept) <= 300 and kept.endswith("…") and (LOG * 3)[len(kept) - 1] in " ,;:('\""
