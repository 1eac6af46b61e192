"""`study run --warm-start` and `study upgrade` end to end on the scripted engine (real subprocesses).

The earlier study (version 0.32.0) learns that speculative decoding fails ("Unsupported speculative method") and
that max_num_seqs=32 is fastest. Another "version" of the scripted engine is its environment: what the engine
installed does (``SCRIPTED_SPECULATIVE_SERVES=1``: the upgrade fixed speculative decoding; ``SCRIPTED_SLOWER``: it
is slower on one configuration), while the space's ``version`` says which version autotune renders for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.study.conftest import ENGINE, autotune, show

RULE = "learned:speculative=mtp:1"
FIXED = {"SCRIPTED_SPECULATIVE_SERVES": "1"}  # the new version fixed speculative decoding
# and is six times slower with 32 sequences; the baseline's 2 sequences twice as fast, so that its verdict is
# "not slower" by a margin no busy machine's noise (±15% run to run, single runs) can flip
SLOWER_ON_32 = {"SCRIPTED_SLOWER": "--max-num-seqs=32:6,--max-num-seqs=2:0.5"}


def space_file(directory: Path, version: str = "0.32.0", name: str = "space.yaml") -> Path:
    space = {
        "name": "scripted", "hardware": {"gpus": 0},
        "engines": {"vllm": {"version": version, "executable": ["python", "-m", "autotune.testing.scripted"],
                             "fixed": {"model": "scripted-model", "served_model_name": "tiny",
                                       "env": {"SCRIPTED_ITL_MS": "5", "SCRIPTED_TTFT_MS": "10",
                                               "SCRIPTED_STARTUP_S": "0.2"}}}},
        "params": {"max_num_seqs": {"choices": [2, 8, 32], "default": 2}, "speculative": {"choices": [None, "mtp:1"]}},
        "workload": {"dataset": "jsonl", "path": str(Path(__file__).parent / "prompts.jsonl"), "num_prompts": 32,
                     "output_len": 16},
        "objective": {"metrics": [{"name": "total_token_throughput"}]},
        "search": {"pruner": "none"},  # every launch measured whole: the test reads values, not pruning
        "startup_timeout_s": 20,
    }  # fmt: skip
    path = directory / name
    path.write_text(yaml.safe_dump(space))
    return path


def run(space: Path, studies: Path, *args: str, env: dict | None = None):
    done = autotune("study", "run", str(space), "--n-trials", "6", "--seed", "1", "--executable", ENGINE, *args,
                    studies=studies, env_extra=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> tuple[Path, Path, dict]:
    """Study ``a`` on version 0.32.0, its space exhausted: (its space, the studies directory, its `show --json`)."""
    directory = tmp_path_factory.mktemp("warm")
    studies = directory / "studies"
    space = space_file(directory)
    run(space, studies, "--study", "a")
    shown = show("a", studies)
    assert shown["learned_rules"][RULE]["kind"] == "unsupported"
    return space, studies, shown


def best_params(shown: dict) -> dict:
    measured = [t for t in shown["trials"] if t["launched"] and t["feasible"] and t["duplicate_of"] is None]
    return max(measured, key=lambda t: t["values"][0])["params"]


def speculative(trials: list[dict]) -> list[dict]:
    return [t for t in trials if t["params"]["speculative"] == "mtp:1" and t["duplicate_of"] is None]


@pytest.mark.slow
def test_same_version_applies_the_rule_without_a_launch_and_measures_the_best_first(earlier) -> None:
    space, studies, first = earlier
    done = run(space, studies, "--study", "b", "--warm-start", "a")
    assert "warm start from a" in done.stderr
    trials = show("b", studies)["trials"]
    assert trials[0]["params"] == best_params(first) and trials[0]["warm_of"].startswith("a:")  # the earlier best
    assert trials[0]["launched"]  # measured again, not copied
    assert trials[1]["baseline"]  # then the baseline
    # the rule of the same version: no speculative configuration is launched; the rule rules them out, so the space
    # is exhausted once the three others are measured (a suggested one would be rejected unlaunched)
    tried = speculative(trials)
    assert not any(t["launched"] for t in tried) and all(t["rejected_by"] == RULE for t in tried)
    assert "space exhausted: every configuration was tried (3 launches" in done.stderr
    shown = show("b", studies)
    assert shown["learned_rules"][RULE]["state"].startswith("applies (from a:")
    assert [w["trial"] for w in shown["warm"]["warm_weights"]][:2] == [-1, 0]  # its weight, trial by trial


@pytest.mark.slow
@pytest.mark.parametrize("fixed", [True, False], ids=["fixed-on-b", "still-broken-on-b"])
def test_another_version_re_checks_the_rule_once(earlier, fixed: bool) -> None:
    space, studies, _ = earlier
    name = "fixed" if fixed else "broken"
    newer = space_file(space.parent, version="0.33.0", name=f"{name}.yaml")
    run(newer, studies, "--study", name, "--warm-start", "a", env=FIXED if fixed else None)
    shown = show(name, studies)
    tried = speculative(shown["trials"])
    rechecks = [t for t in shown["trials"] if t["rechecks"] == RULE]
    assert len(rechecks) == 1 and rechecks[0]["launched"]  # the first trial that breaks it is launched, once
    state = shown["learned_rules"][RULE]["state"]
    if fixed:
        assert state.startswith(f"dropped: trial {rechecks[0]['number']} served")
        assert rechecks[0]["failure_kind"] is None
        # dropped: the other speculative configurations are launched as any other
        assert len([t for t in tried if t["launched"]]) >= 2
    else:
        # it failed again: learned again on this version, and every other speculative trial is refused unlaunched
        assert rechecks[0]["failure_kind"] == "unsupported"
        assert [t["number"] for t in tried if t["launched"]] == [rechecks[0]["number"]]
        assert all(t["rejected_by"] == RULE for t in tried if not t["launched"])
        assert shown["learned_rules"][RULE]["inherited_from"] is None  # re-learned here, on 0.33.0


@pytest.mark.slow
def test_upgrade_names_the_slower_configuration_and_drops_the_fixed_rule(earlier) -> None:
    _, studies, first = earlier
    done = autotune("study", "upgrade", "--study", "a", "--version", "0.33.0", "--n-trials", "6", "--executable",
                    ENGINE, "--json", studies=studies, env_extra=FIXED | SLOWER_ON_32)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["study"] == "a-0.33.0" and result["upgrade_of"] == "a"
    rows = {row["configuration"]: row for row in result["regression"]}
    assert best_params(first)["max_num_seqs"] == 32 and set(rows) == {"baseline", "max_num_seqs=32"}
    assert rows["max_num_seqs=32"]["verdict"].startswith("slower") and rows["max_num_seqs=32"]["change"] < -0.5
    assert not rows["baseline"]["verdict"].startswith("slower")
    shown = show("a-0.33.0", studies)
    # the old best and the old baselines first, on the new version
    assert shown["trials"][0]["params"] == best_params(first) and shown["trials"][1]["baseline"]
    rechecks = [t for t in shown["trials"] if t["rechecks"] == RULE]
    assert len(rechecks) == 1 and rechecks[0]["failure_kind"] is None
    assert shown["learned_rules"][RULE]["state"].startswith("dropped")
    # the space file of the new study renders for the new version
    assert yaml.safe_load((studies / "a-0.33.0" / "space.yaml").read_text())["engines"]["vllm"]["version"] == "0.33.0"


@pytest.mark.slow
def test_upgrade_refuses_bad_input_with_the_fix(earlier, tmp_path) -> None:
    _, studies, _ = earlier
    unknown = autotune("study", "upgrade", "--study", "nope", "--version", "0.33.0", studies=studies)
    assert unknown.returncode == 2 and "no study 'nope'" in unknown.stderr
    same = autotune("study", "upgrade", "--study", "a", "--version", "0.32.0", studies=studies)
    assert same.returncode == 2 and "already ran vllm 0.32.0" in same.stderr
    # a study with no finished trial: made, never run
    empty = autotune("study", "run", str(space_file(tmp_path)), "--study", "empty", "--n-trials", "1", "--timeout",
                     "0", "--executable", ENGINE, studies=studies)  # fmt: skip
    assert empty.returncode != 0 or "timeout" in empty.stderr
    none = autotune("study", "upgrade", "--study", "empty", "--version", "0.33.0", studies=studies)
    assert none.returncode == 2 and "no finished, measured trial" in none.stderr
    # a warm start is taken when a study is made: asked of one made cold, it is refused, not silently dropped
    late = autotune("study", "run", str(space_file(tmp_path)), "--study", "empty", "--warm-start", "a",
                    "--executable", ENGINE, studies=studies)  # fmt: skip
    assert late.returncode == 2 and "'empty' was made already, without a warm start" in late.stderr
    itself = autotune("study", "run", str(space_file(tmp_path)), "--study", "a", "--warm-start", "a", studies=studies)
    assert itself.returncode == 2 and "cannot start from itself" in itself.stderr
    missing = autotune("study", "run", str(space_file(tmp_path)), "--study", "z", "--warm-start", "nope",
                       studies=studies)  # fmt: skip
    assert missing.returncode == 2 and "no study 'nope'" in missing.stderr
    assert not (studies / "nope.db").exists() and not (studies / "z.db").exists()  # nothing made


MOVED = {"SCRIPTED_SLOWER": "--max-num-seqs=8:8,--max-num-seqs=32:64"}  # now 2 sequences > 8 > 32: reversed


@pytest.mark.slow
@pytest.mark.parametrize("moved", [True, False], ids=["optimum-moved", "same-landscape"])
def test_the_warm_priors_weight_falls_where_the_optimum_moved_and_stays_where_it_did_not(earlier, moved) -> None:
    space, studies, _ = earlier
    name = "moved" if moved else "unmoved"
    run(space, studies, "--study", name, "--warm-start", "a", env=MOVED if moved else None)
    shown = show(name, studies)
    weights = [w["weight"] for w in shown["warm"]["warm_weights"]]
    assert weights[0] == 1.0  # before anything is measured here
    if moved:
        # the earlier best and runner-up, measured first (the baseline between them), both come out in the reverse order:
        # the weight falls under TRUST and the warm prior stops leading
        assert weights[-1] < 0.5 and weights == sorted(weights, reverse=True)
        assert shown["warm"]["warm_weights"][-1]["concordant"] == 0
    else:
        assert min(weights) == 1.0
