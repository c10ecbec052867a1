"""HTML building blocks for self-contained reports, and the claims.md of a reproduce folder
(its report.html is :func:`stagewise.report.pages.reproduce_html_page`).

A report page is one file: CSS inline, every figure embedded as a
``data:image/png;base64,...`` URI, no script and no external URL. All text goes through
:func:`esc`; numbers through :func:`number` (``SIGNIFICANT`` significant digits). The pages
themselves are built in :mod:`stagewise.report.pages`.

Paths in a report come from files a user may have received (``sweep.json``'s ``run_dir``,
``claims.json``'s figure names), so two rules hold for every page:

* a link is written only by :func:`link`, whose href is :func:`safe_href`'s: a relative
  path that stays inside the page's folder after normalisation, percent-encoded (or an
  in-page ``#id``); anything else (``javascript:``, ``data:``, ``//host``, ``/abs``, ``..``
  escaping, backslashes, control characters) is shown as plain text, not a link;
* a figure is embedded only by :func:`figures`, and only when its file, symlinks
  resolved, lies inside the report's folder (:func:`inside_folder`); others are named as
  skipped.
"""

from __future__ import annotations

import base64
import html
import math
import re
from urllib.parse import quote
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

SIGNIFICANT = 4
"""Significant digits of every float shown in a report (``f"{x:.4g}"``)."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""First bytes of every PNG file; a figure without them is reported missing, not embedded."""

NONE_TEXT = "–"
"""How a missing value (None, NaN) is shown in a table."""

URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
"""A URL scheme at the start of an href (``javascript:``, ``data:``, ``C:``): never a link."""

IN_PAGE_ANCHOR = re.compile(r"^#[A-Za-z0-9_-]+$")
"""The one non-path href allowed: an element id of the same page."""

FORBIDDEN_IN_HREF = re.compile(r"[\x00-\x1f\x7f\\]")
"""Control characters and backslashes (which browsers drop or read as '/'): never a link."""

CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;color:#222;background:#fff}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1em}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;"
    "vertical-align:top;text-align:left}th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".held{background:#d9f2d9;color:#145214}.notheld{background:#f8d7d7;color:#8a0000}.untestable{background:#eee;color:#555}"
    ".partial{background:#fdf0cc;color:#6b4e00}tr.failed td{background:#fbe3e3}.error,.missing{color:#b00000}"
    ".scroll{overflow-x:auto}pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:12px}"
    "figure{margin:.8em 0}figure img{max-width:100%;border:1px solid #eee}"
    "figcaption{font-size:12px;color:#555}.counts span{margin-right:1em}a{color:#0645ad}"
)


def esc(text: Any) -> str:
    """``text`` as HTML text (quotes escaped too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else unchanged."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, TypeError):
            return value
    return value


def number(value: Any) -> str:
    """A compact text for a table cell: floats to ``SIGNIFICANT`` digits, bools yes/no,
    None and NaN as ``NONE_TEXT``; anything else ``str``. Not escaped."""
    value = _plain(value)
    if value is None or value is pd.NA or value is pd.NaT:
        return NONE_TEXT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return NONE_TEXT if math.isnan(value) else f"{value:.{SIGNIFICANT}g}"
    return str(value)


def is_number(value: Any) -> bool:
    """Whether a cell is numeric (then right-aligned)."""
    value = _plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Verdict:
    """How a claim's ``holds`` is shown: css class and words."""

    css: str
    text: str


def verdict(holds: bool | None, words: tuple[str, str, str] = ("yes", "no", "not testable")) -> Verdict:
    """True / False / None -> held / not held / untestable, with the given words."""
    if holds is None:
        return Verdict("untestable", words[2])
    return Verdict("held", words[0]) if holds else Verdict("notheld", words[1])


def td(value: Any, css: str = "") -> str:
    """One escaped cell; numbers right-aligned."""
    classes = " ".join(c for c in (css, "num" if is_number(value) else "") if c)
    return f"<td class='{classes}'>{esc(number(value))}</td>" if classes else f"<td>{esc(number(value))}</td>"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], row_css: Sequence[str] | None = None) -> str:
    """A table from escaped header names and rows of ready ``<td>`` strings (see :func:`td`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        css = row_css[i] if row_css is not None and i < len(row_css) and row_css[i] else ""
        body.append(f"<tr class='{css}'>" + "".join(row) + "</tr>" if css else "<tr>" + "".join(row) + "</tr>")
    return f"<div class='scroll'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def safe_href(path: Any, *, up: int = 0) -> str | None:
    """The href of ``path`` ('/'-separated, relative to the page) when it may be a link,
    else None.

    Allowed: an in-page anchor (``IN_PAGE_ANCHOR``), or a relative path that, normalised
    (empty and ``.`` segments dropped, ``a/..`` cancelled), stays inside the page's folder,
    climbing at most ``up`` folders (a run page ``up`` folders below the report it links
    back to). Refused: anything not a string, empty, surrounding whitespace, a URL scheme
    (``URL_SCHEME``, before or after normalisation), a leading '/' (an absolute path or
    ``//host``), a backslash or control character (``FORBIDDEN_IN_HREF``), a path naming no
    file (``a/..``), ``..`` climbing further. The result is percent-encoded per segment (every character but
    ``A-Za-z0-9-._~``), so ':', '?', '#', '%', quotes and spaces are part of a file name,
    never URL syntax: ``runs/a b/report.html`` -> ``runs/a%20b/report.html``."""
    if not isinstance(path, str) or not path or FORBIDDEN_IN_HREF.search(path):
        return None
    if IN_PAGE_ANCHOR.match(path):
        return path
    if path != path.strip() or path.startswith("/") or URL_SCHEME.match(path):  # browsers strip the spaces
        return None
    kept: list[str] = []
    climbs = 0
    for segment in path.split("/"):  # (n,) segments
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
            elif climbs < up:
                climbs += 1
            else:
                return None  # escapes the folder
        else:
            kept.append(segment)
    if not kept or URL_SCHEME.match(kept[0]):
        return None
    return "/".join([".."] * climbs + [quote(segment, safe="") for segment in kept])


def link(href: str | None, text: Any, *, up: int = 0) -> str:
    """``<a href=...>text</a>`` when :func:`safe_href` accepts ``href`` (``up``: see there),
    else ``text`` alone, escaped: a path that may not be a link is shown, never followed."""
    target = safe_href(href, up=up)
    if target is None:
        return esc(text)
    return f"<a href='{esc(target)}'>{esc(text)}</a>"


def details(summary: str, body: str, is_open: bool = False) -> str:
    """A collapsible block (plain HTML: readable without script)."""
    return f"<details{' open' if is_open else ''}><summary>{esc(summary)}</summary>{body}</details>"


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def inside_folder(root: str | Path, path: str | Path) -> Path | None:
    """``path`` with symlinks resolved when it lies inside the folder ``root`` (also
    resolved) or is it; else None. A symlink inside ``root`` that points outside is outside."""
    try:
        resolved, folder = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return resolved if resolved == folder or folder in resolved.parents else None


def png_data_uri(path: Path) -> str | None:
    """``data:image/png;base64,...`` of a PNG file; None when it cannot be read or is no PNG."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if not data.startswith(PNG_SIGNATURE):
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class FigureEntry:
    """One figure to show: its name, its PNG and (optionally) a relative href to its PDF."""

    name: str
    png: Path
    pdf_href: str | None = None


@dataclass(frozen=True)
class FigureBlock:
    """The rendered figures: the HTML, the PNGs embedded (page order) and the names not
    embedded (unreadable, no PNG, or outside the report's folder)."""

    html: str
    embedded: tuple[Path, ...]
    missing: tuple[str, ...]


def figures(entries: Sequence[FigureEntry], root: str | Path) -> FigureBlock:
    """Every figure whose PNG lies inside ``root`` (the report's folder; symlinks resolved,
    :func:`inside_folder`) embedded; one outside becomes a visible 'figure NAME skipped: not
    inside the report's folder' (its bytes are never read), one that cannot be read a
    visible 'missing figure NAME'. The PDF link goes through :func:`link`."""
    parts, embedded, missing = [], [], []
    for entry in entries:
        if inside_folder(root, entry.png) is None:
            missing.append(entry.name)
            parts.append(f"<p class='missing'>figure {esc(entry.name)} skipped: not inside the report's folder</p>")
            continue
        uri = png_data_uri(entry.png)
        if uri is None:
            missing.append(entry.name)
            parts.append(f"<p class='missing'>missing figure {esc(entry.name)}</p>")
            continue
        embedded.append(entry.png)
        pdf = f" · {link(entry.pdf_href, 'PDF')}" if entry.pdf_href else ""
        parts.append(f"<figure><img alt='{esc(entry.name)}' src='{uri}'><figcaption>{esc(entry.name)}{pdf}"
                     "</figcaption></figure>")
    return FigureBlock("\n".join(parts), tuple(embedded), tuple(missing))


def page(title: str, body: Iterable[str]) -> str:
    """A whole self-contained document."""
    return "\n".join([f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
                      f"<style>{CSS}</style></head><body>", *body, "</body></html>"])


# ----------------------------------------------------------------- reproduce claims.md
def _mark(holds: bool | None) -> str:
    return "untestable" if holds is None else "yes" if holds else "no"


def reproduce_markdown(report: dict[str, Any]) -> str:
    lines = [f"# stagewise reproduce {report['lab']}{' --quick' if report['quick'] else ''}", ""]
    for run in report["runs"]:
        lines += [f"## {run['name']} (preset {run['preset']}, seeds {run['seeds']}, {run['status']}, {run['seconds']} s)", ""]
        if run["error"]:
            lines += [f"**{run['status']}**: {run['error']}", ""]
        lines += [
                  "| claim | holds | evidence |", "|---|---|---|"]
        for c in run["claims"]:
            lines.append(f"| {c['id']}: {c['statement']} | {_mark(c['holds'])} | {c['evidence']} |")
        lines += [""] + [f"![{Path(f).stem}]({f})" for f in run["figures"]] + [""]
    return "\n".join(lines)
