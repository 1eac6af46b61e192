"""Text for a line, a stored attribute, a terminal or a spreadsheet: one rule everywhere a reason is cut, and the
guards for values a user (or a hostile file) wrote: control characters made visible before a terminal sees them,
CSV cells a spreadsheet would run as formulas made inert, a pydantic message joined to ours without changing the
value it quotes."""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any

ELLIPSIS = "…"
VALUE_WIDTH = 80  # characters of a value an error message echoes (a value from a file can be megabytes)
# What a terminal obeys rather than shows: C0 controls but newline and tab (ESC starts colour, title and hyperlink
# sequences, BEL rings, CR overwrites the line), DEL, C1 controls (0x9b is a one-byte CSI on some terminals), and the
# bidirectional overrides and isolates that make text read in another order than it runs ("Trojan Source").
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What makes a spreadsheet (Excel, LibreOffice, Google Sheets) read a cell as a formula (OWASP's list): = + - @, and
# tab or CR before one of them
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def shorten(text: str, limit: int, full_text_at: str | Path | None = None) -> str:
    """``text`` on one line in at most ``limit`` characters (whitespace runs become one space), cut after its last
    whole word with "…"; a single word longer than half the limit is cut inside (a path, a hash). When it was cut,
    ``full_text_at`` (where the whole text is, e.g. a server log) follows: ``… (full text: PATH)``.

    Args:
        text: the text, e.g. a failure reason taken from an engine's log.
        limit: the most characters kept of ``text`` (the pointer to the full text comes on top).
        full_text_at: where the reader finds the text uncut; said only when something was cut.
    """
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    room = max(1, limit - len(ELLIPSIS))
    head = line[: room + 1]  # one more: a word that ends exactly at the limit is kept whole
    space = head.rfind(" ")
    head = head[:space] if space >= limit // 2 else line[:room]
    cut = head.rstrip(" ,;:([{'\"") + ELLIPSIS
    return f"{cut} (full text: {full_text_at})" if full_text_at else cut


def brief_repr(value: Any, limit: int = VALUE_WIDTH) -> str:
    """``repr(value)`` for an error message, in at most ``limit`` characters (cut as ``shorten`` cuts). Long strings,
    lists and mappings are elided as they are written (``reprlib``), so a huge value costs no huge repr."""
    brief = reprlib.Repr()
    brief.maxlevel, brief.maxstring, brief.maxother = 3, limit, limit
    brief.maxlist = brief.maxtuple = brief.maxset = brief.maxdict = 8
    return shorten(brief.repr(value), limit)


def terminal_safe(text: str) -> str:
    """``text`` as a terminal shows it rather than obeys it: each control character (ESC, BEL, CR, DEL, C1, the
    bidirectional overrides) written as Python writes it in a string, ``\\x1b``, ``\\r``, ``\\u202e``; newlines and
    tabs kept. For any text that a user's files or a study's records put on the screen (a launch command, a knob's
    value, a failure reason)."""
    return _TERMINAL_CONTROLS.sub(_visible_escape, text)


def _visible_escape(control: re.Match) -> str:
    char = control.group()
    return "\\r" if char == "\r" else f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def csv_cell(value: Any) -> Any:
    """``value`` for a cell of a CSV file a spreadsheet may open: text that would start a formula (``=HYPERLINK(…)``,
    ``+cmd|…``, ``@SUM``, ``-1+1``) gets a leading apostrophe, which spreadsheets read as "this cell is text";
    numbers and other text are kept as they are."""
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value


def lowercase_first(message: str) -> str:
    """A message that starts a sentence (pydantic's ``Input should be …``, ``Value error, …``), to follow a colon in
    one of ours: its first letter lowercased, and a validator's ``Value error,`` prefix dropped. Only the first
    letter: the rest may quote what the user typed (``'-Bad' starts with '-'``), which must read as typed."""
    message = message.removeprefix("Value error, ")
    return message[:1].lower() + message[1:]
