from __future__ import annotations

import glob
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from autotune.serving.process import ServerProcess, group_alive
from autotune.testing import scripted


@pytest.fixture
def scripted_server(request, tmp_path) -> Iterator[ServerProcess]:
    """``@pytest.mark.parametrize("scripted_server", [dict(ttft_ms=..., itl_ms=...)], indirect=True)`` to script it."""
    with scripted.serving(tmp_path / "scripted", **getattr(request, "param", {})) as server:
        yield server
    assert not group_alive(server.pgid)


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory) -> Path:
    """A small byte-level BPE trained offline on the standard library's sources (the same recipe as the tiny model)."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:60]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train(files, trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path
