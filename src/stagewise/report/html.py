"""Building blocks of the self-contained report pages, and the claims.md of a reproduce
folder (the pages themselves: :mod:`stagewise.report.pages`).

Every page comes from a Jinja2 template in ``report/templates/`` (:func:`render`), with
autoescaping on: any value a template prints (a run name, a token, a note, an error text)
is text, never markup; markup from another template enters only as the
:class:`markupsafe.Markup` :func:`render` returns. A page is one file: CSS inline
(``templates/style.css``), every figure embedded as a ``data:image/png;base64,...`` URI, no
script and no external URL. Numbers are shown by :func:`~stagewise.report.matrix.number`
(``SIGNIFICANT`` significant digits).

Paths in a report come from files a user may have received (``sweep.json``'s ``run_dir``,
``claims.json``'s figure names), so two rules hold for every page:

* a link is written only by the templates' ``link`` macro, whose href is
  :func:`safe_href`'s: a relative path that stays inside the page's folder after
  normalisation, percent-encoded (or an in-page ``#id``); anything else (``javascript:``,
  ``data:``, ``//host``, ``/abs``, ``..`` escaping, backslashes, control characters) is
  shown as plain text, not a link;
* a figure is embedded only by :func:`figures`, and only when its file, symlinks
  resolved, lies inside the report's folder (:func:`inside_folder`); others are named as
  skipped.
"""

from __future__ import annotations

import base64
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Sequence
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .matrix import NONE_TEXT, REASON_CHARS, SIGNIFICANT, Column, Matrix, RunClaims, as_claim, element_id, is_number
from .matrix import markdown_cell, matrix_markdown, number, over_seeds_lines, over_seeds_matrix, runs_matrix

TEMPLATES = Path(__file__).resolve().parent / "templates"
"""The page templates (package data: ``report/templates/*``)."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""First bytes of every PNG file; a figure without them is reported missing, not embedded."""

URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
"""A URL scheme at the start of an href (``javascript:``, ``data:``, ``C:``): never a link."""

IN_PAGE_ANCHOR = re.compile(r"^#[A-Za-z0-9_-]+$")
"""The one non-path href allowed: an element id of the same page."""

FORBIDDEN_IN_HREF = re.compile(r"[\x00-\x1f\x7f\\]")
"""Control characters and backslashes (which browsers drop or read as '/'): never a link."""


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


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = number
    env.filters["safe_href"] = lambda href, up=0: safe_href(href, up=up)
    env.tests["number"] = is_number
    env.globals.update(none_text=NONE_TEXT, reason_chars=REASON_CHARS)
    return env


ENVIRONMENT = _environment()
"""The one Jinja2 environment of every page: autoescape on, undefined names are errors."""


def render(template: str, **context: Any) -> Markup:
    """``templates/TEMPLATE`` rendered with ``context`` (every value escaped unless it is
    already :class:`~markupsafe.Markup`, i.e. another template's output)."""
    return Markup(ENVIRONMENT.get_template(template).render(**context))


def inside_folder(root: str | Path, path: str | Path) -> Path | None:
    """``path`` with symlinks resolved when it lies inside the folder ``root`` (also
    resolved) or is it; else None. A symlink inside ``root`` that points outside is outside."""
    try:
        resolved, folder = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return resolved if resolved == folder or folder in resolved.parents else None


WIDE_FIGURE_PX = 1100
"""A PNG at least this wide (a multi-panel figure) spans the whole row of the figure grid;
narrower ones sit two to a row at the report's width."""


def png_width(uri: str) -> int:
    """Pixel width of the PNG in a data URI (the IHDR chunk: bytes 16..20 of the file)."""
    head = base64.b64decode(uri.split(",", 1)[1][:32])  # (24,) bytes: signature, IHDR length and type, width
    return int.from_bytes(head[16:20], "big") if len(head) >= 20 else 0


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
class ShownFigure:
    """What the figures template gets: the name and either the data URI or why it is not shown."""

    name: str
    uri: str | None
    pdf_href: str | None
    note: str = ""
    wide: bool = False


@dataclass(frozen=True)
class FigureBlock:
    """The rendered figures: the HTML, the PNGs embedded (page order) and the names not
    embedded (unreadable, no PNG, or outside the report's folder)."""

    html: Markup
    embedded: tuple[Path, ...]
    missing: tuple[str, ...]


def figures(entries: Sequence[FigureEntry], root: str | Path) -> FigureBlock:
    """Every figure whose PNG lies inside ``root`` (the report's folder; symlinks resolved,
    :func:`inside_folder`) embedded; one outside becomes a visible 'figure NAME skipped: not
    inside the report's folder' (its bytes are never read), one that cannot be read a
    visible 'missing figure NAME'. The PDF link goes through the ``link`` macro."""
    shown, embedded, missing = [], [], []
    for entry in entries:
        if inside_folder(root, entry.png) is None:
            missing.append(entry.name)
            shown.append(ShownFigure(entry.name, None, None, f"figure {entry.name} skipped: not inside the report's folder"))
            continue
        uri = png_data_uri(entry.png)
        if uri is None:
            missing.append(entry.name)
            shown.append(ShownFigure(entry.name, None, None, f"missing figure {entry.name}"))
            continue
        embedded.append(entry.png)
        shown.append(ShownFigure(entry.name, uri, entry.pdf_href, wide=png_width(uri) >= WIDE_FIGURE_PX))
    return FigureBlock(render("figures.html", figures=shown) if shown else Markup(""), tuple(embedded), tuple(missing))


# ----------------------------------------------------------------- reproduce claims.md
def _evidence_href(run: str, claim_id: str) -> str:
    """The href of a claim's evidence in a run's section (``#ev-NAME-ID``)."""
    return "#" + element_id("ev", run, claim_id)


def report_sources(report: dict[str, Any], sources: Mapping[str, str] | None = None) -> dict[str, str]:
    """Paper key -> heading of a reproduce report: ``sources`` (its labs' declarations) with
    the report's own ``sources`` over them (a ``claims.json`` written before it had one has none)."""
    own = report.get("sources")
    return {**(sources or {}), **(own if isinstance(own, dict) else {})}


def reproduce_matrix(report: dict[str, Any], links: dict[str, str] | None = None,
                     sources: Mapping[str, str] | None = None) -> Matrix:
    """The claims x runs matrix of a reproduce report (``claims.json``): a column per run
    (its header links to the run's section, ``#run-NAME``), each cell to the claim's
    evidence there (``#ev-NAME-ID``); on a report over labs (``lab`` "all", runs named
    ``LAB/NAME``) a row per lab and claim id. ``sources``: paper key -> heading
    (:func:`report_sources`)."""
    over_labs = report.get("lab") == "all"
    runs = []
    for run in report["runs"]:
        name = str(run["name"])
        column = Column(name, "#" + element_id("run", name), str(run.get("status")))
        runs.append(RunClaims(column, [as_claim(c) for c in run.get("claims") or []], len(run.get("seeds") or []),
                              functools.partial(_evidence_href, name),
                              name.split("/", 1)[0] if over_labs and "/" in name else ""))
    return runs_matrix(runs, report_sources(report, sources))


def reproduce_markdown(report: dict[str, Any], sources: Mapping[str, str] | None = None) -> str:
    """``claims.md``: the claims x runs matrix grouped by source (one vocabulary: holds /
    fails / not testable, with the reason), then each run's status, evidence and figures.
    ``sources``: paper key -> heading (:func:`report_sources`)."""
    matrix = reproduce_matrix(report, sources=sources)
    counts = matrix.counts()
    lines = [f"# stagewise reproduce {report['lab']}{' --quick' if report.get('quick') else ''}", "",
             f"{matrix.n_claims} claims over {len(report['runs'])} runs, {matrix.n_checks} claim checks: "
             + ", ".join(f"{word} {n}" for word, n in counts.items()), "", "## Claims", ""]
    lines += matrix_markdown(matrix) or ["no claims", ""]
    over = [as_claim(c) for c in report.get("over_seeds") or []]
    if over:
        lines += ["## Claims over seeds", ""] + matrix_markdown(over_seeds_matrix(over, sources))
        lines += [f"- {markdown_cell(line)}" for line in over_seeds_lines(over)] + [""]
    lines += ["## Runs", ""]
    for run in report["runs"]:
        heading = (f"### {run['name']} (preset {run.get('preset')}, seeds {run.get('seeds')}, {run['status']}, "
                   f"{number(run.get('seconds'))} s)")
        lines += [heading, ""]
        if run.get("error"):
            lines += [f"**{run['status']}**: {markdown_cell(run['error'])}", ""]
        claims = [as_claim(c) for c in run.get("claims") or []]
        if claims:
            lines += ["| claim | evidence |", "|---|---|"]
            lines += [f"| {markdown_cell(c.id)} | {markdown_cell(c.evidence or NONE_TEXT)} |" for c in claims]
        lines += [""] + [f"![{Path(f).stem}]({f})" for f in run.get("figures") or []] + [""]
    return "\n".join(lines)


__all__ = ["SIGNIFICANT", "NONE_TEXT", "number", "is_number", "safe_href", "inside_folder", "render", "figures",
           "FigureEntry", "FigureBlock", "reproduce_markdown", "reproduce_matrix", "report_sources"]
