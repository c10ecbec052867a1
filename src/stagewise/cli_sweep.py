"""`stagewise sweep SPEC` / `stagewise sweep collect DIR` and `stagewise report DIR`."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, List, Mapping, Optional

import typer
from rich.console import Console

from .errors import UserError
from .runs.stops import signum_of

try:
    from typer.core import TyperGroup
except ImportError:  # pragma: no cover - older typer
    from typer.main import TyperGroup

out_console = Console()
err_console = Console(stderr=True)
EXAMPLES_SHOWN = 5  # --dry-run lists this many points


class _DefaultRun(TyperGroup):
    """``stagewise sweep SPEC ...`` means ``stagewise sweep run SPEC ...``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(cls=_DefaultRun, no_args_is_help=True,
                        help="Run a sweep file (`stagewise sweep SPEC`), or collect a sweep folder into one table.")



def claim_checks_line(report: Mapping[str, Any]) -> str:
    """``4 runs, 61 of 67 claim checks hold, 2 inconclusive, 4 not testable`` for a reproduce report
    (``claims.json``): a claim check is one claim judged in one run, what the report page's
    matrix counts per verdict (one cell each), so the two say the same numbers."""
    claims = [c for run in report["runs"] for c in run.get("claims") or []]
    holds = sum(c["holds"] is True for c in claims)
    unconcerned = sum(c["holds"] is None and c.get("verdict") == "not applicable" for c in claims)
    undecided = sum(c["holds"] is None and c.get("verdict") == "inconclusive" for c in claims)
    untestable = sum(c["holds"] is None for c in claims) - unconcerned - undecided
    return (f"{len(report['runs'])} runs, {holds} of {len(claims) - unconcerned} claim checks hold"
            + (f", {undecided} inconclusive" if undecided else "")
            + (f", {untestable} not testable" if untestable else "")
            + (f" ({unconcerned} not applicable)" if unconcerned else ""))

def _split_sets(sets: List[str]) -> tuple[dict, list[str]]:
    """``--set executor.KEY=V`` -> executor options; every other ``--set`` -> config overrides."""
    from pydantic import BaseModel

    from .orchestrate.executors import ExecutorOptions
    from .overrides import parse_overrides

    class SweepSets(BaseModel):
        executor: ExecutorOptions

    executor = [s for s in sets if s.strip().startswith("executor.")]
    rest = [s for s in sets if not s.strip().startswith("executor.")]
    parsed = parse_overrides(SweepSets, executor).get("executor", {}) if executor else {}
    return parsed, rest


def _check_flags(executor: Optional[str], max_parallel: Optional[int]) -> None:
    """One-line errors for ``--executor`` and ``--max-parallel`` (shared by sweep and reproduce)."""
    if executor is not None and executor not in ("local", "ray", "slurm"):
        raise UserError(f"--executor {executor}: unknown; allowed: local, ray, slurm")
    if max_parallel is not None and max_parallel < 1:
        raise UserError(f"--max-parallel {max_parallel}: must be >= 1")


def _dotted(nested: dict, prefix: str = "") -> dict:
    """``{"train": {"lr_stage2": 1}}`` -> ``{"train.lr_stage2": 1}`` (the sweep file's ``set`` form)."""
    out = {}
    for key, value in nested.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _executor_options(file_options: dict, sets: dict, kind: Optional[str], max_parallel: Optional[int],
                      sinks: Optional[List[str]] = None):
    from pydantic import ValidationError

    from .config import deep_merge
    from .orchestrate.executors import ExecutorOptions

    merged = deep_merge(file_options, sets)
    if kind is not None:
        merged["kind"] = kind
    if max_parallel is not None:
        merged["max_parallel"] = max_parallel
    if sinks:
        merged["sinks"] = list(dict.fromkeys([*merged.get("sinks", []), *sinks]))
    try:
        return ExecutorOptions.model_validate(merged)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        value = merged.get(str(first["loc"][0])) if first["loc"] else merged  # a top-level loc is a field name
        raise UserError(f"executor.{where}={value!r}: {first['msg'].removeprefix('Value error, ')}") from None


def _with_sets(sweep, config_sets: list[str]):
    """The sweep with ``--set KEY=VALUE`` config overrides added to its ``set`` (typed and
    key-checked against the lab's config when the points are planned)."""
    if not config_sets:
        return sweep
    from .labs import get_lab
    from .overrides import parse_overrides

    extra = _dotted(parse_overrides(get_lab(sweep.lab).Config, config_sets))
    return sweep.model_copy(update={"set_": {**sweep.set_, **extra}})


def _print_plan(points, runs, sweep, folder: Path, kind: str) -> None:
    """``sweep run --dry-run``: the count and the first few points."""
    folded = f" in {len(runs)} runs (fold: {sweep.fold})" if len(runs) != len(points) else ""
    out_console.print(f"{len(points)} runs of {sweep.lab}{folded} into {folder}/runs/HASH, executor {kind}",
                      highlight=False, markup=False)
    for p in points[:EXAMPLES_SHOWN]:
        out_console.print(f"  {p.hash[:12]}  {p.label}", highlight=False, markup=False)
    if len(points) > EXAMPLES_SHOWN:
        out_console.print(f"  ... and {len(points) - EXAMPLES_SHOWN} more", highlight=False, markup=False)


@sweep_app.command("run")
def sweep_run_cmd(
    spec: Path = typer.Argument(..., help="sweep file (YAML: lab, preset, config, set, axes, zip, fold, executor, report)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="sweep folder (default sweeps/SPEC-NAME); rerun to continue"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (process pool), ray, or slurm (submitit); "
                                           "default: the file's executor.kind, else local"),
    max_parallel: Optional[int] = typer.Option(None, "--max-parallel", help="at most this many runs at once"),
    sets: List[str] = typer.Option([], "--set", "-s", help="executor.KEY=VALUE (e.g. executor.address=auto, "
                                   "executor.gpus_per_run=0.25) or a config override KEY=VALUE for every point"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the runs (count and a few examples) and stop"),
    no_collect: bool = typer.Option(False, "--no-collect", help="do not collect the table and figures at the end"),
    sink: List[str] = typer.Option([], "--sink", help="every run also logs to tensorboard or wandb (repeatable)"),
    extend: bool = typer.Option(False, "--extend", help="--out holds another sweep of the same lab: add this sweep's "
                                "points to it (sweep.json keeps both point sets)"),
) -> None:
    """Expand a sweep file into runs, validate every one, and run them (skipping done ones)."""
    from .orchestrate.executors import ExecutorOptions
    from .orchestrate.sweep import check_folder, preflight, run_sweep, summary_lines
    from .orchestrate.sweepplan import fold_points, load_sweep, plan

    _check_flags(executor, max_parallel)
    sweep = load_sweep(spec)
    executor_sets, config_sets = _split_sets(sets)
    sweep = _with_sets(sweep, config_sets)
    opts = _executor_options(sweep.executor, executor_sets, executor, max_parallel, sink)
    assert isinstance(opts, ExecutorOptions)
    _check_report(sweep)
    folder = out or Path("sweeps") / spec.stem
    points = plan(sweep, folder, opts.allow_large)
    runs = fold_points(points, sweep.fold, sweep.fold_max_seeds, opts.allow_large)
    check_folder(folder, sweep.lab, [p.hash for p in points], extend, [r.key for r in runs])
    preflight(runs, folder, opts)
    if dry_run:
        _print_plan(points, runs, sweep, folder, opts.kind)
        return
    try:
        with _PointsProgress(len(points), "sweep") as show:
            results = run_sweep(points, folder, sweep.lab, opts=opts, fold=sweep.fold, fold_max_seeds=sweep.fold_max_seeds,
                                axes=list(sweep.axes), report=sweep.report, extend=extend, log_axes=sweep.log_axes(),
                                on_result=show)
    except KeyboardInterrupt as err:  # the executor started no further run and its runs recorded the stop
        signum = signum_of(err)
        err_console.print(f"interrupted ({signal.Signals(signum).name}); {show.done} of {len(points)} points reported; "
                          f"continue with: stagewise sweep run {spec} --out {folder}", highlight=False, markup=False,
                          soft_wrap=True)
        raise typer.Exit(128 + signum) from None
    lines = summary_lines(results, folder)
    out_console.print(lines[0], highlight=False, markup=False)
    for line in lines[1:]:
        err_console.print(line, highlight=False, markup=False)
    if not no_collect:
        _collect(folder, after_run=True)
    if len(lines) > 1:
        raise typer.Exit(1)


def _check_report(sweep) -> None:
    if not sweep.report:
        return
    from .orchestrate.collect import check_report_spec

    check_report_spec(sweep.report, list(sweep.axes), lab=sweep.lab)


def _collect(folder: Path, after_run: bool = False) -> None:
    from .orchestrate.collect import collect
    from .orchestrate.tasks import os_failure

    try:
        result = collect(folder)
    except OSError as err:  # a full disk: after a sweep its counts stand and the table waits for space
        where = folder / "collect"
        line = f"collect: {os_failure(err, f'writing {where}')}; run `stagewise sweep collect {folder}` later"
        if not after_run:
            raise UserError(line) from None
        err_console.print(f"warning: {line}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    out_console.print(f"table: {result.table} ({len(result.frame)} rows: {result.n_points} points, "
                      f"{result.n_failed} failed); {len(result.figures)} figures in {result.table.parent / 'figures'}",
                      highlight=False, markup=False)
    for line in result.warnings:
        err_console.print(f"warning: {line}", highlight=False, markup=False)


@sweep_app.command("collect")
def sweep_collect_cmd(folder: Path = typer.Argument(..., help="a sweep folder (has sweep.json)")) -> None:
    """One Parquet table (a row per run and seed: axes, final metrics, stage boundaries, claims) and figures."""
    from .orchestrate.sweep import index

    index(folder)
    _collect(folder)


def report_cmd(folder: Path = typer.Argument(..., help="a run, sweep or reproduce folder")) -> None:
    """Write FOLDER/report.html: one self-contained file (figures embedded, config, manifest, claims, stages, links)."""
    from .orchestrate.reporting import write_report

    result = write_report(folder)
    out_console.print(f"report: {result.html} ({result.kind}, {len(result.figures)} figures)", highlight=False, markup=False,
                      soft_wrap=True)


class _PointsProgress:
    """Progress over a sweep's points (:class:`stagewise.progress.Progress`): on a terminal a
    bar that appears with the first finished point (an error raised before any run stays one
    line), elsewhere a plain line every few seconds; a failed or interrupted point is a line
    of its own."""

    def __init__(self, total: int, what: str):
        from .progress import Progress

        self.progress = Progress(total, what, unit="points", transient=False, lazy_bar=True)

    @property
    def done(self) -> int:
        return self.progress.done

    def __call__(self, result) -> None:
        self.progress.advance(1, detail=f"{result.status} {result.label}")
        if result.status in ("failed", "interrupted"):
            self.progress.console_print(f"{result.status} {result.label}: {result.error}")

    def __enter__(self) -> "_PointsProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)


def reproduce_cmd(
    lab: str = typer.Argument(..., help="lab name (ntp, disentangled, lm) or all"),
    quick: bool = typer.Option(False, "--quick", help="fewer runs and seeds (a few minutes on a laptop)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="report folder (default reports/LAB[-quick]); "
                                       "rerun with the same folder to continue a stopped reproduce"),
    allow_large: bool = typer.Option(False, "--allow-large", help="run even when a size estimate exceeds memory or disk"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (default), ray or slurm, as for `sweep`"),
    max_parallel: Optional[int] = typer.Option(None, "--max-parallel", help="at most this many runs at once"),
    sets: List[str] = typer.Option([], "--set", "-s", help="executor.KEY=VALUE, as for `sweep`"),
    sink: List[str] = typer.Option([], "--sink", help="every run also logs to tensorboard or wandb (repeatable)"),
) -> None:
    """Run a lab's reproduction set through the sweep machinery and write one report folder."""
    from .labs import REGISTRY, get_lab
    from .orchestrate.reproduction import reproduce, reproduce_all

    _check_flags(executor, max_parallel)
    executor_sets, rest = _split_sets(sets)
    if rest:
        raise UserError(f"--set {rest[0]}: reproduce takes executor.KEY=VALUE only (the runs are the lab's own)")
    opts = _executor_options({}, executor_sets, executor, max_parallel, sink)
    labs = [get_lab(name) for name in REGISTRY] if lab == "all" else [get_lab(lab)]
    folder = out or Path("reports") / f"{lab}{'-quick' if quick else ''}"
    total = sum(len(value.reproduce.specs(quick)) for value in labs)
    try:
        with _PointsProgress(total, f"reproduce {lab}") as show:
            if lab == "all":
                report = reproduce_all(labs, folder, quick=quick, allow_large=allow_large, opts=opts, on_result=show)
            else:
                report = reproduce(labs[0], folder, quick=quick, progress=True, allow_large=allow_large, opts=opts,
                                   on_result=show)
    except KeyboardInterrupt as err:
        signum = signum_of(err)
        err_console.print(f"interrupted ({signal.Signals(signum).name}); continue with: stagewise reproduce {lab}"
                          f"{' --quick' if quick else ''} --out {folder}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(128 + int(signum)) from None
    out_console.print(f"report: {folder / 'report.html'}  ({claim_checks_line(report)})", highlight=False, markup=False,
                      soft_wrap=True)
    failed = [run for run in report["runs"] if run["status"] != "done"]
    for run in failed:
        err_console.print(f"run {run['name']} {run['status']}: {run['error']} ({folder / run['run_dir']})",
                          highlight=False, markup=False)
    if failed:
        raise typer.Exit(3 if all(run["status"] == "diverged" for run in failed) else 1)
