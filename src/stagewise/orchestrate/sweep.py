"""Run a sweep's points with the local executor: one code path, `execute_spec` per point.

Layout of a sweep folder::

    OUT/sweep.json            the points (label, axis values, config hash, run folder), rewritten at each start
    OUT/runs/HASH/            one run directory per point, named by its config hash
    OUT/locks/HASH/.lock      held while a process works on that point (flock: dies with the process)

Re-running the same sweep skips points whose manifest says done, resumes unfinished ones
(`execute_spec`), and never runs a point twice at once: a point whose lock is held by
another sweep process is reported ``held`` and left to it. A point that fails records its
error in its own run folder and the sweep goes on.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..labs import RunSpec
from ..runs import RunLock, atomic_write_json, read_manifest
from .runner import execute_spec, writable_dir
from .sweepplan import SweepPoint

STATUSES = ("done", "skipped", "failed", "held")  # ran now / was done before / failed or diverged / another process has it


@dataclass(frozen=True)
class PointResult:
    """What happened to one point in this sweep process."""

    label: str
    hash: str
    status: str
    run_dir: str
    error: str | None = None


def _run_point(spec_json: str, root: str, point_hash: str) -> tuple[str, str | None]:
    """(status, error) of one point; runs in a worker process (or inline)."""
    spec = RunSpec.from_json(spec_json)
    run_dir = Path(root) / "runs" / point_hash
    lock_dir = Path(root) / "locks" / point_hash
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(lock_dir)
    try:
        lock.acquire()
    except UserError:
        return "held", None
    try:
        if (run_dir / "manifest.json").is_file() and read_manifest(run_dir).get("status") == "done":
            return "skipped", None
        manifest = execute_spec(spec, run_dir)
        if manifest.get("status") == "done":
            return "done", None
        return "failed", f"{manifest.get('status')}: {manifest.get('error')}"
    except UserError as err:
        return "failed", "; ".join(err.messages)
    finally:
        lock.release()


def write_index(points: list[SweepPoint], out: Path, lab: str) -> None:
    """``OUT/sweep.json``: the lab and every point (label, values, hash, run folder)."""
    atomic_write_json(out / "sweep.json", {
        "lab": lab,
        "points": [{"label": p.label, "values": p.values, "hash": p.hash, "run_dir": f"runs/{p.hash}"} for p in points],
    })


def run_local(points: list[SweepPoint], out: str | Path, lab: str, *, max_parallel: int | None = None,
              on_result: Callable[[PointResult], None] | None = None) -> list[PointResult]:
    """Run every point into ``out`` (the layout above) with up to ``max_parallel`` worker
    processes (default: the cores; 1 runs in this process). Results come back in point
    order; ``on_result`` is called as each point ends (a progress bar)."""
    out = Path(out)
    writable_dir(out, "--out")
    if max_parallel is not None and max_parallel < 1:
        raise UserError(f"--max-parallel {max_parallel}: must be >= 1")
    unique = {p.hash: p for p in points}
    if len(unique) < len(points):
        raise UserError(f"sweep: {len(points) - len(unique)} points repeat another point's config (same hash); "
                        "remove the repeated axis values")
    (out / "runs").mkdir(parents=True, exist_ok=True)
    write_index(points, out, lab)
    workers = max_parallel or os.cpu_count() or 1
    results: dict[str, PointResult] = {}

    def record(point: SweepPoint, status: str, error: str | None) -> None:
        result = PointResult(point.label, point.hash, status, f"runs/{point.hash}", error)
        results[point.hash] = result
        if on_result:
            on_result(result)

    if workers == 1 or len(points) == 1:
        for p in points:
            record(p, *_run_point(p.spec.to_json(), str(out), p.hash))
    else:
        context = multiprocessing.get_context("spawn")  # no forked torch state in the workers
        with ProcessPoolExecutor(max_workers=min(workers, len(points)), mp_context=context) as pool:
            futures = {pool.submit(_run_point, p.spec.to_json(), str(out), p.hash): p for p in points}
            for future in as_completed(futures):
                point = futures[future]
                try:
                    record(point, *future.result())
                except Exception as err:  # a worker that died (killed, out of memory)
                    record(point, "failed", f"worker died: {type(err).__name__}: {err}")
    return [results[p.hash] for p in points]


def counts(results: list[PointResult]) -> dict[str, int]:
    """How many points ended in each status."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def summary_lines(results: list[PointResult], out: Path) -> list[str]:
    """The end-of-sweep lines: the counts, then one line per failed point with its folder."""
    c = counts(results)
    lines = [", ".join(f"{c[s]} {s}" for s in STATUSES) + f" ({len(results)} points, {out})"]
    lines += [f"failed {r.label}: {r.error} ({out / r.run_dir})" for r in results if r.status == "failed"]
    return lines


def index(out: str | Path) -> dict[str, Any]:
    """The sweep folder's ``sweep.json``; one-line UserError when it is not a sweep folder."""
    path = Path(out) / "sweep.json"
    if not path.is_file():
        raise UserError(f"{out}: not a sweep folder (no sweep.json)")
    return json.loads(path.read_text())
