"""The `stagewise` command line (Typer + rich).

Bad input prints one line per problem (``error: ...``) and exits with code 2 before any
work starts. A run that fails exits 1 (3 when it diverged) after recording the error in
its manifest; nothing logged so far is lost.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate, measure and reproduce staged training dynamics in transformers.")
out_console = Console()
err_console = Console(stderr=True)


def _default_out(lab: str, preset: str | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{lab}-{preset or 'default'}-{stamp}"


@app.command("labs")
def labs_cmd() -> None:
    """List the labs and their presets."""
    from .labs import REGISTRY

    table = Table(show_header=True, header_style="bold")
    table.add_column("lab")
    table.add_column("preset")
    table.add_column("what it runs")
    for name, lab in REGISTRY.items():
        table.add_row(name, "(defaults)", lab.description)
        for preset, (text, _) in lab.presets.items():
            table.add_row("", preset, text)
    out_console.print(table)


@app.command("config")
def config_cmd(lab: str = typer.Argument(..., help="lab name, see `stagewise labs`"),
               preset: Optional[str] = typer.Option(None, "--preset", "-p", help="start from this preset")) -> None:
    """Print the full default config of LAB (or of a preset) as commented YAML."""
    from .config import resolve, to_commented_yaml
    from .labs import get_lab

    value = get_lab(lab)
    config = resolve(value.Config, value.preset_overrides(preset))
    typer.echo(f"# stagewise config for lab '{lab}'" + (f", preset '{preset}'" if preset else ""))
    typer.echo(to_commented_yaml(config))


@app.command("run")
def run_cmd(
    lab: Optional[str] = typer.Argument(None, help="lab name (omit with --resume)"),
    preset: Optional[str] = typer.Option(None, "--preset", "-p", help="named preset, see `stagewise labs`"),
    config_file: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML file of config values"),
    sets: Optional[List[str]] = typer.Option(None, "--set", "-s", help="override one value: a.b=value (repeatable)"),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="ensemble size K (seeds seed..seed+K-1, one batched pass)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (default runs/LAB-PRESET-TIME)"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="resume the run in this directory"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    allow_large: bool = typer.Option(False, "--allow-large", help="run even when the size estimate exceeds memory or disk"),
) -> None:
    """Run a lab: validate the config, train, write metrics, tables, summary and figures."""
    from .config import resolve
    from .labs import get_lab
    from .orchestrate import check_size, load_for_resume, prepare
    from .runs import RunPaths

    if resume is not None:
        if lab or preset or config_file or sets or seeds or out:
            raise UserError("--resume DIR takes no lab, preset, config, --set, --seeds or --out: the run's own config is used")
        value, config = load_for_resume(resume)
        paths = RunPaths(resume)
    else:
        if lab is None:
            raise UserError("missing LAB: e.g. `stagewise run ntp --preset example1`; see `stagewise labs`")
        value = get_lab(lab)
        if seeds is not None and seeds < 1:
            raise UserError(f"--seeds {seeds}: must be >= 1")
        config = resolve(value.Config, value.preset_overrides(preset), config_file, sets or [],
                         {"n_seeds": seeds} if seeds is not None else None)
        target = out or _default_out(lab, preset)
        check_size(value, config, target, allow_large)
        value.check(config)
        paths = prepare(value, config, target)
    _execute(value, config, paths, resume is not None, not quiet)


def _execute(lab, config, paths, resume: bool, progress: bool) -> None:
    from .engine import Diverged
    from .orchestrate import execute
    from .runs import Interrupted

    try:
        execute(lab, config, paths, resume=resume, progress=progress)
    except Diverged as err:
        note = getattr(err, "stagewise_note", None)
        err_console.print(f"[red]run diverged[/]: {err}; metrics so far kept in {paths.root}"
                          + (f" ({note})" if note else ""), highlight=False)
        raise typer.Exit(3)
    except Interrupted as err:
        err_console.print(f"interrupted ({signal_name(err.signum)}); resume with: stagewise run --resume {paths.root}",
                          highlight=False)
        raise typer.Exit(128 + int(err.signum))
    except UserError:
        raise
    except Exception as err:
        log = getattr(err, "stagewise_error_log", None)
        note = getattr(err, "stagewise_note", None)
        where = f"traceback in {log}; " if log else ""
        err_console.print(f"[red]run failed[/]: {type(err).__name__}: {err} ({where}"
                          + (f"{note}; " if note else "") + f"resume with: stagewise run --resume {paths.root})",
                          highlight=False)
        raise typer.Exit(1)
    _print_summary(paths.root)


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _print_summary(run_dir: Path) -> None:
    from .report.claims import read_summary
    from .runs import read_manifest

    manifest = read_manifest(run_dir)
    summary_path = Path(run_dir) / "summary.json"
    out_console.print(f"[bold]{run_dir}[/]  lab={manifest['lab']}  status={manifest['status']}  "
                      f"seeds={manifest['seeds']}  config={manifest['config_hash']}", highlight=False)
    if manifest.get("error"):
        out_console.print(f"error: {manifest['error']}", highlight=False, markup=False)
    if not summary_path.exists():
        return
    summary = read_summary(summary_path)
    scalars = {k: v for k, v in summary.details.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if scalars:
        out_console.print("  ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in scalars.items()),
                          highlight=False)
    if summary.final:
        table = Table("metric (last step)", "mean", "min", "max", header_style="bold")
        fmt = lambda v: "-" if v is None else f"{v:.6g}"  # noqa: E731
        for name, stats in summary.final.items():
            table.add_row(name, fmt(stats.mean), fmt(stats.min), fmt(stats.max))
        out_console.print(table)
    if summary.claims:
        table = Table("claim", "holds", "evidence", header_style="bold")
        for claim in summary.claims:
            mark = "[green]yes[/]" if claim.holds else "[yellow]untestable[/]" if claim.holds is None else "[red]no[/]"
            table.add_row(escape(f"{claim.id}: {claim.statement}"), mark, escape(claim.evidence))
        out_console.print(table)


@app.command("show")
def show_cmd(run_dir: Path = typer.Argument(..., help="a run directory")) -> None:
    """Print a run's status, final values and claims."""
    _print_summary(run_dir)


@app.command("stages")
def stages_cmd(
    run_dir: Path = typer.Argument(..., help="a run directory (any lab)"),
    criteria: List[str] = typer.Argument(..., help="NAME=METRIC>=THRESHOLD or NAME=METRIC<=THRESHOLD, e.g. 'Q=test.acc.q_only>=0.85'"),
    sustain: int = typer.Option(1, "--sustain", help="the value must stay past the threshold for this many logged points"),
) -> None:
    """Detect when each metric crosses its threshold, per seed, with the spread over seeds."""
    import pandas as pd

    from .measure import detect_stages

    parsed = {}
    for item in criteria:
        name, sep, rule = item.partition("=")
        op = ">=" if ">=" in rule else "<=" if "<=" in rule else None
        if not sep or op is None:
            raise UserError(f"criterion {item!r}: expected NAME=METRIC>=THRESHOLD or NAME=METRIC<=THRESHOLD")
        metric, _, value = rule.partition(op)
        try:
            parsed[name] = (metric.strip(), float(value), "above" if op == ">=" else "below")
        except ValueError:
            raise UserError(f"criterion {item!r}: threshold {value!r} is not a number") from None
    path = Path(run_dir) / "metrics.parquet"
    if not path.is_file():
        raise UserError(f"{run_dir}: no metrics.parquet (not a finished or failed run directory)")
    frame = pd.read_parquet(path)
    missing = sorted({m for m, _, _ in parsed.values()} - set(frame["metric"].unique()))
    if missing:
        raise UserError(f"metric(s) {', '.join(missing)} not in {path}")
    report = detect_stages(frame, parsed, sustain=sustain)
    table = Table("stage", "metric", "reached", "mean step", "std", "min", "max", "per seed", header_style="bold")
    for name, (metric, threshold, direction) in parsed.items():
        per_seed = ", ".join(f"{seed}: {'-' if step != step else int(step)}" for seed, step in report.per_seed[name].items())
        fmt = lambda v: "-" if v != v else f"{v:.0f}"  # noqa: E731
        table.add_row(name, f"{metric} {'>=' if direction == 'above' else '<='} {threshold:g}",
                      f"{report.n_reached[name]}/{report.n_seeds[name]}", fmt(report.mean[name]), fmt(report.std[name]),
                      fmt(report.min[name]), fmt(report.max[name]), per_seed)
    out_console.print(table)
    out_console.print(f"order (by median step): {' -> '.join(report.order)}", highlight=False)


@app.command("reproduce")
def reproduce_cmd(
    lab: str = typer.Argument(..., help="lab name"),
    quick: bool = typer.Option(False, "--quick", help="fewer runs and seeds (about a minute on a laptop)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="report folder (default reports/LAB[-quick]); "
                                       "rerun with the same folder to continue a stopped reproduce"),
    allow_large: bool = typer.Option(False, "--allow-large", help="run even when a size estimate exceeds memory or disk"),
) -> None:
    """Run a lab's reproduction set and write one report folder (figures, claims, HTML)."""
    from .labs import get_lab
    from .orchestrate import reproduce
    from .runs import Interrupted

    value = get_lab(lab)
    folder = out or Path("reports") / f"{lab}{'-quick' if quick else ''}"
    try:
        report = reproduce(value, folder, quick=quick, progress=True, allow_large=allow_large)
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else 2
        err_console.print(f"interrupted ({signal_name(signum)}); continue with: stagewise reproduce {lab}"
                          f"{' --quick' if quick else ''} --out {folder}", highlight=False)
        raise typer.Exit(128 + int(signum))
    claims = [c for run in report["runs"] for c in run["claims"]]
    holds = sum(c["holds"] is True for c in claims)
    untestable = sum(c["holds"] is None for c in claims)
    out_console.print(f"report: {folder / 'report.html'}  ({len(report['runs'])} runs, {holds}/{len(claims)} claims hold"
                      + (f", {untestable} not testable" if untestable else "") + ")", highlight=False)
    failed = [run for run in report["runs"] if run["status"] != "done"]
    for run in failed:
        err_console.print(f"run {run['name']} {run['status']}: {run['error']} ({folder / run['run_dir']})", highlight=False)
    if failed:
        raise typer.Exit(3 if all(run["status"] == "diverged" for run in failed) else 1)


def main() -> None:
    """Console entry point: user errors become one line each and exit code 2."""
    try:
        app()
    except UserError as err:
        for message in err.messages:
            err_console.print(f"error: {message}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
