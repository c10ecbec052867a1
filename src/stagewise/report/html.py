"""Rendering of a reproduce report: claims.md and a self-contained report.html (figures
embedded as data URIs)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any


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


def reproduce_html(report: dict[str, Any], folder: Path) -> str:
    parts = [f"<!doctype html><meta charset='utf-8'><title>stagewise {report['lab']}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}.yes{color:#167a16}"
             ".no{color:#b00}.untestable{color:#777}img{max-width:100%}</style>",
             f"<h1>stagewise reproduce {html.escape(report['lab'])}{' --quick' if report['quick'] else ''}</h1>"]
    for run in report["runs"]:
        parts.append(f"<h2>{html.escape(run['name'])}</h2><p>preset <code>{html.escape(str(run['preset']))}</code>, seeds "
                     f"{run['seeds']}, status {run['status']}, {run['seconds']} s, config {run['config_hash']}</p>")
        if run["error"]:
            parts.append(f"<p class='no'>{html.escape(run['error'])}</p>")
        parts.append("<table><tr><th>claim</th><th>holds</th><th>evidence</th></tr>")
        for c in run["claims"]:
            cls = _mark(c["holds"])
            parts.append(f"<tr><td><b>{html.escape(c['id'])}</b>: {html.escape(c['statement'])}</td>"
                         f"<td class='{cls}'>{cls}</td><td>{html.escape(c['evidence'])}</td></tr>")
        parts.append("</table>")
        for fig in run["figures"]:
            data = base64.b64encode((folder / fig).read_bytes()).decode()
            parts.append(f"<p><img alt='{html.escape(fig)}' src='data:image/png;base64,{data}'></p>")
    return "\n".join(parts)
