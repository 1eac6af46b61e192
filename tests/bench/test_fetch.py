"""`autotune dataset fetch`: a download lands whole in the cache (never a partial file a study would read), says how
far it got, is not made twice, and a failed one leaves nothing behind and says how to get the file by hand."""

from __future__ import annotations

import httpx
import pytest

from autotune.bench import fetch
from autotune.errors import UsageError

BODY = b'[{"conversations": []}]' * 1000


def _serving(status: int, asked: list[str]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(status, content=BODY if status == 200 else b"gone")

    return httpx.MockTransport(handle)


def test_a_fetch_lands_whole_in_the_cache_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    asked: list[str] = []
    progress: list[tuple[int, int | None]] = []
    path = fetch.fetch("sharegpt", env={}, on_progress=lambda done, total: progress.append((done, total)),
                       transport=_serving(200, asked))  # fmt: skip
    assert path == tmp_path / "datasets" / fetch.SHAREGPT.file_name and path.read_bytes() == BODY
    assert asked == [fetch.SHAREGPT.url] and progress[-1] == (len(BODY), len(BODY))
    assert [p.name for p in path.parent.iterdir()] == [fetch.SHAREGPT.file_name]  # no partial file left
    assert fetch.sharegpt_file(fetch.SHAREGPT.file_name) == path  # a workload naming it finds it from anywhere
    assert fetch.fetch("sharegpt", env={}, transport=_serving(200, asked)) == path and len(asked) == 1


def test_a_failed_fetch_leaves_nothing_and_says_how_to_get_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    with pytest.raises(UsageError, match=r"downloading sharegpt failed .*404.*fix: download https://huggingface.co/"):
        fetch.fetch("sharegpt", env={}, transport=_serving(404, []))
    assert list((tmp_path / "datasets").iterdir()) == []


def test_an_unknown_dataset_lists_the_known_ones() -> None:
    with pytest.raises(UsageError, match="unknown dataset 'lmsys'; fix: one of sharegpt"):
        fetch.fetch("lmsys", env={})
