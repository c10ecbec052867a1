"""The report pages: one run directory, a sweep folder, a reproduce folder (one lab or all).

Every page has one shape (templates ``run.html``, ``sweep.html``, ``reproduce.html``): the
claims x runs matrix first (:mod:`stagewise.report.matrix`: rows grouped by source, each
claim's declaration once, each cell verdict + value linked to its evidence), then the
details folded in ``<details>`` blocks (evidence per claim, stage tables, final metrics,
figures, manifest, config). Each function returns a :class:`Page` (the HTML text, the PNGs
it embeds, the figures it could not read); writing files is
:mod:`stagewise.orchestrate.reporting`'s job. Links between pages are relative hrefs given
by the caller, so a folder can be moved or zipped; every href goes through
:func:`~stagewise.report.html.safe_href` (a path that would leave the folder or carries a
URL scheme is plain text) and every figure through :func:`~stagewise.report.html.figures`
(only files inside the report's folder).

Stage boundaries: any dict inside ``summary.details`` shaped like
:meth:`stagewise.measure.StageReport.as_dict` (``{"order": [...], "stages": {name:
{"per_seed", "mean", "min", "max", "n_reached", "n_seeds", ...}}}``), at any depth, is
rendered as a table named by its dotted path.

Record tables: any list of flat records (dicts of scalars) and any mapping of names to flat
records inside ``summary.details`` (e.g. the NTP lab's ``named_cases`` and its
per-category ``generalization`` accuracies) is an HTML table (:func:`detail_tables`): a
report never shows a table as an image.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pandas as pd
from markupsafe import Markup

from ..errors import UserError
from ..runs import read_manifest
from ..runs.names import rename_keys
from .claims import Claim, Summary, read_summary
from .html import FigureEntry, figures, inside_folder, render, reproduce_matrix
from .matrix import (Column, RunClaims, as_claim, element_id, number, over_seeds_lines, over_seeds_matrix, runs_matrix,
                     sweep_matrix)

STAGE_KEYS = frozenset({"per_seed", "mean", "min", "max", "n_reached", "n_seeds"})
"""Keys every stage entry of a StageReport-shaped dict has."""

MAX_ROWS = 2000
"""Rows of the sweep's collect table shown on the page (the Parquet table has them all)."""

MAX_DETAILS_CHARS = 200_000
"""Characters of a run's ``summary.details`` JSON shown (collapsed) on its page."""

MAX_DETAIL_ROWS = 500
"""Rows of one record table of ``summary.details`` shown (the rest are counted below it)."""

MAX_DETAIL_DEPTH = 3
"""How deep inside ``summary.details`` record tables are looked for."""

MATRIX_ONLY = ("claim.", "claim_value.")
"""Collect-table column prefixes shown in the claims matrix, so left out of the collected-results table."""


@dataclass(frozen=True)
class Page:
    """A rendered page: its title, the document, the PNGs embedded (in page order) and the
    names of figures not embedded: unreadable ('missing figure NAME') or outside the
    report's folder ('figure NAME skipped')."""

    title: str
    html: str
    figures: tuple[Path, ...]
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Evidence:
    """One claim's evidence row (``anchor``: the id the matrix cell links to); ``statement``
    only when it differs from the matrix row's (a case-specific statement)."""

    anchor: str
    id: str
    per_seed: str
    text: str
    statement: str = ""


def evidence_rows(claims: Sequence[Claim], anchor_of: Any, statements: Mapping[str, str] | None = None) -> list[Evidence]:
    """A row per claim: per-seed values (``seed: value``), evidence text, the reason when not testable."""
    out = []
    for c in claims:
        per_seed = ", ".join(f"{seed}: {number(v)}" for seed, v in c.per_seed.items())
        text = "; ".join(t for t in (f"not testable: {c.reason}" if c.reason else "", c.evidence) if t)
        shown = (statements or {}).get(c.id, c.statement)
        out.append(Evidence(anchor_of(c.id), c.id, per_seed, text, c.statement if c.statement != shown else ""))
    return out


# ------------------------------------------------------------------------------ run
def run_title(manifest: dict[str, Any], preset: str | None) -> str:
    """``stagewise ntp run, preset example1: done``."""
    return f"stagewise {manifest['lab']} run{f', preset {preset}' if preset else ''}: {manifest['status']}"


def _manifest_rows(manifest: dict[str, Any]) -> list[tuple[str, Any]]:
    versions = manifest.get("versions") or {}
    fields = [("status", manifest["status"]), ("config hash", manifest["config_hash"]),
              ("seeds", ", ".join(str(s) for s in manifest["seeds"])),
              ("versions", ", ".join(f"{k} {v}" for k, v in versions.items())),
              ("git sha", manifest.get("git_sha")), ("host", manifest.get("host")),
              ("started", manifest.get("started")), ("ended", manifest.get("ended")),
              ("resumed", manifest.get("resumed")), ("error", manifest.get("error"))]
    if manifest.get("diverged"):
        fields.append(("diverged", json.dumps(manifest["diverged"])))
    for key, value in (manifest.get("notes") or {}).items():
        fields.append((f"note {key}", json.dumps(value) if isinstance(value, (dict, list)) else value))
    return [(k, v) for k, v in fields if k != "resumed" or v]


def is_stage_report(obj: Any) -> bool:
    """Whether ``obj`` has the shape of ``StageReport.as_dict()``."""
    return (isinstance(obj, dict) and isinstance(obj.get("order"), list) and isinstance(obj.get("stages"), dict)
            and all(isinstance(s, dict) and STAGE_KEYS <= s.keys() for s in obj["stages"].values()))


def stage_reports(obj: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, report) of every StageReport-shaped dict in ``obj``, depth first."""
    if is_stage_report(obj):
        yield ".".join(path) or "details", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from stage_reports(value, path + (str(key),))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from stage_reports(value, path + (str(i),))


@dataclass(frozen=True)
class DetailTable:
    """One record table of ``summary.details``: its dotted path, header, rows (at most
    MAX_DETAIL_ROWS) and how many rows were left out."""

    anchor: str
    where: str
    header: list[str]
    rows: list[list[Any]]
    left_out: int = 0


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _flat(record: Any) -> bool:
    return isinstance(record, Mapping) and bool(record) and all(_scalar(v) for v in record.values())


def detail_tables(obj: Any, path: tuple[str, ...] = ()) -> Iterator[DetailTable]:
    """Record tables inside ``summary.details`` (see the module docstring), depth first:
    a list of flat records (columns: the union of their keys, first-seen order) or a mapping
    of names to flat records (a first column ``name``). Stage reports are left to
    :func:`stage_table`."""
    if len(path) > MAX_DETAIL_DEPTH or is_stage_report(obj):
        return
    where = ".".join(path) or "details"
    if isinstance(obj, list) and obj and all(_flat(r) for r in obj):
        header = list(dict.fromkeys(k for r in obj for k in r))
        rows = [[r.get(k) for k in header] for r in obj[:MAX_DETAIL_ROWS]]
        yield DetailTable(element_id("table", where), where, header, rows, max(0, len(obj) - MAX_DETAIL_ROWS))
    elif isinstance(obj, Mapping) and obj and all(_flat(r) for r in obj.values()):
        header = list(dict.fromkeys(k for r in obj.values() for k in r))
        items = list(obj.items())
        rows = [[name, *(r.get(k) for k in header)] for name, r in items[:MAX_DETAIL_ROWS]]
        yield DetailTable(element_id("table", where), where, ["name", *header], rows, max(0, len(items) - MAX_DETAIL_ROWS))
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from detail_tables(value, path + (str(key),))


def stage_table(report: dict[str, Any]) -> Markup:
    """Stages in their order: seeds reaching it, mean/min/max crossing step, per-seed steps;
    the report's other scalar fields below."""
    stages = report["stages"]
    names = [s for s in report["order"] if s in stages] + [s for s in stages if s not in report["order"]]
    rows = []
    for name in names:
        s = stages[name]
        per_seed = ", ".join(f"{seed}: {number(step)}" for seed, step in s["per_seed"].items())
        rows.append([name, f"{s['n_reached']}/{s['n_seeds']}", s["mean"], s["min"], s["max"], per_seed])
    extra = [f"{k}: {number(v)}" for k, v in report.items() if k not in ("order", "stages") and not isinstance(v, (dict, list))]
    return render("stage.html", rows=rows, extra=extra)


@dataclass(frozen=True)
class StageView:
    anchor: str
    html: Markup


def run_figures(run_dir: Path) -> list[FigureEntry]:
    """Every ``figures/NAME.png`` of a run (PDF linked when present), by name."""
    out = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        pdf = png.with_suffix(".pdf")
        out.append(FigureEntry(png.stem, png, f"figures/{pdf.name}" if pdf.is_file() else None))
    return out


def run_page(run_dir: str | Path, *, preset: str | None = None, back: tuple[str, str] | None = None,
             depth: int = 0, sources: Mapping[str, str] | None = None, metric_aliases: Mapping[str, str] | None = None) -> Page:
    """The report of one run directory: its claims as a one-column matrix, then the
    details. ``back``: (href, text) of a link to the page that holds this run (a sweep or
    reproduce report), ``depth`` folders above the run (the link may climb that many, no
    more: :func:`~stagewise.report.html.safe_href`); ``sources``: paper key -> heading for
    the papers the summary itself does not name (its lab's declaration: older summaries
    have none); ``metric_aliases``: its lab's old metric names -> current ones, so an old
    summary's final values show under the current names. UserError when the manifest is
    unreadable."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    preset = preset or manifest.get("preset")
    title = run_title(manifest, preset)
    summary: Summary | None = None
    note = "no summary.json (the run did not finish)"
    if (run_dir / "summary.json").is_file():
        try:
            summary, note = read_summary(run_dir / "summary.json"), ""
        except UserError as err:
            note = err.messages[0]
    claims = list(summary.claims) if summary else []
    column = Column(run_dir.name, None, str(manifest["status"]))
    headings = {**(sources or {}), **(summary.sources if summary else {})}
    matrix = runs_matrix([RunClaims(column, claims, len(manifest["seeds"]), lambda cid: "#" + element_id("ev", cid))],
                         headings)
    stages = [(where, StageView(element_id("stages", where), stage_table(report)))
              for where, report in stage_reports(summary.details if summary else {})]
    final = [[name, s.mean, s.min, s.max] for name, s in rename_keys(summary.final if summary else {}, metric_aliases or {}).items()]
    tables = list(detail_tables(summary.details)) if summary else []
    block = figures(run_figures(run_dir), run_dir)
    try:
        config_text = (run_dir / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        config_text = f"config.yaml unreadable: {type(err).__name__}"
    lab_details = ""
    if summary is not None and summary.details:
        text = json.dumps(summary.details, indent=1, default=str)
        cut = f"\n... ({len(text) - MAX_DETAILS_CHARS} more characters in summary.json)" if len(text) > MAX_DETAILS_CHARS else ""
        lab_details = text[:MAX_DETAILS_CHARS] + cut
    rows = _manifest_rows(manifest)
    html = render("run.html", title=title, back={"href": back[0], "text": back[1], "up": depth} if back else None,
                  folder=run_dir.name, manifest=manifest, seeds=", ".join(map(str, manifest["seeds"])), note=note,
                  claims=matrix, evidence_rows=evidence_rows(claims, lambda cid: element_id("ev", cid)), stages=stages,
                  final=final, tables=tables, figures=block.html, n_figures=len(block.embedded), manifest_rows=rows,
                  manifest_css=["failed" if k == "error" and v else "" for k, v in rows], config_text=config_text,
                  lab_details=lab_details)
    return Page(title, str(html), block.embedded, block.missing)


# ---------------------------------------------------------------------------- sweep
@dataclass(frozen=True)
class SweepPointView:
    """One sweep point as the page shows it: its run's status/error and report href."""

    label: str
    hash: str
    run_dir: str
    status: str  # a manifest status, or "not started"
    error: str | None
    href: str | None  # the run's report.html, relative to the sweep folder
    lines: tuple[str, ...] = ()  # its column header: one axis value per line (sweepplan.point_lines)


@dataclass(frozen=True)
class CollectedRow:
    cells: tuple[Any, ...]
    href: str | None
    failed: bool


def _point_href(row: pd.Series, links: Mapping[str, str]) -> str | None:
    return links.get(str(row.get("run_dir"))) or links.get(str(row.get("hash")))


def _collected(frame: pd.DataFrame, links: Mapping[str, str]) -> tuple[list[str], list[CollectedRow]]:
    """The collect table's columns (point first; run_dir and the matrix's claim columns
    left out) and its first ``MAX_ROWS`` rows."""
    cols = [c for c in frame.columns if c != "run_dir" and not str(c).startswith(MATRIX_ONLY)]
    cols = (["point"] if "point" in cols else []) + [c for c in cols if c != "point"]
    rows = []
    for _, r in frame.head(MAX_ROWS).iterrows():
        failed = "status" in r and r["status"] != "done"
        rows.append(CollectedRow(tuple(r[c] for c in cols), _point_href(r, links) if "point" in cols else None, bool(failed)))
    return [str(c) for c in cols], rows


def sweep_page(index: dict[str, Any], points: Sequence[SweepPointView], frame: pd.DataFrame,
               figure_entries: Sequence[FigureEntry], warnings: Sequence[str], links: dict[str, str],
               folder: str | Path, claims: Mapping[str, Claim] | None = None,
               made: Mapping[str, frozenset[str]] | None = None, sources: Mapping[str, str] | None = None,
               unconcerned: Mapping[str, Mapping[str, str]] | None = None, over_seeds: Sequence[Claim] = ()) -> Page:
    """The report of a sweep ``folder``: the claims x points matrix (each point's cell
    linked to its run's report), failures, figures (only those inside ``folder`` are
    embedded), then the runs and the collect table folded. ``links`` maps a run's
    ``run_dir`` or hash (as in the frame) to its report href (relative to ``folder``);
    ``claims``: claim id -> a Claim of some run (its declaration for the row header);
    ``made``: point label -> the ids of the claims its run makes (see :func:`sweep_matrix`);
    ``sources``: paper key -> heading; ``unconcerned``: point label -> {claim id: reason} of the
    claims its run says are not applicable; ``over_seeds``: the lab's claims over seeds
    (``Lab.across_runs``), shown after the matrix."""
    title = f"stagewise sweep {index.get('lab', '?')}: {len(points)} points"
    statuses = dict(sorted(Counter(p.status for p in points).items()))
    by_label = {p.label: p for p in points}
    columns = {}
    if "point" in frame.columns:
        for point, group in frame.groupby("point", sort=False):
            view = by_label.get(str(point))
            status = view.status if view else ("done" if "status" not in group or (group["status"] == "done").all()
                                              else str(group["status"].iloc[0]))
            columns[str(point)] = Column(str(point), _point_href(group.iloc[0], links), status,
                                         view.lines if view else ())
    matrix = sweep_matrix(frame, columns, claims or {}, made, sources, unconcerned)
    cols, rows = _collected(frame, links)
    block = figures(figure_entries, folder)
    html = render("sweep.html", title=title, statuses=statuses, axes=[str(a) for a in index.get("axes") or []],
                  warnings=list(warnings), claims=matrix, over_seeds=over_seeds_matrix(over_seeds, sources),
                  over_seeds_lines=over_seeds_lines(over_seeds), bad=[p for p in points if p.status != "done"], points=points,
                  figures=block.html, columns=cols, rows=rows, n_rows=len(frame))
    return Page(title, str(html), block.embedded, block.missing)


# ------------------------------------------------------------------------ reproduce
def anchor(name: str) -> str:
    """An element id for a run's section."""
    return element_id("run", name)


def reproduce_title(report: dict[str, Any]) -> str:
    return f"stagewise reproduce {report['lab']}{' --quick' if report.get('quick') else ''}"


@dataclass(frozen=True)
class RunView:
    """One run's folded section of a reproduce page."""

    name: str
    anchor: str
    status: str
    preset: Any
    seeds: str
    seconds: Any
    config_hash: Any
    href: str | None
    error: Any
    evidence: list[Evidence]
    figures: Markup


def _figure_entries(run: dict[str, Any], folder: Path) -> list[FigureEntry]:
    entries = []
    for fig in map(str, run.get("figures") or []):
        pdf = Path(fig).with_suffix(".pdf") if Path(fig).name else None  # "" or ".": no file name
        has_pdf = pdf is not None and (folder / pdf).is_file() and inside_folder(folder, folder / pdf) is not None
        entries.append(FigureEntry(Path(fig).stem or fig, folder / fig, pdf.as_posix() if pdf is not None and has_pdf else None))
    return entries


def reproduce_html_page(report: dict[str, Any], folder: Path, links: dict[str, str] | None = None,
                        sources: Mapping[str, str] | None = None) -> Page:
    """The reproduce report: the claims x runs matrix first (each claim once, each cell
    linked to the run's evidence below), then one folded section per run (status, error,
    evidence per claim, figures, link to the run's own report); a run that is not done is
    unfolded.

    report: the ``claims.json`` dict of :func:`stagewise.orchestrate.reproduction.reproduce`
    (``lab``, ``quick``, ``runs``: [{name, preset, status, error, config_hash, seeds, seconds,
    claims, figures (paths relative to ``folder``)}], ``sources`` where written). links: run
    name -> report href; sources: paper key -> heading beside the report's own ``sources``.
    A figure is embedded only when it lies inside ``folder`` (symlinks resolved); a figure
    name that climbs out (``../x.png``), is absolute or is a symlink out is named as skipped."""
    links = links or {}
    title = reproduce_title(report)
    matrix = reproduce_matrix(report, sources=sources)
    statements = {row.key: row.statement for g in matrix.groups for row, _ in g.rows}  # row key: [LAB/]ID
    embedded: list[Path] = []
    missing: list[str] = []
    runs: list[RunView] = []
    for run in report["runs"]:
        name = str(run["name"])
        claims = [as_claim(c) for c in run.get("claims") or []]
        lab = name.split("/", 1)[0] + "/" if report.get("lab") == "all" and "/" in name else ""
        shown = {c.id: statements.get(lab + c.id, c.statement) for c in claims}
        block = figures(_figure_entries(run, Path(folder)), folder)
        embedded += block.embedded
        missing += block.missing
        seeds = ", ".join(map(str, run.get("seeds") or []))
        runs.append(RunView(name, anchor(name), str(run["status"]), run.get("preset"), seeds, run.get("seconds"),
                            run.get("config_hash"), links.get(name), run.get("error"),
                            evidence_rows(claims, lambda cid, name=name: element_id("ev", name, cid), shown),
                            block.html))
    statuses = dict(sorted(Counter(r.status for r in runs).items()))
    over = [as_claim(c) for c in report.get("over_seeds") or []]
    html = render("reproduce.html", title=title, claims=matrix, runs=runs, statuses=statuses,
                  over_seeds=over_seeds_matrix(over, sources), over_seeds_lines=over_seeds_lines(over))
    return Page(title, str(html), tuple(embedded), tuple(missing))


__all__ = ["Page", "SweepPointView", "run_page", "sweep_page", "reproduce_html_page", "stage_reports", "is_stage_report",
           "stage_table"]
