"""A dataset file read bounded: memory stays within one record and the prompts kept, whatever the file holds.

The path must name a regular file: a device (``/dev/zero`` never ends), a FIFO (opening it blocks) or a directory is
refused before it is opened. The file is read as a stream, never whole: a record (a JSONL line, one item of a
ShareGPT array) over ``MAX_RECORD_BYTES`` is an error naming the file and line, as are bytes that are not UTF-8, and
a file of more than ``MAX_RECORDS`` records is refused. ``shuffled_first`` keeps the selection of "shuffle every
record with the seed, take the first usable ones" (vllm bench's) while holding only the records it keeps.
"""

from __future__ import annotations

import codecs
import heapq
import json
import random
import re
import stat
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from autotune.errors import UsageError

MAX_RECORD_BYTES = 16 * 2**20  # a 128k-token prompt is well under 1 MiB of text
MAX_RECORDS = 10_000_000  # ShareGPT_V3 holds 94k conversations; each record costs 8 bytes of its shuffle
_CHUNK = 2**20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
Item = TypeVar("Item")
Kept = TypeVar("Kept")


def open_dataset(path: Path) -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file.

    Raises:
        UsageError: it does not exist, is a directory, a device or a FIFO, or cannot be read.
    """
    fix = "fix: check workload.path (a relative path starts in the directory autotune runs in)"
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"dataset {path} is a directory; fix: give the file of prompts itself")
        if not stat.S_ISREG(mode):
            raise UsageError(f"dataset {path} is not a regular file (a device or a pipe); fix: give a file of prompts")
        return path.open("rb")
    except OSError as exc:
        raise UsageError(f"cannot read dataset {path} ({exc.strerror}); {fix}") from None


def jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line of ``path``.

    Raises:
        UsageError: a line over MAX_RECORD_BYTES or not UTF-8 (the file and line named), or the file cannot be read.
    """
    with open_dataset(path) as file:
        for number, raw in enumerate(iter(lambda: file.readline(MAX_RECORD_BYTES + 1), b""), 1):
            if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
                raise UsageError(f"{path}:{number}: a line over {MAX_RECORD_BYTES // 2**20} MiB (not a JSONL file?); "
                                 'fix: give one {"prompt": ...} object per line')  # fmt: skip
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"{path}:{number}: not UTF-8 text (a binary file?); "
                                 'fix: give a JSONL file, one {"prompt": ...} object per line') from None  # fmt: skip
            if text.strip():
                yield number, text


def json_array_items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line it starts on, value) of each item of the JSON array ``path`` holds, parsed one item at a time.

    Raises:
        UsageError: not a JSON array, an item over MAX_RECORD_BYTES, invalid JSON or not UTF-8 (file and line named).
    """
    with open_dataset(path) as file:
        text = _TextStream(path, file)
        first = text.next_char()
        if first != "[":
            problem = "is empty" if not first else "does not hold a JSON array"
            raise UsageError(f"{path}:{text.line}: {problem}; fix: give a JSON array of conversations (ShareGPT)")
        text.skip(1)
        if text.next_char() == "]":
            return
        while True:
            yield text.item()
            after = text.next_char()
            if after == "]":
                return
            if after != ",":
                raise UsageError(f"{path}:{text.line}: expected ',' or ']' after an item of the array, got "
                                 f"{after[:1]!r}; fix: give a JSON array of conversations (ShareGPT)")  # fmt: skip
            text.skip(1)


class _TextStream:
    """The UTF-8 text of a file, decoded a chunk at a time; ``pos`` is where parsing stands, ``line`` its line."""

    def __init__(self, path: Path, file: BinaryIO) -> None:
        self.path, self.file = path, file
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.line, self.ended = "", 0, 1, False

    def _more(self) -> bool:
        """Read the next chunk (what was parsed is dropped); False at the end of the file."""
        if self.ended:
            return False
        chunk = self.file.read(_CHUNK)
        self.ended = not chunk
        try:
            decoded = self.decoder.decode(chunk, final=self.ended)
        except UnicodeDecodeError as exc:
            line = self.line + self.text.count("\n", self.pos) + chunk[: exc.start].count(b"\n")
            raise UsageError(f"{self.path}:{line}: not UTF-8 text (a binary file?); "
                             "fix: give a JSON array of conversations (ShareGPT)") from None  # fmt: skip
        self.text, self.pos = self.text[self.pos :] + decoded, 0
        return True

    def skip(self, count: int) -> None:
        self.line += self.text.count("\n", self.pos, self.pos + count)
        self.pos += count

    def next_char(self) -> str:
        """The next character that is not whitespace (it is not consumed); '' at the end of the file."""
        while True:
            self.skip(_WHITESPACE.match(self.text, self.pos).end() - self.pos)
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._more():
                return ""

    def item(self) -> tuple[int, Any]:
        """(line, value) of the JSON value that starts at the next character, read on until it is whole (or over the
        bound)."""
        self.next_char()
        line, problem = self.line, ""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
                if end < len(self.text) or self.ended:  # a number ending with the chunk may go on in the next
                    self.skip(end - self.pos)
                    return line, value
            except RecursionError:  # arrays or objects nested thousands deep: no conversation
                raise UsageError(f"{self.path}:{line}: JSON nested too deep; "
                                 "fix: give a JSON array of conversations (ShareGPT)") from None  # fmt: skip
            except json.JSONDecodeError as exc:
                problem = f" ({exc.msg})"  # the item is cut short here, or invalid: reading on tells
                if self.ended:
                    where = line + self.text.count("\n", self.pos, exc.pos)
                    raise UsageError(f"{self.path}:{where}: not valid JSON{problem}; "
                                     "fix: give a JSON array of conversations (ShareGPT)") from None  # fmt: skip
            if len(self.text) - self.pos > MAX_RECORD_BYTES:
                raise UsageError(f"{self.path}:{line}: no whole JSON item within {MAX_RECORD_BYTES // 2**20} MiB"
                                 f"{problem}; fix: give a JSON array of conversations (ShareGPT)")  # fmt: skip
            self._more()


def count_records(path: Path, records: Iterable[object]) -> int:
    """How many ``records`` there are (each one checked as the iterable makes it), at most MAX_RECORDS.

    Raises:
        UsageError: more than MAX_RECORDS, or none.
    """
    total = 0
    for _ in records:
        total += 1
        if total > MAX_RECORDS:
            raise UsageError(f"{path} holds more than {MAX_RECORDS:,} prompts; fix: keep fewer in the file "
                             "(a benchmark sends num_prompts of them)")  # fmt: skip
    if not total:
        raise UsageError(f"{path} holds no prompts; fix: put at least one prompt in it")
    return total


def shuffled_first(path: Path, items: Callable[[], Iterable[Item]], total: int, seed: int, count: int,
                   usable: Callable[[Item], Kept | None]) -> list[Kept]:  # fmt: skip
    """The first ``count`` usable items of the ``total`` that ``items()`` makes, shuffled by ``random.Random(seed)``:
    what shuffling a list of them and keeping the first ``count`` that ``usable`` keeps (not None) gives, without
    the list. The shuffle of their indices ranks them; a second pass over ``items()`` keeps the best-ranked ones (a
    shuffle depends only on the length, so the order is the list's).

    Raises:
        UsageError: ``items()`` made more than ``total`` (the file changed in between).
    """
    order = array("L", range(total))
    random.Random(seed).shuffle(order)
    rank = array("L", bytes(order.itemsize * total))
    for position, index in enumerate(order):
        rank[index] = position
    del order
    kept: list[tuple[int, Kept]] = []  # a heap of (-rank, value): the worst-ranked kept item first
    for index, item in enumerate(items()):
        if index >= total:
            raise UsageError(f"{path} changed while it was read; fix: leave the dataset unchanged while it is used")
        if len(kept) == count and rank[index] > -kept[0][0]:
            continue  # ranked after every item kept: not looked at (a ShareGPT item is not even tokenized)
        value = usable(item)
        if value is not None:
            heapq.heappush(kept, (-rank[index], value))
            if len(kept) > count:
                heapq.heappop(kept)
    return [value for _, value in sorted(kept, key=lambda pair: -pair[0])]
