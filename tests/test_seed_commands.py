"""Every command of the seed study (seed-results.csv) is reproduced from a ServerConfig: same argv up to flag order,
same values, same environment."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from autotune.config import ServerConfig
from autotune.engines import get_engine
from autotune.testing.seedset import SEED_CONFIGS, SEED_RESULTS

# Other spellings SGLang's argparse accepts for the same option (its docs launch with `--dp 2`; `--model` is an alias
# of `--model-path`). The seed used both spellings; autotune always renders the canonical one.
FLAG_ALIASES = {"sglang": {"--dp": "--dp-size", "--tp": "--tp-size", "--model": "--model-path"}}


def seed_rows() -> list[dict]:
    with SEED_RESULTS.open(newline="") as f:
        return list(csv.DictReader(f))


def argv_shape(engine: str, argv: list[str], executable_len: int) -> tuple[list[str], Counter]:
    """(positionals after the executable, multiset of (flag, values)) with `--flag=value` split and aliases resolved."""
    positionals: list[str] = []
    groups: list[list[str]] = []
    for token in argv[executable_len:]:
        if token.startswith("-"):
            flag, _, value = token.partition("=")
            groups.append([FLAG_ALIASES.get(engine, {}).get(flag, flag)] + ([value] if value else []))
        elif groups:
            groups[-1].append(token)
        else:
            positionals.append(token)
    return positionals, Counter(tuple(g) for g in groups)


def parse_env(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split()) if text else {}


@pytest.mark.parametrize("row", seed_rows(), ids=lambda r: f"{r['engine']}-{r['experiment']}-{r['workload']}")
def test_seed_command_is_reproduced(row: dict) -> None:
    config = ServerConfig.model_validate(SEED_CONFIGS[(row["engine"], row["experiment"])])
    # The CSV shows commands as typed text with the JSON unquoted ({"method":"mtp",...}); no value contains a space,
    # so splitting on whitespace gives the argv the seed ran.
    expected = row["command"].split()
    port = int(expected[expected.index("--port") + 1]) if "--port" in expected else None
    host = expected[expected.index("--host") + 1] if "--host" in expected else "127.0.0.1"
    adapter = get_engine(config.engine)
    executable_len = len(adapter.executable)
    assert expected[:executable_len] == list(adapter.executable)

    spec = adapter.launch_spec(config, port=port, host=host)

    assert spec.argv[:executable_len] == adapter.executable
    assert argv_shape(row["engine"], list(spec.argv), executable_len) == argv_shape(
        row["engine"], expected, executable_len
    )
    assert spec.env == parse_env(row["env"])
    assert spec.files == {}  # none of the seed's runs needed a TRT-LLM options file


def test_every_seed_row_has_a_config() -> None:
    keys = {(r["engine"], r["experiment"]) for r in seed_rows()}
    assert len(seed_rows()) == 29
    assert keys == set(SEED_CONFIGS)


def test_shape_comparison_sees_a_wrong_value() -> None:
    good = ["vllm", "serve", "m", "-tp", "8"]
    assert argv_shape("vllm", good, 1) != argv_shape("vllm", ["vllm", "serve", "m", "-tp", "4"], 1)
    assert argv_shape("vllm", good, 1) != argv_shape("vllm", [*good, "--enforce-eager"], 1)
    assert argv_shape("sglang", ["x", "--dp", "8"], 1) == argv_shape("sglang", ["x", "--dp-size=8"], 1)
