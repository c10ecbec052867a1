"""Run a sweep: its runs go to an executor (local pool, Ray, SLURM), one code path per run.

Layout of a sweep folder::

    OUT/sweep.json            lab, axes, fold, report spec and every point (label, axis values,
                              hash, run folder, the seeds of that run that are the point's)
    OUT/runs/KEY/             one run directory per run (KEY: the run's config hash)
    OUT/locks/KEY/.lock       held while a process works on that run (flock: dies with the process)
    OUT/slurm/                submitit's job files and logs (executor slurm)

Re-running the same sweep skips runs whose manifest says done, resumes unfinished ones
(:func:`~stagewise.orchestrate.runner.execute_spec`), and never runs a run twice at once: a
run whose lock another sweep process holds is waited for (``executor.wait_held``) and then
skipped or resumed, so two sweep processes started on one folder both end with every run
done exactly once. A run that fails records its error in its own folder and the sweep goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..runs import atomic_write_json
from .executors import RUNNERS, ExecutorOptions, Task, check_available
from .runner import writable_dir
from .sweepplan import SweepPoint, SweepRun, fold_points

STATUSES = ("done", "skipped", "failed", "held", "interrupted")
# ran now / was done before / failed or diverged / another process has it / stopped (resumable)


@dataclass(frozen=True)
class PointResult:
    """What happened to one point's run in this sweep process."""

    label: str
    hash: str
    status: str
    run_dir: str
    error: str | None = None


def index_entry(run: SweepRun) -> list[dict[str, Any]]:
    """The ``sweep.json`` entries of one run's points."""
    return [{"label": p.label, "values": p.values, "hash": p.hash, "run_dir": f"runs/{run.key}", "seeds": list(seeds)}
            for p, seeds in zip(run.points, run.seeds)]


def write_index(runs: list[SweepRun], out: Path, lab: str, *, axes: list[str] | None = None, fold: str = "none",
                report: dict[str, Any] | None = None) -> None:
    """``OUT/sweep.json`` (the layout above)."""
    points = [entry for run in runs for entry in index_entry(run)]
    atomic_write_json(out / "sweep.json", {"lab": lab, "axes": list(axes or []), "fold": fold,
                                           "report": dict(report or {}), "points": points})


def run_runs(runs: list[SweepRun], out: str | Path, opts: ExecutorOptions,
             on_result: Callable[[PointResult], None] | None = None) -> list[PointResult]:
    """Run every run into ``out`` with the executor ``opts.kind``; one result per point, in
    point order. Held runs are waited for at the end (``opts.wait_held``), then skipped or
    resumed. ``on_result`` is called for each point as its run ends (a progress bar)."""
    out = Path(out)
    keys = [r.key for r in runs]
    if len(set(keys)) < len(keys):
        raise UserError(f"sweep: {len(keys) - len(set(keys))} runs repeat another run's config (same hash); "
                        "remove the repeated axis values")
    check_available(opts)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    by_key = {r.key: r for r in runs}
    results: dict[str, list[PointResult]] = {}

    def report(key: str, status: str, error: str | None) -> None:
        results[key] = [PointResult(p.label or key, p.hash, status, f"runs/{key}", error) for p in by_key[key].points]
        if on_result and not (status == "held" and opts.wait_held):
            for result in results[key]:
                on_result(result)

    runner = RUNNERS[opts.kind]
    runner([Task(r.key, r.spec.to_json()) for r in runs], out, opts, report)
    held = [r for r in runs if results[r.key][0].status == "held"]
    if held and opts.wait_held:
        runner([Task(r.key, r.spec.to_json()) for r in held], out, opts, report, block=True)
    return [result for r in runs for result in results[r.key]]


def run_sweep(points: list[SweepPoint], out: str | Path, lab: str, *, opts: ExecutorOptions | None = None,
              fold: str = "none", fold_max_seeds: int = 64, axes: list[str] | None = None,
              report: dict[str, Any] | None = None,
              on_result: Callable[[PointResult], None] | None = None) -> list[PointResult]:
    """Fold the points into runs, write ``sweep.json`` and run them (:func:`run_runs`)."""
    out = Path(out)
    writable_dir(out, "--out")
    opts = opts or ExecutorOptions()
    hashes = [p.hash for p in points]
    if len(set(hashes)) < len(hashes):
        raise UserError(f"sweep: {len(hashes) - len(set(hashes))} points repeat another point's config (same hash); "
                        "remove the repeated axis values")
    runs = fold_points(points, fold, fold_max_seeds)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    write_index(runs, out, lab, axes=axes if axes is not None else list(points[0].values) if points else [],
                fold=fold, report=report)
    by_hash = {r.hash: r for r in run_runs(runs, out, opts, on_result)}
    return [by_hash[p.hash] for p in points]


def run_local(points: list[SweepPoint], out: str | Path, lab: str, *, max_parallel: int | None = None,
              on_result: Callable[[PointResult], None] | None = None, wait_held: bool = True) -> list[PointResult]:
    """Unfolded points on the local executor (``max_parallel`` workers; 1 runs in this process)."""
    if max_parallel is not None and max_parallel < 1:
        raise UserError(f"--max-parallel {max_parallel}: must be >= 1")
    opts = ExecutorOptions(kind="local", max_parallel=max_parallel, wait_held=wait_held)
    return run_sweep(points, out, lab, opts=opts, on_result=on_result)


def counts(results: list[PointResult]) -> dict[str, int]:
    """How many points ended in each status (``interrupted`` only when some did)."""
    c = {s: sum(r.status == s for r in results) for s in STATUSES}
    if not c["interrupted"]:
        del c["interrupted"]
    return c


def summary_lines(results: list[PointResult], out: Path) -> list[str]:
    """The end-of-sweep lines: the counts, then one line per failed point with its folder."""
    c = counts(results)
    lines = [", ".join(f"{n} {s}" for s, n in c.items()) + f" ({len(results)} points, {out})"]
    lines += [f"{r.status} {r.label}: {r.error} ({out / r.run_dir})" for r in results
              if r.status in ("failed", "interrupted")]
    return lines


def index(out: str | Path) -> dict[str, Any]:
    """The sweep folder's ``sweep.json``; one-line UserError when it is not a sweep folder."""
    path = Path(out) / "sweep.json"
    if not path.is_file():
        raise UserError(f"{out}: not a sweep folder (no sweep.json)")
    return json.loads(path.read_text())
