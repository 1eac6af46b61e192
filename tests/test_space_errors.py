"""Bad input never shows a traceback: one line naming the file, the key path and the fix; exit code 2."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli import app
from autotune.space.files import load_space
from tests.conftest import DATA, SPACES, provide_first_launch_needs

runner = CliRunner()
VALID = yaml.safe_load((SPACES / "vllm-cpu-tiny.yaml").read_text())
VALID_MULTI = yaml.safe_load((SPACES / "deepseek-v32-h200x8.yaml").read_text())
SHAREGPT = DATA / "sharegpt-sample.json"  # stands in for the ShareGPT file the shipped space reads (validate reads it)
VALID_MULTI_DATASET = VALID_MULTI["workload"]["path"]
VALID_MULTI["workload"]["path"] = str(SHAREGPT)


def validate(tmp_path: Path, text: str):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path, runner.invoke(app, ["space", "validate", str(path)])


def assert_one_line_error(path: Path, result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"autotune: error: {path}"), lines[0]
    assert "fix:" in lines[0]
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def mutated(change) -> str:
    data = copy.deepcopy(VALID)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


CASES = {
    "malformed YAML": ("engines: {vllm: [unclosed\n", ["malformed YAML", "line"]),
    "duplicate key": ("engines: {}\nengines: {}\n", ["duplicate key 'engines'"]),
    "not a mapping": ("- a\n- b\n", ["(top level)"]),
    "unknown top key": (mutated(lambda d: d.update(paramz={})), ["unknown key 'paramz'", "did you mean 'params'"]),
    "unknown param key": (
        mutated(lambda d: d["params"]["max_num_seqs"].update(defualt=4)),
        ["params.max_num_seqs.defualt", "did you mean 'default'"],
    ),
    "wrong type": (mutated(lambda d: d["hardware"].update(gpus="eight")), ["hardware.gpus", "'eight'"]),
    "wrong choice type": (
        mutated(lambda d: d["params"]["max_num_seqs"].update(choices=[4, "many"])),
        ["params.max_num_seqs.choices[1]", "max_num_seqs"],
    ),
    "bool for an int knob": (
        mutated(lambda d: d["params"].update(max_num_seqs={"choices": [True, 8]})),
        ["params.max_num_seqs.choices[0]"],
    ),
    "empty choices": (
        mutated(lambda d: d["params"]["dtype"].update(choices=[], default=None)),
        ["params.dtype.choices"],
    ),
    "empty range": (
        mutated(lambda d: d["params"].update(max_num_seqs={"int": [64, 8]})),
        ["params.max_num_seqs.int", "empty range"],
    ),
    "log range from zero": (
        mutated(lambda d: d["params"].update(max_num_seqs={"int": [0, 8], "log": True})),
        ["params.max_num_seqs.int"],
    ),
    "range on a bool knob": (
        mutated(lambda d: d["params"].update(cuda_graph={"int": [0, 1]})),
        ["params.cuda_graph.int"],
    ),
    "default outside": (
        mutated(lambda d: d["params"]["max_num_seqs"].update(default=5)),
        ["params.max_num_seqs.default"],
    ),
    "unknown engine": (
        mutated(lambda d: d["engines"].update(tgi={"fixed": {"model": "m"}})),
        ["engines.tgi", "vllm, sglang, trtllm"],
    ),
    "unknown knob in params": (
        mutated(lambda d: d["params"].update(max_num_seq={"choices": [1]})),
        ["params.max_num_seq", "did you mean 'max_num_seqs'"],
    ),
    "unknown knob in fixed": (
        mutated(lambda d: d["engines"]["vllm"]["fixed"].update(tensor_parallel=2)),
        ["engines.vllm.fixed.tensor_parallel"],
    ),
    "unknown knob in tied": (
        mutated(lambda d: d["params"].update(layout={"tied": [{"tp": 1, "tpp": 2}], "default": {"tp": 1, "tpp": 2}})),
        ["params.layout.tied[0].tpp"],
    ),
    "param without a kind": (
        mutated(lambda d: d["params"].update(dtype=["float32"])),
        ["params.dtype", "choices, int, float, tied"],
    ),
    "knob set twice": (
        mutated(lambda d: d["engines"]["vllm"]["fixed"].update(dtype="bfloat16")),
        ["dtype", "set each knob in one place"],
    ),
    "bad version": (mutated(lambda d: d["engines"]["vllm"].update(version="latest")), ["engines.vllm.version"]),
    "missing model": (mutated(lambda d: d["engines"]["vllm"]["fixed"].pop("model")), ["engines.vllm.fixed", "'model'"]),
    "flag-like value": (
        mutated(lambda d: d["engines"]["vllm"]["fixed"].update(chat_template="--evil")),
        ["chat_template"],
    ),
    "unknown SLO metric": (mutated(lambda d: d["objective"].update(slo={"p42_ttft_ms": 5})), ["objective.slo"]),
    "bad entry of a mapping knob": (
        mutated(lambda d: d["engines"]["vllm"]["fixed"]["env"].update(NUMBER=1)),
        ["engines.vllm.fixed.env.NUMBER: 1 is not a valid env"],
    ),
    "integer too long for Python": ("trials: " + "9" * 5000 + "\n", ["line 1", "too many digits"]),
    "list as a key": ("? [a, b]\n: 1\n", ["line 1", "unhashable key"]),
    "negative memory fraction": (
        mutated(lambda d: d["params"].update(gpu_memory_utilization={"float": [-0.5, 0.9], "default": 0.9})),
        ["params.gpu_memory_utilization.float"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_line(case: str, tmp_path: Path) -> None:
    text, fragments = CASES[case]
    path, result = validate(tmp_path, text)
    assert_one_line_error(path, result, *fragments)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["space", "validate", str(path)])
    assert_one_line_error(path, result, "cannot read")


@pytest.fixture(autouse=True)
def _first_launch_needs(tmp_path_factory, monkeypatch) -> None:
    """What the shipped spaces' first launch needs, there (validate checks it): models' tokenizers, chat templates."""
    provide_first_launch_needs(tmp_path_factory.mktemp("node"), monkeypatch, *SPACES.glob("*.yaml"))


def test_valid_spaces_pass(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # where a space's relative workload path is read
    provide_first_launch_needs(tmp_path, monkeypatch, *SPACES.glob("*.yaml"))
    (tmp_path / VALID_MULTI_DATASET).write_bytes(SHAREGPT.read_bytes())
    for path in SPACES.glob("*.yaml"):
        result = runner.invoke(app, ["space", "validate", str(path)])
        assert result.exit_code == 0, result.output
        assert "valid" in result.stdout


# ---- property: any mutation of a valid space is either still valid or a one-line error -----------------------------

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["choices", "int", "x", "tp", "model"]), st.integers(-2, 2), max_size=2),
)


def paths(node, prefix=()):
    """Every key path of a nested YAML document (mapping keys and list indexes)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


def apply(data, path, action, junk):
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if action == "replace":
        parent[key] = junk
    elif action == "delete":
        del parent[key]
    elif action == "add-key" and isinstance(parent[key], dict):
        parent[key]["surprise_key"] = junk
    elif action == "add-key":
        parent[key] = {"surprise_key": junk}


@st.composite
def mutations(draw, fewest: int = 1):
    base = draw(st.sampled_from([VALID, VALID_MULTI]))
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(fewest, 3))):
        candidates = list(paths(data))
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        apply(data, path, draw(st.sampled_from(["replace", "delete", "add-key"])), draw(JUNK))
    return data


@st.composite
def broken_spaces(draw):
    """A shipped space after 0–3 random mutations, then one that makes any space invalid: a key the schema does not
    know, in one of the mappings left (every mapping of a space is checked: test_an_unknown_key_anywhere_is_named).
    The random mutations before it decide which error comes first and how deep its key path is."""
    data = draw(mutations(fewest=0))
    # not inside a free-form mapping (env, extra_args): any key is valid there, so a surprise key breaks nothing
    where = draw(st.sampled_from([p for p in paths(data) if isinstance(_get(data, p), dict)
                                  and not {"env", "extra_args"} & set(map(str, p))] + [()]))  # fmt: skip
    _get(data, where)["surprise_key"] = draw(JUNK)
    return data


@pytest.mark.slow  # 300 CLI runs: minutes on a loaded 2-core machine
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=broken_spaces())
def test_broken_spaces_are_one_clean_line(data, tmp_path: Path) -> None:
    path, result = validate(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert_one_line_error(path, result)


@st.composite
def valid_variants(draw):
    """A shipped space with choice parameters changed as a user may: choices reordered, another default, or the
    parameter dropped (its knob then keeps the engine's default). Returns the document and the defaults it sets."""
    data = copy.deepcopy(draw(st.sampled_from([VALID, VALID_MULTI])))
    choice_params = [p for p in paths(data) if "params" in p[-2:-1] and "choices" in _get(data, p)]
    defaults = {}
    for path in draw(st.lists(st.sampled_from(choice_params), min_size=1, max_size=4, unique=True)):
        parent, name = _get(data, path[:-1]), path[-1]
        action = draw(st.sampled_from(["reorder", "default", "drop"]))
        if action == "drop":
            del parent[name]
            continue
        choices = parent[name]["choices"]
        if action == "reorder":
            parent[name]["choices"] = draw(st.permutations(choices))
        else:
            parent[name]["default"] = defaults[path] = draw(st.sampled_from(choices))
    return data, defaults


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(variant=valid_variants())
def test_valid_variants_load(variant, tmp_path: Path) -> None:
    data, defaults = variant
    path, result = validate(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert result.exit_code == 0 and "valid" in result.stdout, result.output
    loaded = load_space(path).model_dump()
    assert all(_get(loaded, where)["default"] == default for where, default in defaults.items())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from([VALID, VALID_MULTI]), data=st.data())
def test_an_unknown_key_anywhere_is_named(base, data, tmp_path: Path) -> None:
    document = copy.deepcopy(base)
    mappings = [p for p in paths(document) if isinstance(_get(document, p), dict)] + [()]
    where = data.draw(st.sampled_from(mappings))
    target = _get(document, where)
    target["surprise_key"] = 1
    path, result = validate(tmp_path, yaml.safe_dump(document, sort_keys=False))
    assert_one_line_error(path, result, "surprise_key")


def _get(document, path):
    for key in path:
        document = document[key]
    return document
