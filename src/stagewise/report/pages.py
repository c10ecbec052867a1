"""The three report pages: one run directory, a sweep folder, a reproduce folder.

Each function returns a :class:`Page` (the HTML text, the PNGs it embeds, the figures it
could not read); writing files is :mod:`stagewise.orchestrate.reporting`'s job. Links
between pages are relative hrefs given by the caller, so a folder can be moved or zipped;
every link is written by :func:`~stagewise.report.html.link` (a path that would leave the
folder or carries a URL scheme is plain text) and every figure embedded by
:func:`~stagewise.report.html.figures` (only files inside the report's folder).

Stage boundaries: any dict inside ``summary.details`` shaped like
:meth:`stagewise.measure.StageReport.as_dict` (``{"order": [...], "stages": {name:
{"per_seed", "mean", "min", "max", "n_reached", "n_seeds", ...}}}``), at any depth, is
rendered as a table named by its dotted path.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pandas as pd

from ..errors import UserError
from ..runs import read_manifest
from .claims import Summary, read_summary
from .html import (
    FigureEntry, details, esc, figures, inside_folder, link, number, page, pre, table, td, verdict,
)

STAGE_KEYS = frozenset({"per_seed", "mean", "min", "max", "n_reached", "n_seeds"})
"""Keys every stage entry of a StageReport-shaped dict has."""

MAX_ROWS = 2000
"""Rows of the sweep's collect table shown on the page (the Parquet table has them all)."""

MAX_DETAILS_CHARS = 200_000
"""Characters of a run's ``summary.details`` JSON shown (collapsed) on its page."""

REPRODUCE_WORDS = ("held", "did not hold", "not testable")
RUN_WORDS = ("yes", "no", "not testable")


@dataclass(frozen=True)
class Page:
    """A rendered page: its title, the document, the PNGs embedded (in page order) and the
    names of figures not embedded: unreadable ('missing figure NAME') or outside the
    report's folder ('figure NAME skipped')."""

    title: str
    html: str
    figures: tuple[Path, ...]
    missing: tuple[str, ...]


# ------------------------------------------------------------------------------ run
def run_title(manifest: dict[str, Any], preset: str | None) -> str:
    """``stagewise ntp run, preset example1: done``."""
    return f"stagewise {manifest['lab']} run{f', preset {preset}' if preset else ''}: {manifest['status']}"


def _manifest_rows(manifest: dict[str, Any]) -> list[list[str]]:
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
    return [[td(k), td(v, "error" if k == "error" and v else "")] for k, v in fields if k != "resumed" or v]


def claims_table(claims: Sequence[Any], words: tuple[str, str, str] = RUN_WORDS) -> str:
    """Claims (Claim models or dicts): id, statement, verdict coloured, evidence; counts on top."""
    rows, tally = [], Counter()
    for c in claims:
        c = c if isinstance(c, dict) else c.model_dump()
        v = verdict(c["holds"], words)
        tally[v.text] += 1
        rows.append([td(c["id"]), td(c["statement"]), f"<td class='{v.css}'>{esc(v.text)}</td>", td(c["evidence"])])
    counts = "".join(f"<span>{esc(w)}: {tally[w]}</span>" for w in words)
    return f"<p class='counts'>{len(rows)} claims. {counts}</p>" + table(["claim", "statement", "holds", "evidence"], rows)


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


def stage_table(report: dict[str, Any]) -> str:
    """Stages in their order: seeds reaching it, mean/min/max crossing step, per-seed steps;
    the report's other scalar fields below."""
    stages = report["stages"]
    names = [s for s in report["order"] if s in stages] + [s for s in stages if s not in report["order"]]
    rows = []
    for name in names:
        s = stages[name]
        per_seed = ", ".join(f"{seed}: {number(step)}" for seed, step in s["per_seed"].items())
        rows.append([td(name), td(f"{s['n_reached']}/{s['n_seeds']}"), td(s["mean"]), td(s["min"]), td(s["max"]),
                     td(per_seed)])
    extra = [f"{esc(k)}: {esc(number(v))}" for k, v in report.items()
             if k not in ("order", "stages") and not isinstance(v, (dict, list))]
    return (table(["stage", "seeds reaching", "mean step", "min", "max", "per seed (seed: step)"], rows)
            + (f"<p>{'; '.join(extra)}</p>" if extra else ""))


def final_table(summary: Summary) -> str:
    rows = [[td(name), td(s.mean), td(s.min), td(s.max)] for name, s in summary.final.items()]
    return table(["metric", "mean", "min", "max"], rows)


def run_figures(run_dir: Path) -> list[FigureEntry]:
    """Every ``figures/NAME.png`` of a run (PDF linked when present), by name."""
    out = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        pdf = png.with_suffix(".pdf")
        out.append(FigureEntry(png.stem, png, f"figures/{pdf.name}" if pdf.is_file() else None))
    return out


def run_page(run_dir: str | Path, *, preset: str | None = None, back: tuple[str, str] | None = None,
             depth: int = 0) -> Page:
    """The report of one run directory. ``back``: (href, text) of a link to the page that
    holds this run (a sweep or reproduce report), ``depth`` folders above the run (the
    link may climb that many, no more: :func:`~stagewise.report.html.safe_href`). UserError
    when the manifest is unreadable."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    preset = preset or manifest.get("preset")
    title = run_title(manifest, preset)
    parts = [f"<h1>{esc(title)}</h1>"]
    if back:
        parts.append(f"<p>{link(*back, up=depth)}</p>")
    parts.append(f"<p>run folder <code>{esc(run_dir.name)}</code>, config <code>{esc(manifest['config_hash'])}</code>, "
                 f"seeds {esc(', '.join(map(str, manifest['seeds'])))}, git <code>{esc(manifest.get('git_sha'))}</code></p>")
    if manifest.get("error"):
        parts.append(f"<p class='error'>{esc(manifest['status'])}: {esc(manifest['error'])}</p>")
    summary, note = None, "no summary.json (the run did not finish)"
    if (run_dir / "summary.json").is_file():
        try:
            summary = read_summary(run_dir / "summary.json")
        except UserError as err:
            note = err.messages[0]
    if summary is None:
        parts.append(f"<p class='missing'>{esc(note)}</p>")
    else:
        parts += ["<h2>Claims</h2>", claims_table(summary.claims)]
        found = list(stage_reports(summary.details))
        if found:
            parts.append("<h2>Stage boundaries</h2>")
            for where, report in found:
                parts += [f"<h3>{esc(where)}</h3>", stage_table(report)]
        parts += ["<h2>Final metrics</h2>", final_table(summary)]
    block = figures(run_figures(run_dir), run_dir)
    parts += ["<h2>Figures</h2>", block.html or "<p>no figures</p>"]
    try:
        config_text = (run_dir / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        config_text = f"config.yaml unreadable: {type(err).__name__}"
    parts += ["<h2>Manifest</h2>", table(["field", "value"], _manifest_rows(manifest)),
              "<h2>Config</h2>", details("config.yaml (resolved)", pre(config_text))]
    if summary is not None and summary.details:
        parts.append("<h2>Lab details</h2>")
        text = json.dumps(summary.details, indent=1, default=str)
        cut = f"\n... ({len(text) - MAX_DETAILS_CHARS} more characters in summary.json)" if len(text) > MAX_DETAILS_CHARS else ""
        parts.append(details("summary.json details (JSON)", pre(text[:MAX_DETAILS_CHARS] + cut)))
    return Page(title, page(title, parts), block.embedded, block.missing)


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


def _holds(value: Any) -> bool | None:
    """A collect-table claim cell as True / False / None."""
    if value is None or isinstance(value, str) and not value or value is pd.NA:
        return None
    if isinstance(value, str):
        return {"true": True, "held": True, "yes": True, "false": False, "not": False, "no": False}.get(value.lower())
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return None
    return bool(value)


def claims_matrix(frame: pd.DataFrame, links: dict[str, str]) -> str:
    """Points x claims: the fraction of testable seeds where the claim holds (k/n)."""
    claim_cols = [c for c in frame.columns if str(c).startswith("claim.")]
    if not claim_cols or "point" not in frame.columns:
        return "<p>no claims collected</p>"
    rows, css = [], []
    for point, group in frame.groupby("point", sort=False):
        row = [f"<td>{_point_cell(point, group.iloc[0], links)}</td>"]
        for col in claim_cols:
            held = [_holds(v) for v in group[col]]
            n_true, n_test = sum(h is True for h in held), sum(h is not None for h in held)
            if not n_test:
                row.append("<td class='untestable'>not testable</td>")
                continue
            cls = "held" if n_true == n_test else "notheld" if n_true == 0 else "partial"
            row.append(f"<td class='{cls} num'>{esc(number(n_true / n_test))} ({n_true}/{n_test})</td>")
        rows.append(row)
        css.append("failed" if "status" in group and (group["status"] != "done").any() else "")
    return table(["point"] + [c[len("claim."):] for c in claim_cols], rows, css)


def _point_cell(point: Any, row: pd.Series, links: dict[str, str]) -> str:
    href = links.get(str(row.get("run_dir"))) or links.get(str(row.get("hash")))
    return link(href, point)


def collect_table(frame: pd.DataFrame, links: dict[str, str]) -> str:
    """The collect table (one row per run and seed), failed rows red, points linked."""
    cols = [c for c in frame.columns if c != "run_dir"]
    rows, css = [], []
    for _, r in frame.head(MAX_ROWS).iterrows():
        failed = "status" in r and r["status"] != "done"
        cells = []
        for c in cols:
            value = r[c]
            if c == "point":
                cells.append(f"<td>{_point_cell(value, r, links)}</td>")
            elif str(c).startswith("claim."):
                v = verdict(_holds(value), RUN_WORDS)
                cells.append(f"<td class='{v.css}'>{esc(v.text)}</td>")
            else:
                cells.append(td(value, "error" if c in ("error", "status") and failed else ""))
        rows.append(cells)
        css.append("failed" if failed else "")
    more = f"<p>first {MAX_ROWS} of {len(frame)} rows shown</p>" if len(frame) > MAX_ROWS else ""
    return table([str(c) for c in cols], rows, css) + more


def sweep_page(index: dict[str, Any], points: Sequence[SweepPointView], frame: pd.DataFrame,
               figure_entries: Sequence[FigureEntry], warnings: Sequence[str], links: dict[str, str],
               folder: str | Path) -> Page:
    """The report of a sweep ``folder``: counts, failures, claims matrix, collect table,
    figures (only those inside ``folder`` are embedded). ``links`` maps a run's ``run_dir``
    or hash (as in the frame) to its report href (relative to ``folder``)."""
    title = f"stagewise sweep {index.get('lab', '?')}: {len(points)} points"
    tally = Counter(p.status for p in points)
    parts = [f"<h1>{esc(title)}</h1>",
             "<p class='counts'>" + "".join(f"<span>{esc(s)}: {n}</span>" for s, n in sorted(tally.items())) + "</p>"]
    if index.get("axes"):
        parts.append(f"<p>axes: {esc(', '.join(map(str, index['axes'])))}</p>")
    if warnings:
        parts.append("<ul>" + "".join(f"<li class='error'>{esc(w)}</li>" for w in warnings) + "</ul>")
    bad = [p for p in points if p.status != "done"]
    if bad:
        rows = [[f"<td>{link(p.href, p.label)}</td>", td(p.status, "error"),
                 td(p.error, "error"), td(p.run_dir)] for p in bad]
        parts += ["<h2>Points not done</h2>", table(["point", "status", "error", "run folder"], rows, ["failed"] * len(rows))]
    parts += ["<h2>Runs</h2>", table(["point", "status", "run report"], [
        [td(p.label), td(p.status, "" if p.status == "done" else "error"),
         f"<td>{link(p.href, p.run_dir)}</td>"] for p in points],
        ["" if p.status == "done" else "failed" for p in points])]
    parts += ["<h2>Claims (fraction of seeds holding)</h2>", claims_matrix(frame, links)]
    parts += ["<h2>Collected results</h2>", collect_table(frame, links) if len(frame) else "<p>no rows collected</p>"]
    block = figures(figure_entries, folder)
    parts += ["<h2>Figures</h2>", block.html or "<p>no figures</p>"]
    return Page(title, page(title, parts), block.embedded, block.missing)


# ------------------------------------------------------------------------ reproduce
def anchor(name: str) -> str:
    """An element id for a run's section."""
    return "run-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def reproduce_title(report: dict[str, Any]) -> str:
    return f"stagewise reproduce {report['lab']}{' --quick' if report.get('quick') else ''}"


def _all_claims(report: dict[str, Any], links: dict[str, str]) -> str:
    rows, css, tally = [], [], Counter()
    for run in report["runs"]:
        name = f"<td>{link('#' + anchor(run['name']), run['name'])}</td>"
        if not run["claims"]:
            rows.append([name, td(None), td(f"no claims: run {run['status']}"), "<td class='notheld'>-</td>",
                         td(run.get("error"))])
            css.append("failed")
        for c in run["claims"]:
            v = verdict(c["holds"], REPRODUCE_WORDS)
            tally[v.text] += 1
            rows.append([name, td(c["id"]), td(c["statement"]), f"<td class='{v.css}'>{esc(v.text)}</td>", td(c["evidence"])])
            css.append("")
    statuses = Counter(run["status"] for run in report["runs"])
    head = (f"<p class='counts'>{sum(tally.values())} claims over {len(report['runs'])} runs: "
            + "".join(f"<span>{esc(w)}: {tally[w]}</span>" for w in REPRODUCE_WORDS) + " runs: "
            + "".join(f"<span>{esc(s)}: {n}</span>" for s, n in sorted(statuses.items())) + "</p>")
    return head + table(["run", "claim", "statement", "verdict", "evidence"], rows, css)


def reproduce_html_page(report: dict[str, Any], folder: Path, links: dict[str, str] | None = None) -> Page:
    """The reproduce report: every claim of every run in one table first, then one section
    per run (status, error, claims, figures, link to the run's own report).

    report: the ``claims.json`` dict of :func:`stagewise.orchestrate.reproduction.reproduce`
    (``lab``, ``quick``, ``runs``: [{name, preset, status, error, config_hash, seeds, seconds,
    claims, figures (paths relative to ``folder``)}]). links: run name -> report href.
    A figure is embedded only when it lies inside ``folder`` (symlinks resolved); a figure
    name that climbs out (``../x.png``), is absolute or is a symlink out is named as skipped."""
    links = links or {}
    title = reproduce_title(report)
    parts = [f"<h1>{esc(title)}</h1>", "<h2>Every claim</h2>", _all_claims(report, links)]
    embedded, missing = [], []
    for run in report["runs"]:
        parts.append(f"<h2 id='{anchor(run['name'])}'>{esc(run['name'])}</h2>")
        own = f" · {link(links[run['name']], 'run report')}" if links.get(run["name"]) else ""
        parts.append(f"<p>preset <code>{esc(number(run.get('preset')))}</code>, seeds {esc(run.get('seeds'))}, status "
                     f"{esc(run['status'])}, {esc(number(run.get('seconds')))} s, config "
                     f"<code>{esc(run.get('config_hash'))}</code>{own}</p>")
        if run.get("error"):
            parts.append(f"<p class='error'>{esc(run['error'])}</p>")
        if run["claims"]:
            parts.append(claims_table(run["claims"], REPRODUCE_WORDS))
        entries = []
        for fig in map(str, run.get("figures") or []):
            pdf = Path(fig).with_suffix(".pdf") if Path(fig).name else None  # "" or ".": no file name
            has_pdf = pdf is not None and (folder / pdf).is_file() and inside_folder(folder, folder / pdf) is not None
            entries.append(FigureEntry(Path(fig).stem or fig, folder / fig, pdf.as_posix() if has_pdf else None))
        block = figures(entries, folder)
        embedded += block.embedded
        missing += block.missing
        parts.append(block.html)
    return Page(title, page(title, parts), tuple(embedded), tuple(missing))


__all__ = ["Page", "SweepPointView", "run_page", "sweep_page", "reproduce_html_page", "stage_reports", "is_stage_report",
           "claims_table"]
