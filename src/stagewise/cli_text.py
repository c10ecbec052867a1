"""Plain text at a width, for the listings a person reads (``labs``, ``show``): the terminal's
width, else :data:`LINE_WIDTH` columns (a pipe, a notebook). Nothing here cuts a word, a number
or a bracketed group in two: a text that does not fit is wrapped at spaces, packed item by
item, or (:func:`gist`) shortened to its leading clauses or words with the rest left for
``--long``."""

from __future__ import annotations

import shutil
import textwrap
from typing import Iterable

LINE_WIDTH = 80
"""Columns of a listing when the output is not a terminal (a pipe, a notebook)."""
MIN_GIST = 24
"""Fewest columns a gist gets, however long what stands before it on its line."""
_CLAUSE_ENDS = ("; ", ": ", " (", ", ")


def line_width() -> int:
    """Columns of the output: ``COLUMNS``, else the terminal's, else :data:`LINE_WIDTH`."""
    return shutil.get_terminal_size((LINE_WIDTH, 24)).columns


def gist(text: str, width: int) -> str:
    """The longest run of whole clauses of ``text`` that fits ``width`` columns (cut before "; ",
    ": ", " (" or ", ", outside brackets), else its words up to ``width`` with "...", else "(see
    --long)"; never a word or a value cut in two."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    depth, cuts = 0, []
    for i, ch in enumerate(text[:width + 1]):
        if depth == 0 and i > 0 and text.startswith(_CLAUSE_ENDS, i) and not text[i + 2:i + 3].isdigit():  # not in a list of values
            cuts.append(i)
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
    if cuts and cuts[-1] >= MIN_GIST // 2:
        return text[:cuts[-1]]
    out = ""
    for word in text.split(" "):
        if len(out) + len(word) + (1 if out else 0) > width - 3:
            break
        out += (" " if out else "") + word
    return out + "..." if out else "(see --long)"


def wrap(text: str, width: int, first: str = "", indent: str = "") -> list[str]:
    """``first + text`` in lines of at most ``width`` columns, broken at spaces only (a word
    longer than a line stands alone on it), the later lines after ``indent``."""
    return textwrap.wrap(" ".join(text.split()), width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def pack(items: Iterable[str], width: int, sep: str = "  ", indent: str = "") -> list[str]:
    """``items`` joined by ``sep`` in lines of at most ``width`` columns, each item whole on one
    line where it fits one (a longer one is wrapped at its spaces), every line after ``indent``."""
    lines: list[str] = []
    line = ""
    for item in items:
        if line and len(line + sep + item) <= width:
            line += sep + item
            continue
        if line:
            lines.append(line)
        *whole, line = wrap(item, width, indent, indent)  # one line where it fits
        lines += whole
    return lines + [line] if line else lines
