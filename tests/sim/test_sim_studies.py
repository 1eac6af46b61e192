"""Studies on the simulated engine, end to end through the CLI: the direct mode (thousands of trials' worth of speed),
the table model (replayed measurements, `no_data` elsewhere), and the quickstart (server mode, the default study)."""

from __future__ import annotations

import re
import shlex

import yaml

from autotune.engines import get_engine
from autotune.space.files import load_space
from tests.conftest import REPO, SPACES
from tests.study.conftest import autotune, show

QUICKSTART = SPACES / "quickstart.yaml"


def direct_space(tmp_path, **simulate) -> str:
    space = yaml.safe_load(QUICKSTART.read_text())
    space["simulate"] = {"mode": "direct", **simulate}
    space["workload"]["num_prompts"] = 200
    path = tmp_path / "direct.yaml"
    path.write_text(yaml.safe_dump(space))
    return str(path)


def test_direct_mode_runs_a_long_study_in_process(tmp_path) -> None:
    studies = tmp_path / "studies"
    done = autotune("study", "run", direct_space(tmp_path), "--study", "direct", "--n-trials", "60", "--seed", "3",
                    studies=studies)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SIMULATED best" in done.stdout and "baseline vs best" in done.stdout
    trials = show("direct", studies)["trials"]
    assert sum(t["launched"] for t in trials) == 60  # the budget counts launches (not duplicates, rejections)
    measured = [t for t in trials if t["feasible"]]
    assert len(measured) >= 20 and all(t["launch_s"] is None for t in trials)  # nothing was launched
    assert {t["failure_kind"] for t in trials} >= {"rejected", None}
    best = max(measured, key=lambda t: t["values"][0])
    baselines = [t["values"][0] for t in measured if t["baseline"]]
    assert best["values"][0] > max(baselines)  # the search beats every engine's default


def test_table_model_replays_rows_and_says_no_data_elsewhere(tmp_path) -> None:
    table = tmp_path / "measured.csv"
    table.write_text(
        "max_num_seqs,max_concurrency,status,output_throughput,total_token_throughput,mean_ttft_ms,p99_ttft_ms,"
        "mean_tpot_ms,p99_tpot_ms\n"
        ",32,ok,1000,3000,50,90,2,30\n"  # within what 8 prompts in flight allow (Little's law): 8000 tok/s
        "8,32,ok,400,1200,50,900,5,25\n"
        "64,32,oom,,,,,,\n"
    )  # fmt: skip
    space = yaml.safe_load((REPO / "tests" / "study" / "scripted.yaml").read_text())
    space["engines"]["vllm"]["fixed"]["model"] = "deepseek-ai/DeepSeek-V3.2"
    space["params"] = {"max_num_seqs": {"choices": [None, 8, 64, 128]}}
    space["workload"] = {
        "dataset": "random",
        "input_len": 64,
        "output_len": 16,
        "num_prompts": 8,
        "max_concurrency": 32,
    }
    space["simulate"] = {"performance_model": "table", "table": str(table), "mode": "direct"}
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(space))
    studies = tmp_path / "studies"
    done = autotune("study", "run", str(path), "--study", "table", "--n-trials", "12", "--seed", "1", studies=studies)
    assert done.returncode == 0, done.stderr
    outcome = {}
    for trial in show("table", studies)["trials"]:
        if trial["state"] == "WAITING":  # queued, but the space was exhausted first
            continue
        outcome[trial["params"]["max_num_seqs"]] = trial["values"][0] if trial["feasible"] else trial["failure_kind"]
    assert outcome == {None: 3000.0, 8: 1200.0, 64: "oom", 128: "no_data"}


def test_quickstart_is_the_default_study_and_exports_a_real_command(quickstart_studies) -> None:
    studies = quickstart_studies  # `autotune study run` with no space, 8 trials (tests/conftest.py)
    output = (studies / "run.out").read_text()
    assert (studies / "quickstart.db").exists()
    assert re.search(r"SIMULATED best: trial \d+", output)
    assert all(name in output for name in ("vllm baseline", "sglang baseline", "trtllm baseline"))
    best = autotune("study", "best", "--study", "quickstart", "--json", studies=studies)
    assert best.returncode == 0, best.stderr
    exported = __import__("json").loads(best.stdout)
    trials = {t["number"]: t for t in show("quickstart", studies)["trials"]}
    params = trials[exported["trial"]]["params"]
    point = load_space(QUICKSTART).point_from_params(params)
    port = int(exported["launch"]["argv"][exported["launch"]["argv"].index("--port") + 1])
    # the exported command is the real engine's rendering of the best configuration, not the simulator's
    expected = get_engine(point.server.engine).launch_spec(point.server, port=port)
    assert exported["launch"]["argv"] == list(expected.argv) and "autotune.sim" not in shlex.join(expected.argv)
