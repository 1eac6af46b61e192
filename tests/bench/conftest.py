from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ScriptedServer:
    """The scripted server as a subprocess in its own process group, on a port chosen now."""

    def __init__(self, ttft_ms: float = 0.0, itl_ms: float = 0.0, burst: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "autotune.bench.scripted", "--port", str(self.port), "--ttft-ms", str(ttft_ms),
                "--itl-ms", str(itl_ms), "--burst", str(burst)]  # fmt: skip
        self.process = subprocess.Popen(argv, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the scripted server did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def scripted_server(request) -> Iterator[ScriptedServer]:
    """``@pytest.mark.parametrize("scripted_server", [dict(ttft_ms=..., itl_ms=...)], indirect=True)`` to script it."""
    server = ScriptedServer(**getattr(request, "param", {}))
    yield server
    server.stop()
    assert server.process.poll() is not None


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
