"""`stagewise stages RUN NAME=METRIC>=THRESHOLD ...`: when each metric crosses its threshold,
per seed, read from any lab's run folder (old metric names through the lab's aliases)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Mapping

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import UserError, finite_number

out_console = Console()


def metric_aliases_of(run_dir: Path) -> Mapping[str, str]:
    """The old metric names of the lab a run folder's manifest names (``Lab.metric_aliases``);
    none without a readable manifest or for a lab this installation does not have."""
    from .labs import metric_aliases
    from .runs import read_manifest

    try:
        return metric_aliases(read_manifest(run_dir).get("lab"))
    except UserError:
        return {}


def stages_cmd(
    run_dir: Path = typer.Argument(..., help="a run directory (any lab)"),
    criteria: List[str] = typer.Argument(..., help="NAME=METRIC>=THRESHOLD or NAME=METRIC<=THRESHOLD, e.g. 'Q=test.acc.q_only>=0.85'"),
    sustain: int = typer.Option(1, "--sustain", help="the value must stay past the threshold for this many logged points"),
) -> None:
    """Detect when each metric crosses its threshold, per seed, with the spread over seeds. A
    metric's old name (the lab's metric_aliases) is read as its current one, with a note.
    The order lists only stages some seed reached (the others: "no seed reached: ..."); on an
    unfinished run (status not done) the table covers the steps logged so far and a note line
    on stderr says the run is unfinished (exit 0)."""
    from .measure import detect_stages
    from .runs.names import current_names, rename_metrics

    if sustain < 1:
        raise UserError(f"--sustain {sustain}: must be >= 1 (the number of consecutive logged points)")
    parsed = _parse_criteria(criteria)
    path = Path(run_dir) / "metrics.parquet"
    aliases = metric_aliases_of(run_dir)
    frame = rename_metrics(_read_metrics(run_dir, path), aliases)
    metrics = current_names([m for m, _, _ in parsed.values()], aliases)  # one note per old name
    parsed = {name: (metric, threshold, direction) for (name, (_, threshold, direction)), metric in zip(parsed.items(), metrics)}
    missing = sorted({m for m, _, _ in parsed.values()} - set(frame["metric"].unique()))
    if missing:
        raise UserError(f"metric(s) {', '.join(missing)} not in {path}")
    report = detect_stages(frame, parsed, sustain=sustain)
    table = Table("stage", "metric", "reached", "mean step", "std", "min", "max", "per seed", header_style="bold")
    for name, (metric, threshold, direction) in parsed.items():
        per_seed = ", ".join(f"{seed}: {'-' if step != step else int(step)}" for seed, step in report.per_seed[name].items())
        fmt = lambda v: "-" if v != v else f"{v:.0f}"  # noqa: E731
        table.add_row(escape(name), escape(f"{metric} {'>=' if direction == 'above' else '<='} {threshold:g}"),
                      f"{report.n_reached[name]}/{report.n_seeds[name]}", fmt(report.mean[name]), fmt(report.std[name]),
                      fmt(report.min[name]), fmt(report.max[name]), per_seed)
    out_console.print(table)
    reached = [name for name in report.order if report.n_reached[name]]  # an order only among stages some seed reached
    unreached = [name for name in parsed if not report.n_reached[name]]
    if reached:
        out_console.print(f"order (by median step): {' -> '.join(reached)}", highlight=False, markup=False)
    if unreached:
        out_console.print(f"no seed reached: {', '.join(unreached)}", highlight=False, markup=False)
    status = _run_status(run_dir)
    if status not in (None, "done"):
        last = int(frame["step"].max()) if len(frame) else 0
        hint = f"; resume it with: stagewise run --resume {run_dir}" if status in ("interrupted", "running") else ""
        print(f"note: {run_dir} is unfinished (status {status}): the table covers steps up to {last} only, and a "
              f"stage not reached there may be reached by a finished run{hint}", file=sys.stderr)


def _run_status(run_dir: Path) -> str | None:
    """The manifest's status of a run folder (``done``, ``interrupted``, ...); None without a readable manifest."""
    from .runs import read_manifest

    try:
        return str(read_manifest(run_dir)["status"])
    except UserError:
        return None


METRIC_COLUMNS = ("step", "seed", "metric", "value")
"""The columns `stages` reads from a run's metrics.parquet (others, e.g. a variant, are ignored)."""

CRITERION_FORMAT = "NAME=METRIC>=THRESHOLD or NAME=METRIC<=THRESHOLD, e.g. 'Q=test.acc.q_only>=0.85'"

def _parse_criteria(criteria: List[str]) -> dict[str, tuple[str, float, str]]:
    """{name: (metric, threshold, "above" | "below")} of the `stages` criteria; one-line
    UserError for a malformed item, an empty name or metric, a non-finite threshold or a
    name used twice."""

    parsed: dict[str, tuple[str, float, str]] = {}
    for item in criteria:
        name, sep, rule = item.partition("=")
        name = name.strip()
        op = ">=" if ">=" in rule else "<=" if "<=" in rule else None
        if not sep or op is None:
            raise UserError(f"criterion {item!r}: expected {CRITERION_FORMAT}")
        metric, _, value = rule.partition(op)
        metric = metric.strip()
        if not name or not metric:
            raise UserError(f"criterion {item!r}: empty {'NAME' if not name else 'METRIC'}; expected {CRITERION_FORMAT}")
        threshold = finite_number(value, f"criterion {item!r}: threshold")
        if name in parsed:
            raise UserError(f"criterion {item!r}: stage name {name!r} is given twice; give each criterion its own NAME")
        parsed[name] = (metric, threshold, "above" if op == ">=" else "below")
    return parsed


def _read_metrics(run_dir: Path, path: Path):
    """The step, seed, metric, value columns of a run's metrics.parquet; one-line UserError
    when it is missing, not parquet, or lacks (or mistypes) one of them."""
    from .runs.stream import read_metrics_file

    if not path.is_file():
        raise UserError(f"{run_dir}: no metrics.parquet (not a finished or failed run directory)")
    return read_metrics_file(path, METRIC_COLUMNS, only_required=True)
