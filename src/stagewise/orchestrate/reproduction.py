"""`stagewise reproduce LAB`: run a lab's reproduction set and write one report folder.

Folder layout::

    reproduce.json          the plan: lab, quick, the RunSpecs (written first)
    runs/<name>/            full run directories (metrics, summary, checkpoints, figures)
    figures/<name>-<fig>.png|pdf
    claims.json  claims.md  report.html (self-contained: figures embedded)

The runs go through the sweep machinery (:func:`~stagewise.orchestrate.sweep.run_runs`:
an executor, one lock per run, :func:`~stagewise.orchestrate.runner.execute_spec` per run),
so they run in parallel and a killed reproduce rerun with the same ``--out`` continues
where it stopped: finished runs are kept, unfinished ones resumed from their checkpoints,
and the report is written at the end. A lab value that is not the registry's (a test's
modified lab) cannot be shipped to worker processes and runs here, one run after another.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from ..config import config_hash
from ..errors import UserError
from ..labs import Lab, RunSpec, get_lab, spec_config
from ..report.claims import read_summary
from ..report.html import reproduce_markdown
from ..runs import read_manifest
from ..runs.store import atomic_write_json, atomic_write_text
from .executors import ExecutorOptions
from .overseeds import over_seeds
from .reporting import reproduce_page
from .runner import check_size, execute_spec, writable_dir
from .sweep import PointResult, preflight, run_runs
from .sweepplan import SweepPoint, SweepRun

PLAN = "reproduce.json"


def _plan(lab: Lab, quick: bool) -> dict[str, Any]:
    return {"lab": lab.name, "quick": quick, "specs": [json.loads(s.to_json()) for s in lab.reproduce.specs(quick)]}


def _check_all(lab: Lab, specs: tuple[RunSpec, ...], folder: Path, allow_large: bool) -> list[Any]:
    """The specs' configs, each size-checked and checked by the lab: one UserError before any
    work with every problem found (a missing data folder and a missing model package are said
    together, not one per invocation), each said once."""
    configs = [spec_config(spec) for spec in specs]
    problems: list[str] = []
    for config in configs:
        for check, args in ((check_size, (lab, config, folder, allow_large)), (lab.check, (config,))):
            try:
                check(*args)
            except UserError as err:
                problems += [m for m in err.messages if m not in problems]
    if problems:
        raise UserError(*problems)
    return configs


def _write_report(report: dict[str, Any], folder: Path) -> None:
    """``claims.json``, ``claims.md`` and ``report.html`` (with each run's own page)."""
    atomic_write_json(folder / "claims.json", report)
    atomic_write_text(folder / "claims.md", reproduce_markdown(report))
    reproduce_page(report, folder)


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
              allow_large: bool = False, opts: ExecutorOptions | None = None,
              on_result: Callable[[PointResult], None] | None = None) -> dict[str, Any]:
    """Run every spec of ``lab.reproduce`` (quick: the quick set) into ``folder`` with the
    executor ``opts`` (default: local, a worker per core); returns the report also written
    to ``claims.json``."""
    folder = Path(folder)
    specs = lab.reproduce.specs(quick)
    configs = _check_all(lab, specs, folder, allow_large)  # every input validated before any work
    opts = (opts or ExecutorOptions()).model_copy(update={"allow_large": allow_large})
    runs = [SweepRun(spec.name, spec, (SweepPoint({}, spec, config_hash(config), config),), (tuple(config.seed_list()),))
            for spec, config in zip(specs, configs)]
    preflight(runs, folder, opts)  # packages and the folder: nothing is made before every check passed
    _open_folder(folder, _plan(lab, quick))
    registered = get_lab(lab.name)
    seconds: dict[str, float | None] = {spec.name: None for spec in specs}
    if lab.run is registered.run and lab.Config is registered.Config:
        run_runs(runs, folder, opts, on_result)
    else:
        for spec in specs:
            start = time.perf_counter()
            execute_spec(spec, folder / "runs" / spec.name, progress=progress, allow_large=allow_large, lab=lab,
                         sinks=opts.sinks)
            seconds[spec.name] = round(time.perf_counter() - start, 2)
    runs_out = [_run_one(spec, config, folder, seconds[spec.name]) for spec, config in zip(specs, configs)]
    report = {"lab": lab.name, "quick": quick, "runs": runs_out, "sources": dict(lab.sources)}
    over = over_seeds(folder / "runs" / spec.name for spec in specs)
    if over:
        report["over_seeds"] = [c.model_dump(mode="json") for c in over]
    _write_report(report, folder)
    return report


def _seconds(manifest: dict[str, Any]) -> float | None:
    """Wall seconds of the run's last start (its manifest's started/resumed .. ended)."""
    from datetime import datetime

    try:
        start = manifest.get("resumed") or manifest["started"]
        return round((datetime.fromisoformat(manifest["ended"]) - datetime.fromisoformat(start)).total_seconds(), 2)
    except (KeyError, TypeError, ValueError):
        return None


def _run_one(spec: RunSpec, config: Any, folder: Path, seconds: float | None) -> dict[str, Any]:
    run_dir = folder / "runs" / spec.name
    summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").exists() else None
    figures = []
    for png in sorted((run_dir / "figures").glob("*.png")):
        for ext in ("png", "pdf"):
            src = png.with_suffix(f".{ext}")
            dst = folder / "figures" / f"{spec.name}-{png.stem}.{ext}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        figures.append(f"figures/{spec.name}-{png.stem}.png")
    manifest = read_manifest(run_dir) if (run_dir / "manifest.json").is_file() else \
        {"status": "missing", "error": "the run never started", "seeds": config.seed_list()}
    return {"name": spec.name, "preset": spec.preset, "status": manifest["status"], "error": manifest.get("error"),
            "config_hash": config_hash(config), "seeds": manifest["seeds"],
            "seconds": seconds if seconds is not None else _seconds(manifest),
            "claims": [c.model_dump() for c in summary.claims] if summary else [], "figures": figures,
            "run_dir": f"runs/{spec.name}"}


def reproduce_all(labs: list[Lab], folder: str | Path, *, quick: bool = False, allow_large: bool = False,
                  opts: ExecutorOptions | None = None,
                  on_result: Callable[[PointResult], None] | None = None) -> dict[str, Any]:
    """Every lab's reproduction into ``folder/LAB`` (each a reproduce folder), then one
    report at ``folder``: the first table lists every claim of every lab."""
    folder = Path(folder)
    plan = {"lab": "all", "quick": quick, "labs": [lab.name for lab in labs]}
    problems: list[str] = []
    for lab in labs:  # every lab's inputs are validated before any work; every problem is said at once
        try:
            _check_all(lab, lab.reproduce.specs(quick), folder, allow_large)
        except UserError as err:
            problems += [f"{lab.name}: {m}" for m in err.messages]
    try:
        preflight([], folder, opts or ExecutorOptions())
    except UserError as err:
        problems += [m for m in err.messages if m not in problems]
    if problems:
        raise UserError(*problems)
    _open_folder(folder, plan)
    runs: list[dict[str, Any]] = []
    sources: dict[str, Any] = {}
    for lab in labs:
        for key, source in lab.sources.items():
            sources.setdefault(key, source)
        part = reproduce(lab, folder / lab.name, quick=quick, allow_large=allow_large, opts=opts, on_result=on_result)
        for run in part["runs"]:
            runs.append({**run, "name": f"{lab.name}/{run['name']}", "run_dir": f"{lab.name}/{run['run_dir']}",
                         "figures": [f"{lab.name}/{f}" for f in run["figures"]]})
    report = {"lab": "all", "quick": quick, "runs": runs, "sources": sources}
    _write_report(report, folder)
    return report
