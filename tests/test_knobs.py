"""The project documents its own knobs: `autotune knobs` (text, JSON, Markdown) is generated from ServerConfig and
the engine adapters, docs/knobs.md is its current Markdown, and nothing in the package, README or docs points to a
file outside the project."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.config import CLIENT_KNOBS, KNOBS
from autotune.engines import ENGINES
from autotune.errors import SpaceError
from autotune.space.files import parse_space
from tests.conftest import REPO

# internal notes of the people who wrote autotune, not shipped with it: no message may send a user there
OUTSIDE = re.compile(r"(?<!docs/)\bknobs\.md|\bengines\.md|shared/reference")


def test_docs_knobs_md_is_what_the_generator_writes_now() -> None:
    from autotune.cli.knobs import knobs, markdown

    assert (REPO / "docs" / "knobs.md").read_text() == markdown(knobs()), (
        "docs/knobs.md is stale: run `autotune knobs --markdown > docs/knobs.md`"
    )


def test_every_knob_is_described_and_every_engine_says_what_it_does_with_it() -> None:
    from autotune.cli.knobs import DESCRIPTIONS

    assert set(DESCRIPTIONS) == set(KNOBS) | set(CLIENT_KNOBS)
    done = CliRunner().invoke(app, ["knobs", "--json"])
    assert done.exit_code == 0, done.output
    listed = json.loads(done.stdout)
    assert [k["name"] for k in listed] == [*KNOBS, *CLIENT_KNOBS]
    for knob in listed:
        assert knob["description"] and knob["type"] and knob["default"], knob
        assert [r["engine"] for r in knob["engines"]] == list(ENGINES)  # asked of every registered adapter
    by_name = {k["name"]: {r["engine"]: r for r in k["engines"]} for k in listed}
    assert by_name["max_num_seqs"]["vllm"]["renders"] == "--max-num-seqs 256"
    assert by_name["max_num_seqs"]["sglang"]["renders"] == "--max-running-requests 256"
    assert by_name["max_num_seqs"]["transformers"]["refused"]  # the adapter's own reason
    assert by_name["cuda_graph"]["vllm"]["renders"] == "false → --enforce-eager"
    assert "extra_llm_api_options.yaml" in by_name["kv_cache_dtype"]["trtllm"]["renders"]
    assert by_name["chat_template"]["vllm"]["renders"] == "--chat-template ./template.jinja"
    assert next(k for k in listed if k["name"] == "chat_template")["names_a_file"]
    text = CliRunner().invoke(app, ["knobs"])
    assert text.exit_code == 0 and "max_num_seqs" in text.stdout and "--max-running-requests 256" in text.stdout


def test_no_message_or_document_points_outside_the_project() -> None:
    files = [p for p in (REPO / "autotune").rglob("*") if p.suffix in (".py", ".yaml", ".md", ".txt", ".json")]
    files += [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in files
            for n, line in enumerate(p.read_text().splitlines(), 1) if OUTSIDE.search(line)]  # fmt: skip
    assert hits == []
    # the README's own pointer is to the project's page, which exists
    assert "docs/knobs.md" in (REPO / "README.md").read_text() and (REPO / "docs" / "knobs.md").is_file()


def test_an_unknown_knob_points_to_autotune_knobs() -> None:
    space = "engines: {vllm: {fixed: {model: m, max_num_seq: 8}}}"
    with pytest.raises(SpaceError) as refused:
        parse_space(space, "s.yaml")
    message = str(refused.value)
    assert "`autotune knobs` lists them" in message and "did you mean 'max_num_seqs'" in message
    assert not OUTSIDE.search(message)
