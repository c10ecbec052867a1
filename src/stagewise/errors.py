"""User-facing errors: one clear line each (what is wrong, which value, what is allowed)."""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any

MAX_LINES = 20
"""At most this many problems of one UserError are shown one per line; the rest become one
summary line (a data file with 200,000 bad samples must not print 200,000 lines)."""

MAX_KINDS_SHOWN = 5
"""Kinds of problem named in the summary line (the most frequent first)."""

KIND_WORDS = 4
"""A problem's kind is at most this many leading words of its message."""

MAX_REPR = 60
"""Longest rendering of a bad Python value (a model, a tensor, a huge int) in a one-line error."""

_STOP_WORDS = frozenset({"in", "of", "at", "for", "from", "with", "is", "are", "has", "the", "a", "an"})
_WORD = re.compile(r"[A-Za-z][A-Za-z-]*")


class UserError(Exception):
    """Bad input from a user. Carries one or more one-line messages.

    ``messages`` holds every problem (callers may re-wrap them); ``lines`` is what the CLI
    prints, one per line (no traceback), before exiting with code 2: at most
    :data:`MAX_LINES` messages and one line summarizing the rest.
    """

    def __init__(self, *messages: str):
        if not messages:
            raise ValueError("UserError needs at least one message")
        self.messages = tuple(m.replace("\n", " ") for m in messages)
        super().__init__(*self.messages)

    @cached_property
    def lines(self) -> tuple[str, ...]:
        """The lines to print (computed when first asked: a re-wrapped error never is)."""
        return cap_lines(self.messages)

    def __str__(self) -> str:
        return "; ".join(self.lines)


class NotAvailable(UserError):
    """A UserError for something the input needs that this machine does not have: an
    optional package (a sink, an executor, a model package) or a model that is neither
    cached nor reachable; ``needs`` names it. Tests skip with this message as the reason."""

    def __init__(self, needs: str, message: str):
        self.needs = needs
        super().__init__(message)


def cap_lines(messages: tuple[str, ...], limit: int = MAX_LINES) -> tuple[str, ...]:
    """The first ``limit`` messages, then ``... and N more problems (K kinds: ...)``."""
    if len(messages) <= limit:
        return messages
    shown, hidden = messages[:limit], messages[limit:]
    prefix = _common_label(messages)
    kinds = Counter(problem_kind(m, prefix) for m in hidden)
    same = set(kinds) <= {problem_kind(m, prefix) for m in shown}
    named = ", ".join(f"{kind} x{count}" for kind, count in kinds.most_common(MAX_KINDS_SHOWN))
    more = ", ..." if len(kinds) > MAX_KINDS_SHOWN else ""
    what = "of the same kinds " if same else ""
    plural = "s" if len(kinds) > 1 else ""
    return (*shown, f"... and {len(hidden)} more problems {what}({len(kinds)} kind{plural}: {named}{more})")


def _common_label(messages: tuple[str, ...]) -> str:
    """The ``label: `` all messages start with (e.g. ``data.file=x.json: ``), or ""."""
    common = os.path.commonprefix(list(messages))
    cut = common.rfind(": ")
    return common[:cut + 2] if cut >= 0 else ""


def problem_kind(message: str, prefix: str = "") -> str:
    """A short name of what kind of problem a message reports: its leading plain words
    (``unknown token 'z' in sample ...`` -> ``unknown token``), without the shared prefix."""
    words: list[str] = []
    for word in message[len(prefix):].split():
        plain = word.rstrip(":;,.")
        numbered = plain.isdigit() and words and words[-1][0].isupper()  # "Assumption 3"
        if not (numbered or _WORD.fullmatch(plain)) or (words and word.lower() in _STOP_WORDS):
            break
        words.append(plain)
        if word[-1] in ":;,." or len(words) == KIND_WORDS:
            break
    if words:
        return " ".join(words)
    first = message[len(prefix):].split("=", 1)[0].split(" ", 1)[0]
    return re.sub(r"\d+", "N", first) or "other"


def validation_line(err: Any) -> str:
    """A pydantic ``ValidationError``'s first problem as one line: ``a.b: what is wrong`` (the
    validator's "Value error, " prefix dropped; no location: the message alone)."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{loc}: {message}" if loc else message


def short_repr(value: object, limit: int = MAX_REPR) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (``...`` at the end when cut)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Note(UserWarning):
    """Something the user should know that is not an error (e.g. an index rebuilt from the
    run folders): the CLI prints it as one ``note:`` line."""


class RenamedOption(FutureWarning):
    """A config key given under its old name (still accepted): the CLI prints it as one note line."""


class RenamedMetric(RenamedOption):
    """A metric named by its old name (a ``stages`` criterion, a sweep report entry; still
    accepted through the lab's ``metric_aliases``): the CLI prints it as one note line."""


def readable_file(path: Path, limit: int, *, kind: str, label: str = "", folder: str = "folder") -> int:
    """The size in bytes of ``path``, a regular file of at most ``limit`` bytes; one-line
    UserError otherwise (``label`` prefixes the path, e.g. ``"--config "``; ``kind`` says what
    was expected, e.g. ``"a YAML file"``; ``folder`` what a folder is called there).

    Example::

        readable_file(Path("sick/SICK.txt"), 2**30, kind="a data file")   # its size, or UserError
    """
    if path.is_dir():
        raise UserError(f"{label}{path}: is a {folder}, expected {kind}")
    if not path.is_file():
        raise UserError(f"{label}{path}: file not found")
    try:
        size = path.stat().st_size
    except OSError as err:
        raise UserError(f"{label}{path}: cannot be read ({err.strerror or err})") from None
    if size > limit:
        raise UserError(f"{label}{path}: file too large ({size} bytes; at most {limit} bytes)")
    return size


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (UTF-8); one-line UserError naming ``what`` (e.g. "sweep
    index") when the file cannot be read, is not JSON (nested too deeply included), or holds
    something else than an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # e.g. "[" * 100_000
        raise UserError(f"{path}: unreadable {what} (not valid JSON: nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else ""
        raise UserError(f"{path}: unreadable {what} ({type(err).__name__}{': ' + first if first else ''})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a {what} (expected an object, got {type(data).__name__})")
    return data


def finite_number(text: str, message: str, hint: str = "") -> float:
    """``float(text)`` when it is a finite number; otherwise UserError ``message`` followed by
    the text and why (``"threshold 'x' is not a number"``, ``"threshold 'nan' is not finite;
    give a finite number"``), then ``; hint`` when given."""
    try:
        value = float(text)
    except ValueError:
        why = "is not a number"
    else:
        if math.isfinite(value):
            return value
        why = "is not finite; give a finite number"
    raise UserError(f"{message} {text.strip()!r} {why}" + (f"; {hint}" if hint else ""))
