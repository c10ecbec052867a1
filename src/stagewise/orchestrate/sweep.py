"""Run a sweep: its runs go to an executor (local pool, Ray, SLURM), one code path per run.

Layout of a sweep folder::

    OUT/sweep.json            lab, axes, fold, report spec and every point (label, axis values,
                              hash, run folder, the seeds of that run that are the point's)
    OUT/runs/KEY/             one run directory per run (KEY: the run's config hash)
    OUT/locks/KEY/.lock       held while a process works on that run (flock: dies with the process)
    OUT/slurm/                submitit's job files and logs (executor slurm)

A folder holding another sweep (a point that is not in its ``sweep.json``, or another lab)
is refused unless ``extend`` (``stagewise sweep --extend``): then ``sweep.json`` keeps both
point sets (its points first, then the new ones), so ``sweep collect`` and ``report`` see all
of them. Nothing is created before every check has passed (:func:`preflight`).

Re-running the same sweep skips runs whose manifest says done, resumes unfinished ones
(:func:`~stagewise.orchestrate.runner.execute_spec`), and never runs a run twice at once: a
run whose lock another sweep process holds is waited for (``executor.wait_held``) and then
skipped or resumed, so two sweep processes started on one folder both end with every run
done exactly once. A run that fails records its error in its own folder and the sweep goes on.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from ..errors import Note, UserError
from ..runs import atomic_write_json
from ..runs.links import refuse_links
from .executors import RUNNERS, ExecutorOptions, Task, check_available
from .runner import check_dir, writable_dir
from .sweepplan import SweepPoint, SweepRun, check_distinct, fold_points

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


def new_index(runs: list[SweepRun], lab: str, *, axes: list[str] | None = None, fold: str = "none",
              report: dict[str, Any] | None = None, log_axes: list[str] | None = None) -> dict[str, Any]:
    """The ``sweep.json`` of these runs (the layout above); ``log_axes``: the axes declared
    log-spaced (``logrange``, ``random: loguniform``), which the sweep figures plot on a log scale."""
    points = [entry for run in runs for entry in index_entry(run)]
    return {"lab": lab, "axes": list(axes or []), "log_axes": list(log_axes or []), "fold": fold,
            "report": dict(report or {}), "points": points}


def merge_index(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` added to the folder's ``old`` index: old points first (a point of both takes
    its new entry, e.g. its run folder under another fold), then the new points; axes in
    first-seen order; the new report section where it has one."""
    if old is None:
        return new
    fresh = {p["hash"]: p for p in new["points"]}
    points = [fresh.pop(p["hash"], p) for p in old["points"]] + list(fresh.values())
    folds = {old.get("fold", "none"), new["fold"]}
    return {"lab": new["lab"], "axes": list(dict.fromkeys([*old.get("axes", []), *new["axes"]])),
            "log_axes": list(dict.fromkeys([*old.get("log_axes", []), *new.get("log_axes", [])])),
            "fold": new["fold"] if len(folds) == 1 else "mixed", "report": new["report"] or old.get("report") or {},
            "points": points}


SWEEP_ENTRIES = {"sweep.json", "runs", "locks", "slurm", "collect", "report.html", "report"}  # what a sweep folder holds


def check_folder(out: Path, lab: str, hashes: list[str], extend: bool = False,
                 run_keys: Sequence[str] | None = None) -> dict[str, Any] | None:
    """The index already in ``out`` (None for a new or empty folder), after refusing, in one
    line, a folder that is not a sweep folder or holds another sweep (unless ``extend``).

    An unreadable ``sweep.json`` (a truncated write, a hand edit) is rebuilt, with a note,
    when every run folder in ``runs/`` is one of this sweep's (``run_keys``): None is returned
    and the caller writes the index of this sweep; otherwise it is one line naming a stray
    run folder."""
    if not out.is_dir() or not any(out.iterdir()):
        return None
    if not (out / "sweep.json").exists():
        other = sorted(p.name for p in out.iterdir()
                       if p.name not in SWEEP_ENTRIES and not p.name.startswith(".sweep.json."))  # a write in flight
        if other or (out / "runs").is_dir() and any((out / "runs").iterdir()):
            raise UserError(f"--out {out}: folder is not empty and is not a sweep folder (no sweep.json; holds "
                            f"{(other or ['runs/'])[0]!r}); choose another folder")
        return None
    try:
        old = index(out)
    except UserError as err:
        _rebuild_or_refuse(out, err, run_keys)
        return None
    if old["lab"] != lab:
        raise UserError(f"--out {out}: holds a sweep of the {old['lab']} lab, not {lab}; choose another folder")
    known = {p["hash"] for p in old["points"]}
    added = [h for h in hashes if h not in known]
    if added and not extend:
        raise UserError(f"--out {out}: holds another sweep ({len(old['points'])} points; {len(added)} of this sweep's "
                        f"{len(hashes)} points are not among them); pass --extend to add them to that sweep, "
                        "or choose another folder")
    return old


def _rebuild_or_refuse(out: Path, err: UserError, run_keys: Sequence[str] | None) -> None:
    """A note (the caller then writes this sweep's index) when ``out``'s run folders are all
    this sweep's; one UserError line otherwise (``err``: why the index could not be read)."""
    why = err.messages[0].split("; run the sweep again")[0]
    present = sorted(p.name for p in (out / "runs").iterdir()) if (out / "runs").is_dir() else []
    stray = [name for name in present if run_keys is None or name not in set(run_keys)]
    if stray:
        raise UserError(f"{why}; it cannot be rebuilt from this sweep: runs/ holds {len(stray)} run folder(s) this sweep "
                        f"does not make (e.g. runs/{stray[0]}); rerun with the sweep file that made them, or choose "
                        "another folder")
    warnings.warn(f"{out / 'sweep.json'} was unreadable ({why.split(': ', 1)[-1]}): rebuilding it from this sweep and the "
                  f"{len(present)} run folder(s) in runs/", Note, stacklevel=3)


def preflight(runs: list[SweepRun], out: Path, opts: ExecutorOptions) -> None:
    """Every check of a set of runs that needs no file made: repeated configs, the
    executor's and sinks' packages, the folder ``out`` (creatable and writable). The one
    gate before anything is created, for sweeps and reproduce alike."""
    keys = [r.key for r in runs]
    if len(set(keys)) < len(keys):
        raise UserError(f"sweep: {len(keys) - len(set(keys))} runs repeat another run's config (same hash); "
                        "remove the repeated axis values")
    check_available(opts)
    check_dir(out, "--out")


def run_runs(runs: list[SweepRun], out: str | Path, opts: ExecutorOptions,
             on_result: Callable[[PointResult], None] | None = None) -> list[PointResult]:
    """Run every run into ``out`` with the executor ``opts.kind``; one result per point, in
    point order. Held runs are waited for at the end (``opts.wait_held``), then skipped or
    resumed. ``on_result`` is called for each point as its run ends (a progress bar)."""
    out = Path(out)
    preflight(runs, out, opts)
    writable_dir(out, "--out")
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
              report: dict[str, Any] | None = None, extend: bool = False, log_axes: list[str] | None = None,
              on_result: Callable[[PointResult], None] | None = None) -> list[PointResult]:
    """Fold the points into runs, check everything (:func:`check_folder`, :func:`preflight`),
    then write ``sweep.json`` (merged with the folder's, :func:`merge_index`) and run them
    (:func:`run_runs`)."""
    out = Path(out)
    opts = opts or ExecutorOptions()
    check_distinct(points)
    hashes = [p.hash for p in points]
    runs = fold_points(points, fold, fold_max_seeds, opts.allow_large)
    refuse_links(out)
    old = check_folder(out, lab, hashes, extend, [r.key for r in runs])
    preflight(runs, out, opts)
    writable_dir(out, "--out")
    fresh = new_index(runs, lab, axes=axes if axes is not None else list(points[0].values) if points else [],
                      fold=fold, report=report, log_axes=log_axes)
    atomic_write_json(out / "sweep.json", merge_index(old, fresh))  # first, so the folder is a sweep folder at once
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
    """The sweep folder's ``sweep.json``; one-line UserError when it is missing, unreadable
    (e.g. a truncated write) or not a sweep index."""
    path = Path(out) / "sweep.json"
    if not path.is_file():
        raise UserError(f"{out}: not a sweep folder (no sweep.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: unreadable sweep index ({type(err).__name__}: {err}); "
                        "run the sweep again (the same sweep file) to rebuild it") from None
    try:
        IndexFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise UserError(f"{path}: not a sweep index ({where}: {first['msg']}; needs lab and points with label, hash and "
                        "run_dir)") from None
    return data


RESERVED_AXES = ("point", "hash", "run_dir", "status", "error", "claims_over_seeds")
"""Columns of the collected table (:mod:`.collect`) an axis may not be named (``seed`` may: a
seed axis is the table's seed column); nor may an axis start with ``final.``, ``stage.`` or ``claim.``."""


def _axis_name(name: str) -> str:
    if name in RESERVED_AXES or name.startswith(("final.", "stage.", "claim.")):
        raise ValueError(f"axis {name!r} would collide with a column of the collected table")
    return name


AxisName = Annotated[str, AfterValidator(_axis_name)]


class IndexPoint(BaseModel):
    """One point of ``sweep.json`` (other keys are kept and ignored)."""

    model_config = ConfigDict(extra="allow")
    label: str
    hash: str
    run_dir: str
    values: dict[AxisName, Any] = {}
    seeds: list[int] | None = None


class IndexFile(BaseModel):
    """The schema ``sweep.json`` is checked against on read: a hand-edited or damaged index is one
    line naming the field, never a traceback later in ``collect`` or ``report``."""

    model_config = ConfigDict(extra="allow")
    lab: str
    points: list[IndexPoint]
    axes: list[AxisName] = []
    log_axes: list[AxisName] = []
    fold: str = "none"
    report: dict[str, Any] = {}
