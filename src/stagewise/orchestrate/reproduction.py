"""`stagewise reproduce LAB`: run a lab's reproduction set and write one report folder.

Folder layout::

    reproduce.json          the plan: lab, quick, the RunSpecs (written first)
    runs/<name>/            full run directories (metrics, summary, checkpoints, figures)
    figures/<name>-<fig>.png|pdf
    claims.json  claims.md  report.html (self-contained: figures embedded)

Every run goes through :func:`~stagewise.orchestrate.runner.execute_spec`, so a killed
reproduce rerun with the same ``--out`` continues where it stopped: finished runs are
kept, unfinished ones resumed from their checkpoints, and the report is written at the end.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from ..config import config_hash
from ..errors import UserError
from ..labs import Lab, RunSpec
from ..report.claims import read_summary
from ..report.html import reproduce_html, reproduce_markdown
from ..runs import read_manifest
from ..runs.store import atomic_write_json, atomic_write_text
from .runner import writable_dir, check_size, execute_spec

PLAN = "reproduce.json"


def _plan(lab: Lab, quick: bool) -> dict[str, Any]:
    return {"lab": lab.name, "quick": quick, "specs": [json.loads(s.to_json()) for s in lab.reproduce.specs(quick)]}


def _open_folder(folder: Path, plan: dict[str, Any]) -> None:
    """A new folder, or one this same plan started (then it continues)."""
    if folder.is_dir() and any(folder.iterdir()):
        path = folder / PLAN
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            raise UserError(f"--out {folder}: folder exists, is not empty and is not a reproduce folder; choose another") from None
        if old != plan:
            raise UserError(f"--out {folder}: holds a reproduce of another plan (lab {old.get('lab')}, quick "
                            f"{old.get('quick')}); choose another folder")
        return
    writable_dir(folder, "--out")
    atomic_write_json(folder / PLAN, plan)


def reproduce(lab: Lab, folder: str | Path, *, quick: bool = False, progress: bool = False,
              allow_large: bool = False) -> dict[str, Any]:
    """Run every spec of ``lab.reproduce`` (quick: the quick set) into ``folder``; returns
    the report also written to ``claims.json``."""
    folder = Path(folder)
    specs = lab.reproduce.specs(quick)
    configs = [spec.config() for spec in specs]
    for spec, config in zip(specs, configs):  # validate every input before any work
        check_size(lab, config, folder, allow_large)
        lab.check(config)
    _open_folder(folder, _plan(lab, quick))
    runs = [_run_one(lab, spec, config, folder, progress, allow_large) for spec, config in zip(specs, configs)]
    report = {"lab": lab.name, "quick": quick, "runs": runs}
    atomic_write_json(folder / "claims.json", report)
    atomic_write_text(folder / "claims.md", reproduce_markdown(report))
    atomic_write_text(folder / "report.html", reproduce_html(report, folder))
    return report


def _run_one(lab: Lab, spec: RunSpec, config: Any, folder: Path, progress: bool, allow_large: bool) -> dict[str, Any]:
    start = time.perf_counter()
    run_dir = folder / "runs" / spec.name
    manifest = execute_spec(spec, run_dir, progress=progress, allow_large=allow_large, lab=lab)
    summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").exists() else None
    figures = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        for ext in ("png", "pdf"):
            src = png.with_suffix(f".{ext}")
            dst = folder / "figures" / f"{spec.name}-{png.stem}.{ext}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        figures.append(f"figures/{spec.name}-{png.stem}.png")
    manifest = read_manifest(run_dir) if manifest is None else manifest
    return {"name": spec.name, "preset": spec.preset, "status": manifest["status"], "error": manifest.get("error"),
            "config_hash": config_hash(config), "seeds": manifest["seeds"],
            "seconds": round(time.perf_counter() - start, 2),
            "claims": [c.model_dump() for c in summary.claims] if summary else [], "figures": figures,
            "run_dir": f"runs/{spec.name}"}
