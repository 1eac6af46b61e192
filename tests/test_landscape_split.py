"""The search-efficiency benchmark's design/evaluation split (issue #48, item 1): a rule on the name, halves big
enough and mixed, the model renamed to one the prior does not know, and the report's bars."""

from __future__ import annotations

import hashlib

import yaml

from autotune.engines.models import resolve_model
from autotune.search.prior import prior_model
from autotune.space.files import load_space
from benchmarks._efficiency_report import Run as EfficiencyRun
from benchmarks._efficiency_report import efficiency_report, ratio, summarize
from benchmarks.landscape_catalog import LANDSCAPES, landscape_paths, split_of, unnamed_copy
from tests.conftest import REPO

FOLDER = REPO / "benchmarks" / "landscapes"


def test_split_is_the_parity_of_the_names_hash() -> None:
    for name in ("dsv3-sglang-4000x200", "dsv3-trtllm-1000x1000", "anything"):
        digit = int(hashlib.sha256(name.encode()).hexdigest()[-1], 16)
        assert split_of(name) == ("design" if digit % 2 == 0 else "eval")
    assert split_of("dsv3-sglang-4000x200") == "design" and split_of("dsv3-trtllm-1000x1000") == "eval"


def test_catalog_and_files_agree() -> None:
    assert sorted(p.stem for p in landscape_paths(FOLDER, "all")) == sorted(land.name for land in LANDSCAPES)


def test_each_half_has_ten_landscapes_of_every_engine() -> None:
    design, evaluation = landscape_paths(FOLDER, "design"), landscape_paths(FOLDER, "eval")
    assert sorted(design + evaluation) == landscape_paths(FOLDER, "all")
    for half in (design, evaluation):
        assert len(half) >= 10
        assert {next(iter(load_space(p).engines)) for p in half} == {"vllm", "sglang", "trtllm"}
        models = {land.model for land in LANDSCAPES if land.name in {p.stem for p in half}}
        assert len(models) >= 4


def test_unnamed_copy_hides_the_model_from_the_prior_and_the_rules(tmp_path) -> None:
    path = FOLDER / "dsv3-sglang-4000x200.yaml"
    named, copy = load_space(path), load_space(unnamed_copy(path, REPO, tmp_path))
    assert prior_model(named) == "analytic"
    assert prior_model(copy) is None
    model = copy.engines["sglang"].fixed["model"]
    assert model.startswith("/models/") and resolve_model(model) is None
    document, original = yaml.safe_load((tmp_path / path.name).read_text()), yaml.safe_load(path.read_text())
    assert document["simulate"]["table"] == str(REPO / original["simulate"]["table"])
    assert document["params"] == original["params"] and document["objective"] == original["objective"]


def _row(name: str, split: str, strategy: str, hits: list[float | None]) -> dict:
    """A strategy's row on a landscape whose optimum is 1: each seed reaching it at the given node-minutes."""
    runs = [EfficiencyRun([m or 500.0], [1.0 if m else 0.5]) for m in hits]
    summary = summarize(runs, 1.0)
    return {"landscape": name, "split": split, "naming": "named", "strategy": strategy, **summary,
            "runs": [({"costs": r.costs, "bests": r.bests, "failed_launches": 0, "repeated_failures": 0}, 1.0)
                     for r in runs]}  # fmt: skip


def test_report_checks_the_bars() -> None:
    rows = [
        _row("a", "eval", "autotune", [80.0] * 10),
        _row("a", "eval", "one_knob", [100.0] * 10),
        _row("b", "eval", "autotune", [90.0] * 9 + [None]),
        _row("b", "eval", "one_knob", [60.0] * 10),
        _row("c", "design", "autotune", [300.0] * 10),
        _row("c", "design", "one_knob", [None] * 10),
    ]
    assert ratio(rows[0], rows[1]) == 0.8 and ratio(rows[4], rows[5]) is None
    report = efficiency_report(rows, ["autotune", "one_knob"], ["named"])
    assert "evaluation half, named: 95% of seeds reach 99% at a pooled median of 80 node-min" in report.text
    assert "(bar: >= 95% at <= 100): met" in report.text
    assert "NOT met on 1: b (named) 1.50x" in report.text
    eval_autotune = next(r for r in report.pooled if (r["split"], r["strategy"]) == ("eval", "autotune"))
    assert eval_autotune["reached_99"] == 19 and eval_autotune["seeds"] == 20
