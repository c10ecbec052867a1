"""`stagewise report DIR`: one self-contained ``DIR/report.html`` for a run directory, a
sweep folder or a reproduce folder.

What a folder is, checked in this order::

    reproduce.json                -> "reproduce"  (stagewise reproduce --out DIR)
    sweep.json                    -> "sweep"      (stagewise sweep --out DIR)
    manifest.json + config.yaml   -> "run"        (stagewise run --out DIR)

Every page has one shape (:mod:`stagewise.report.pages`): the claims x runs matrix first
(rows grouped by source, each cell a verdict and value linked to its evidence), the details
folded below. The headings of the paper groups are the summaries' own ``sources``, over the
registered labs' declarations (``Lab.sources``, :func:`declared_sources`) for the papers an
older summary or ``claims.json`` does not name.

Files written::

    DIR/report.html               the page: CSS inline, figures embedded as data URIs, no script,
                                  no external URL; links to other pages are relative hrefs
    DIR/runs/<x>/report.html      (sweep, reproduce) each run's own page, linking back to DIR's
    DIR/report/figures/NAME.png|pdf  figures collect drew outside DIR, copied next to the page;
                                  figures already inside DIR (a run's figures/, a reproduce
                                  folder's figures/) are referenced where they are, not copied

Paths read from the folder's JSON files (``run_dir``, figure names) are untrusted: a run
folder outside DIR is not reported, a link is written only for a relative path inside DIR
(:func:`stagewise.report.html.safe_href`), and only PNGs inside DIR, symlinks resolved, are
embedded (:func:`stagewise.report.html.inside_folder`).

A sweep's table comes from :func:`stagewise.orchestrate.collect.collect` (or the
``collect_fn`` given: ``collect_fn(folder)`` returning an object with ``.frame`` (DataFrame:
point, hash, run_dir, status, error, seed, axes, final.*, stage.*, claim.*), ``.figures``
(PNG paths) and ``.warnings``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from ..errors import UserError, read_json_object
from ..report.claims import Claim, read_summary
from ..report.html import FigureEntry, inside_folder
from ..report.pages import Page, SweepPointView, reproduce_html_page, run_page, sweep_page
from ..runs import read_manifest
from ..runs.links import refuse_links
from ..runs.store import atomic_write_json, atomic_write_text
from .overseeds import over_seeds
from .sweep import index as sweep_index
from .sweepplan import point_lines

KINDS = ("run", "sweep", "reproduce")
REPORT = "report.html"
OVER_SEEDS = "over_seeds.json"
"""A sweep's claims over seeds (``Lab.across_runs``), beside its report."""
COPIED_FIGURES = Path("report") / "figures"


@dataclass(frozen=True)
class ReportResult:
    """A written report: the page, the PNGs it embeds (page order), what the folder is, the
    run pages written for it, figures not embedded (unreadable, or outside the folder), and
    collect's warnings."""

    html: Path
    figures: tuple[Path, ...]
    kind: str
    run_reports: tuple[Path, ...] = ()
    missing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def declared_sources(lab: Any = None) -> dict[str, str]:
    """Paper key -> heading as lab ``lab`` declares it (``Lab.sources``); for None or "all"
    (a page over labs), those of every registered lab (the first lab's heading where two
    share a key); {} for a lab not registered here."""
    from ..labs import REGISTRY

    if lab is None or lab == "all":
        out: dict[str, str] = {}
        for value in REGISTRY.values():
            for key, heading in value.sources.items():
                out.setdefault(key, heading)
        return out
    return dict(REGISTRY[lab].sources) if isinstance(lab, str) and lab in REGISTRY else {}


def _run_lab(run_dir: Path) -> Any:
    """The lab a run folder's manifest names (None when unreadable: the page says why)."""
    try:
        return read_manifest(run_dir).get("lab")
    except UserError:
        return None


def folder_kind(folder: str | Path) -> str:
    """"run", "sweep" or "reproduce"; UserError (one line) for anything else."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: not a directory; give a run, sweep or reproduce folder")
    if (folder / "reproduce.json").is_file():
        return "reproduce"
    if (folder / "sweep.json").is_file():
        return "sweep"
    if (folder / "manifest.json").is_file() and (folder / "config.yaml").is_file():
        return "run"
    raise UserError(f"{folder}: not a run, sweep or reproduce folder (expected manifest.json and config.yaml, "
                    "sweep.json or reproduce.json)")


def write_report(folder: str | Path, *, collect_fn: Callable[[Path], Any] | None = None) -> ReportResult:
    """Write ``folder/report.html`` (and the run pages of a sweep or reproduce folder)."""
    folder = Path(folder)
    kind = folder_kind(folder)
    refuse_links(folder)  # a sweep's or reproduce's run pages read every run folder below it
    if kind == "run":
        return write_run_report(folder)
    if kind == "sweep":
        return _write_sweep(folder, collect_fn)
    return reproduce_page(_reproduce_report(folder), folder)


def _write(path: Path, text: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as err:
        raise UserError(f"{path}: cannot write the report ({type(err).__name__}: {err.strerror or err})") from None


def _href(target: Path, start: Path) -> str:
    """``target`` relative to the folder ``start`` (both resolved), with forward slashes."""
    return Path(os.path.relpath(Path(target).resolve(), Path(start).resolve())).as_posix()


def _inside(folder: Path, path: Path) -> Path | None:
    """``path`` resolved when it lies inside ``folder``, else None."""
    return inside_folder(folder, path)


def _result(page: Page, html: Path, kind: str, **more: Any) -> ReportResult:
    _write(html, page.html)
    return ReportResult(html, page.figures, kind, missing=page.missing, **more)


def write_run_report(run_dir: str | Path, *, preset: str | None = None,
                     back: tuple[Path, str] | None = None) -> ReportResult:
    """``run_dir/report.html``; ``back``: (page, words) of the report that holds this run
    (linked when the run lies inside that page's folder)."""
    from ..labs import metric_aliases

    run_dir = Path(run_dir)
    refuse_links(run_dir)  # the page embeds config.yaml and figures: never an outside file through a link
    link, depth = None, 0
    if back:
        try:  # how many folders the run lies below the page: its back link climbs that many
            depth = len(run_dir.resolve().relative_to(back[0].parent.resolve()).parts)
            link = (_href(back[0], run_dir), back[1])
        except ValueError:
            link = None
    lab = _run_lab(run_dir)
    page = run_page(run_dir, preset=preset, back=link, depth=depth, sources=declared_sources(lab), metric_aliases=metric_aliases(lab))
    return _result(page, run_dir / REPORT, "run")


def _run_reports(folder: Path, run_dirs: dict[str, str | None], back: str) -> tuple[
        dict[str, Path], dict[str, tuple[str, str | None]], list[str]]:
    """Write the page of every run folder (key -> relative run dir, preset) that has a
    manifest; returns key -> page, key -> (status, error), warnings."""
    pages: dict[str, Path] = {}
    states: dict[str, tuple[str, str | None]] = {}
    warnings: list[str] = []
    for key, preset in run_dirs.items():
        run_dir = _inside(folder, folder / key)
        if run_dir is None:
            states[key] = ("outside the folder", None)
            warnings.append(f"{key}: run folder outside {folder}; not reported")
        elif not (run_dir / "manifest.json").is_file():
            states[key] = ("not started", None)
        else:
            try:
                manifest = read_manifest(run_dir)
            except UserError as err:
                states[key] = ("unreadable", err.messages[0])
                warnings.append(err.messages[0])
                continue
            states[key] = (manifest["status"], manifest.get("error"))
            try:
                pages[key] = write_run_report(run_dir, preset=preset, back=(folder / REPORT, back)).html
            except UserError as err:  # a run folder that cannot be written: the page goes on without its link
                warnings.append(err.messages[0])
    return pages, states, warnings


# ---------------------------------------------------------------------------- sweep
def _default_collect(folder: Path) -> Any:
    from .collect import collect

    return collect(folder)


def _figure_entries(folder: Path, pngs: list[Path]) -> list[FigureEntry]:
    """Figures inside ``folder`` as they are; those collect drew outside copied (with their
    PDF) to report/figures. A path inside ``folder`` that resolves outside (a symlink) is
    not copied: the page names it as skipped."""
    out = []
    for png in map(Path, pngs):
        if not png.is_absolute() and not png.exists() and (folder / png).exists():
            png = folder / png
        pdf = png.with_suffix(".pdf")
        written_outside = not Path(os.path.abspath(png)).is_relative_to(os.path.abspath(folder))
        if png.is_file() and written_outside:
            copied = folder / COPIED_FIGURES / png.name
            copied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, copied)
            if pdf.is_file():
                shutil.copyfile(pdf, copied.with_suffix(".pdf"))
            png, pdf = copied, copied.with_suffix(".pdf")
        out.append(FigureEntry(png.stem, png, _href(pdf, folder) if pdf.is_file() else None))
    return out


def _write_sweep(folder: Path, collect_fn: Callable[[Path], Any] | None) -> ReportResult:
    index = sweep_index(folder)  # the one reader of sweep.json, checked against its schema
    points = index["points"]
    pages, states, warnings = _run_reports(folder, {str(p["run_dir"]): None for p in points},
                                           "back to the sweep report")
    links: dict[str, str] = {}
    views = []
    for p in points:
        key = str(p["run_dir"])
        href = _href(pages[key], folder) if key in pages else None
        if href:
            for alias in (key, str(p["hash"]), Path(key).name, str(folder / key), str((folder / key).resolve())):
                links[alias] = href
        views.append(SweepPointView(str(p["label"]), str(p["hash"]), key, *states[key], href,
                                    point_lines(p.get("values") or {})))
    try:
        collected = (collect_fn or _default_collect)(folder)
        frame, pngs, warnings = collected.frame, list(collected.figures), warnings + list(collected.warnings)
    except UserError as err:
        frame, pngs, warnings = pd.DataFrame(), [], warnings + [f"collect: {m}" for m in err.messages]
    declared, made, written, unconcerned = _declarations(folder, [str(p["run_dir"]) for p in points])
    over = over_seeds(run_dir for p in points if (run_dir := _inside(folder, folder / str(p["run_dir"]))) is not None)
    if over:
        atomic_write_json(folder / OVER_SEEDS, {"claims": [c.model_dump(mode="json") for c in over]})
    sources = {**declared_sources(index.get("lab")), **written}
    page = sweep_page(index, views, frame, _figure_entries(folder, pngs), warnings, links, folder, declared,
                      {v.label: made[v.run_dir] for v in views if v.run_dir in made}, sources,
                      {v.label: unconcerned[v.run_dir] for v in views if v.run_dir in unconcerned}, over)
    return _result(page, folder / REPORT, "sweep", run_reports=tuple(pages.values()), warnings=tuple(warnings))


def _declarations(folder: Path, run_dirs: list[str]) -> tuple[dict[str, Claim], dict[str, frozenset[str]], dict[str, str],
                                                             dict[str, dict[str, str]]]:
    """(claim id -> the first Claim with that id in the summaries of the run folders inside
    ``folder``: the declarations the sweep's claims matrix shows; run_dir -> the ids of the
    claims its summary makes, so that a claim a run does not make is shown absent, not "not
    testable"; the summaries' sources, paper key -> heading; run_dir -> {id: reason} of the
    claims its summary says are not applicable), unreadable summaries skipped."""
    out: dict[str, Claim] = {}
    made: dict[str, frozenset[str]] = {}
    unconcerned: dict[str, dict[str, str]] = {}
    sources: dict[str, str] = {}
    for key in dict.fromkeys(run_dirs):
        run_dir = _inside(folder, folder / key)
        if run_dir is None or not (run_dir / "summary.json").is_file():
            continue
        try:
            summary = read_summary(run_dir / "summary.json")
        except UserError:
            continue
        made[key] = frozenset(c.id for c in summary.claims)
        unconcerned[key] = {c.id: c.reason for c in summary.claims if c.verdict == "not applicable"}
        for c in summary.claims:
            out.setdefault(c.id, c)
        for paper, heading in summary.sources.items():
            sources.setdefault(paper, heading)
    return out, made, sources, unconcerned


# ------------------------------------------------------------------------ reproduce
def _reproduce_report(folder: Path) -> dict[str, Any]:
    """``claims.json`` when reproduce finished; else the same dict rebuilt from the plan and
    the run folders (an interrupted reproduce), ``sources`` from their summaries."""
    claims = folder / "claims.json"
    if claims.is_file():
        report = read_json_object(claims, "reproduce report")
        if isinstance(report.get("runs"), list) and "lab" in report:
            return report
    plan = read_json_object(folder / "reproduce.json", "reproduce plan")
    runs, sources = [], {}
    for spec in plan.get("specs", []):
        name = str(spec.get("name", ""))
        run_dir = folder / "runs" / name
        run = {"name": name, "preset": spec.get("preset"), "status": "not started", "error": None, "config_hash": None,
               "seeds": [], "seconds": None, "claims": [], "figures": [], "run_dir": f"runs/{name}"}
        if (run_dir / "manifest.json").is_file():
            manifest = read_manifest(run_dir)
            run.update(status=manifest["status"], error=manifest.get("error"), config_hash=manifest["config_hash"],
                       seeds=manifest["seeds"])
        if (run_dir / "summary.json").is_file():
            summary = read_summary(run_dir / "summary.json")
            run["claims"] = [c.model_dump() for c in summary.claims]
            sources.update({k: v for k, v in summary.sources.items() if k not in sources})
        run["figures"] = [_href(png, folder) for png in sorted((run_dir / "figures").glob("*.png"))]
        runs.append(run)
    return {"lab": plan.get("lab", "?"), "quick": bool(plan.get("quick")), "sources": sources, "runs": runs}


def reproduce_page(report: dict[str, Any], folder: str | Path, sources: Mapping[str, str] | None = None) -> ReportResult:
    """Write a reproduce folder's ``report.html`` from its report dict (``claims.json``) and
    each run's own page (``runs/<name>/report.html``), linked both ways; ``sources``: paper
    key -> heading beside the report's own (default: its labs' declarations)."""
    folder = Path(folder)
    runs = {str(r.get("run_dir") or f"runs/{r['name']}"): r for r in report["runs"]}
    pages, _, warnings = _run_reports(folder, {key: r.get("preset") for key, r in runs.items()},
                                         "back to the reproduce report")
    links = {r["name"]: _href(pages[key], folder) for key, r in runs.items() if key in pages}
    page = reproduce_html_page(report, folder, links, declared_sources(report.get("lab")) if sources is None else sources)
    return _result(page, folder / REPORT, "reproduce", run_reports=tuple(pages.values()), warnings=tuple(warnings))
