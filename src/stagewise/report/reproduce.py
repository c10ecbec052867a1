"""`stagewise reproduce LAB`: run a lab's reproduction set and write one report folder.

Folder layout::

    runs/<name>/            full run directories (metrics, summary, checkpoints, figures)
    figures/<name>-<fig>.png|pdf
    claims.json  claims.md  report.html (self-contained: figures embedded)
"""

from __future__ import annotations

import base64
import html
import json
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..config import config_hash, deep_merge, resolve
from ..errors import UserError
from ..runs import execute, prepare, read_manifest
from ..runs.store import atomic_write_json, atomic_write_text


def reproduce(lab: ModuleType, folder: str | Path, *, quick: bool = False, progress: bool = False) -> dict[str, Any]:
    """Run every entry of ``lab.REPRODUCE`` (quick: the quick subset) into ``folder``.

    Returns the report dict also written to ``claims.json``.
    """
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"--out {folder}: folder exists and is not empty; choose another")
    folder.mkdir(parents=True, exist_ok=True)
    plan = []
    for name, preset, extra, quick_extra in lab.REPRODUCE:
        if quick and quick_extra is None:
            continue
        overrides = deep_merge(lab.PRESETS[preset][1], extra)
        if quick:
            overrides = deep_merge(overrides, quick_extra)
        plan.append((name, preset, resolve(lab.Config, overrides)))
    for _, _, config in plan:  # validate all inputs before any work
        if hasattr(lab, "check"):
            lab.check(config)
    runs = []
    for name, preset, config in plan:
        start = time.perf_counter()
        paths = prepare(lab, config, folder / "runs" / name)
        try:
            manifest = execute(lab, config, paths, progress=progress)
        except KeyboardInterrupt:
            raise
        except Exception:  # recorded in the run's manifest; the report says so and goes on
            manifest = read_manifest(paths.root)
        summary = json.loads(paths.summary.read_text()) if paths.summary.exists() else {}
        figures = []
        for png in sorted(paths.figures.glob("*.png")):
            for ext in ("png", "pdf"):
                src = png.with_suffix(f".{ext}")
                dst = folder / "figures" / f"{name}-{png.stem}.{ext}"
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
            figures.append(f"figures/{name}-{png.stem}.png")
        runs.append({"name": name, "preset": preset, "status": manifest["status"], "error": manifest.get("error"),
                     "config_hash": config_hash(config),
                     "seeds": manifest["seeds"], "seconds": round(time.perf_counter() - start, 2),
                     "claims": summary.get("claims", []), "figures": figures, "run_dir": f"runs/{name}"})
    report = {"lab": lab.NAME, "quick": quick, "runs": runs}
    atomic_write_json(folder / "claims.json", report)
    atomic_write_text(folder / "claims.md", _markdown(report))
    atomic_write_text(folder / "report.html", _html(report, folder))
    return report


def _markdown(report: dict[str, Any]) -> str:
    lines = [f"# stagewise reproduce {report['lab']}{' --quick' if report['quick'] else ''}", ""]
    for run in report["runs"]:
        lines += [f"## {run['name']} (preset {run['preset']}, seeds {run['seeds']}, {run['status']}, {run['seconds']} s)", ""]
        if run["error"]:
            lines += [f"**{run['status']}**: {run['error']}", ""]
        lines += [
                  "| claim | holds | evidence |", "|---|---|---|"]
        for c in run["claims"]:
            lines.append(f"| {c['id']}: {c['statement']} | {'yes' if c['holds'] else 'no'} | {c['evidence']} |")
        lines += [""] + [f"![{Path(f).stem}]({f})" for f in run["figures"]] + [""]
    return "\n".join(lines)


def _html(report: dict[str, Any], folder: Path) -> str:
    parts = [f"<!doctype html><meta charset='utf-8'><title>stagewise {report['lab']}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}.yes{color:#167a16}"
             ".no{color:#b00}img{max-width:100%}</style>",
             f"<h1>stagewise reproduce {html.escape(report['lab'])}{' --quick' if report['quick'] else ''}</h1>"]
    for run in report["runs"]:
        parts.append(f"<h2>{html.escape(run['name'])}</h2><p>preset <code>{html.escape(run['preset'])}</code>, seeds "
                     f"{run['seeds']}, status {run['status']}, {run['seconds']} s, config {run['config_hash']}</p>")
        if run["error"]:
            parts.append(f"<p class='no'>{html.escape(run['error'])}</p>")
        parts.append("<table><tr><th>claim</th><th>holds</th><th>evidence</th></tr>")
        for c in run["claims"]:
            cls = "yes" if c["holds"] else "no"
            parts.append(f"<tr><td><b>{html.escape(c['id'])}</b>: {html.escape(c['statement'])}</td>"
                         f"<td class='{cls}'>{cls}</td><td>{html.escape(c['evidence'])}</td></tr>")
        parts.append("</table>")
        for fig in run["figures"]:
            data = base64.b64encode((folder / fig).read_bytes()).decode()
            parts.append(f"<p><img alt='{html.escape(fig)}' src='data:image/png;base64,{data}'></p>")
    return "\n".join(parts)
