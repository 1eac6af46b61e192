"""Shortening text for a line or a stored attribute: one rule everywhere a reason is cut."""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

ELLIPSIS = "…"
VALUE_WIDTH = 80  # characters of a value an error message echoes (a value from a file can be megabytes)


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
