"""``sweep collect``: one Parquet table of a sweep folder, and its figures.

Reads ``OUT/sweep.json`` (lab, axes, report spec, points: label, values, hash, run_dir,
seeds) and every run folder; writes ``OUT/collect/sweep.parquet`` (atomic) and
``OUT/collect/figures/NAME.png`` + ``NAME.pdf``. Collecting again gives the same files
(figures no longer asked for are removed).

One row per (point, seed): a point's seeds are its ``seeds`` in ``sweep.json`` (several
points folded into one batched run each get their own seeds of it), else the run's. Columns:

* ``point`` (label), ``hash`` (the point's config hash), ``run_dir`` (relative to OUT),
  ``status`` (the run's manifest status; ``missing`` without a readable manifest), ``error``
  (the manifest's error, or why a finished run has no values; else <NA>), ``seed`` (Int64);
* one column per axis, named as the axis key (``train.eta``); the ``seed`` axis is the
  ``seed`` column, i.e. the row's own seed (the first seed of a run when n_seeds > 1);
* ``claims_over_seeds`` (Int64): how many seeds the run's claims were computed over;
* ``final.NAME``: every numeric scalar of ``summary.per_seed[seed]`` (booleans as 0/1;
  a one-seed run with an empty ``per_seed``, as the LM lab writes, takes ``summary.final``'s
  means, which are that seed's values);
* ``stage.NAME``: the step at which the seed enters each stage (NaN: never), from every
  StageReport-shaped dict (``{"order", "stages": {name: {"per_seed": {seed: step}}}}``) in
  ``summary.details``, searched through nested dicts. A report's own key is dropped and the
  keys above it kept: ``details.stage_detection`` gives ``stage.NAME`` (the disentangled,
  NTP and LM labs), ``details.A.B.stage_detection`` gives ``stage.A.B.NAME``; a name taken
  by an earlier report keeps the report's key (``stage.A.B.KEY.NAME``);
* ``claim.ID`` (nullable boolean: True / False / <NA> for not testable): run-level, so every
  seed row of a run carries its run's value; ``claims_all_hold`` (True when every testable
  claim holds, False when one fails, <NA> without a testable claim) and
  ``claims_holding_fraction`` (holding / testable).

Runs that did not finish (failed, diverged, interrupted, running, missing) give one row per
seed (the point's seeds, else the manifest's, else ``config.yaml``'s ``seed`` and
``n_seeds``, else the point's ``seed`` axis value, else one row with seed <NA>) with status
and error set and every metric column NaN / <NA>.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import UserError
from ..labs import get_lab
from ..report.claims import Summary, read_summary
from ..report.sweepfigs import DONE, metric_vs_axis, onset_vs_axis, parse_condition, phase_diagram
from ..runs import atomic_write_bytes, read_manifest, write_parquet
from ..yamlio import load_yaml
from .sweep import index

__all__ = ["Collected", "check_report_spec", "collect", "collect_frame", "stage_columns"]

def check_report_spec(report: Any, axes: list[str]) -> None:
    """A sweep file's ``report`` section, checked before any run against this table's columns
    (:func:`stagewise.report.sweepfigs.check_report_spec`)."""
    from ..report.sweepfigs import check_report_spec as check

    check(report, axes, fixed=(*BASE_COLUMNS, "claims_over_seeds", ALL_HOLD, HOLDING))


TABLE = Path("collect") / "sweep.parquet"
FIGURES = Path("collect") / "figures"
DPI = 150
SEED_AXIS = "seed"
MAX_DEFAULT_METRICS = 4
MAX_DEFAULT_ONSETS = 4
ALL_HOLD = "claims_all_hold"


def _key_metrics(lab: Any) -> tuple[str, ...]:
    """The lab's default sweep metrics (``Lab.key_metrics``); none for an unknown lab."""
    try:
        return get_lab(str(lab)).key_metrics
    except UserError:
        return ()

HOLDING = "claims_holding_fraction"
BASE_COLUMNS = ("point", "hash", "run_dir", "status", "error", "seed")


@dataclass(frozen=True, eq=False)
class Collected:
    """The collected table (also at ``table``), its figures (PNG paths; a PDF beside each),
    how many points, distinct runs and runs that did not finish, and warnings (report-spec
    names that are not columns, figures that could not be drawn)."""

    frame: pd.DataFrame
    table: Path
    figures: list[Path]
    n_points: int
    n_runs: int
    n_failed: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Run:
    status: str
    error: str | None
    seeds: list[int] | None
    summary: Summary | None


# ----------------------------------------------------------------------------- runs
def _read_run(folder: Path, run_dir: str) -> _Run:
    path = folder / run_dir
    try:
        manifest = read_manifest(path)
    except UserError as err:
        return _Run("missing", err.messages[0], _config_seeds(path), None)
    status, error = str(manifest["status"]), manifest.get("error")
    seeds = [int(s) for s in manifest["seeds"]] if isinstance(manifest.get("seeds"), list) else _config_seeds(path)
    if status != DONE:
        return _Run(status, None if error is None else str(error), seeds, None)
    if not (path / "summary.json").is_file():
        return _Run(status, "done but no summary.json", seeds, None)
    try:
        summary = read_summary(path / "summary.json")
    except UserError as err:
        return _Run(status, err.messages[0], seeds, None)
    return _Run(status, None, [int(s) for s in summary.seeds], summary)


def _config_seeds(path: Path) -> list[int] | None:
    """seed .. seed + n_seeds - 1 from a run's config.yaml; None when unreadable."""
    try:
        config = load_yaml(path / "config.yaml")
        return [int(config["seed"]) + i for i in range(int(config.get("n_seeds", 1)))]
    except (UserError, KeyError, TypeError, ValueError, AttributeError):  # missing or damaged: seeds unknown
        return None


def stage_columns(details: dict[str, Any]) -> dict[str, dict[int, float]]:
    """{column: {seed: step or NaN}} of every StageReport-shaped dict in ``details`` (naming:
    module docstring), in the order they are found (depth first, keys in order)."""
    out: dict[str, dict[int, float]] = {}

    def is_report(node: Any) -> bool:
        return (isinstance(node, dict) and isinstance(node.get("order"), list) and isinstance(node.get("stages"), dict)
                and all(isinstance(s, dict) and isinstance(s.get("per_seed"), dict) for s in node["stages"].values()))

    def visit(node: Any, path: list[str]) -> None:
        if is_report(node):
            for name, stage in node["stages"].items():
                column = "stage." + ".".join([*path[:-1], str(name)])
                if column in out:
                    column = "stage." + ".".join([*path, str(name)])
                out[column] = {int(s): (float("nan") if v is None else float(v)) for s, v in stage["per_seed"].items()}
            return
        if isinstance(node, dict):
            for key, child in node.items():
                visit(child, [*path, str(key)])

    visit(details, [])
    return out


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _values(run: _Run, seed: int | None) -> dict[str, Any]:
    """The metric columns of one seed of a finished run (empty for others)."""
    summary = run.summary
    if summary is None or seed is None:
        return {}
    row: dict[str, Any] = {"claims_over_seeds": len(summary.seeds)}
    per_seed = summary.per_seed.get(str(seed))
    if per_seed is None and not summary.per_seed and len(summary.seeds) == 1:
        per_seed = {name: stats.mean for name, stats in summary.final.items()}
    for name, value in (per_seed or {}).items():
        if value is None or _scalar(value) is not None:
            row[f"final.{name}"] = float("nan") if value is None else _scalar(value)
    for column, steps in stage_columns(summary.details).items():
        row[column] = steps.get(seed, float("nan"))
    testable = [c.holds for c in summary.claims if c.holds is not None]
    for c in summary.claims:
        row[f"claim.{c.id}"] = c.holds
    row[ALL_HOLD] = all(testable) if testable else None
    row[HOLDING] = sum(testable) / len(testable) if testable else float("nan")
    return row


# ---------------------------------------------------------------------------- table
def _seeds_of(point: dict[str, Any], run: _Run) -> list[int | None]:
    if isinstance(point.get("seeds"), list) and point["seeds"]:
        return [int(s) for s in point["seeds"]]
    if run.seeds:
        return list(run.seeds)
    seed = point.get("values", {}).get(SEED_AXIS)
    return [int(seed)] if isinstance(seed, int) and not isinstance(seed, bool) else [None]


def _axis_column(values: list[Any]) -> pd.Series:
    """An axis column Parquet can hold: numbers as float64 (Int64 when all are integers),
    booleans, strings; anything else (lists, mixed kinds) as its JSON text."""
    if all(isinstance(v, bool) for v in values):
        return pd.Series(values, dtype="boolean")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return pd.Series(values, dtype="Int64")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return pd.Series(values, dtype="float64")
    if all(isinstance(v, str) for v in values):
        return pd.Series(values, dtype="string")
    return pd.Series([json.dumps(v, sort_keys=True) for v in values], dtype="string")


def _typed(rows: list[dict[str, Any]], axes: list[str]) -> pd.DataFrame:
    """The rows as a frame with stable dtypes (see the module docstring), columns in the
    order: base, axes, claims_over_seeds, final.*, stage.*, claim.*, the two claim summaries."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    axis_cols = [a for a in axes if a != SEED_AXIS]
    group = lambda prefix: [n for n in names if n.startswith(prefix)]  # noqa: E731
    order = [*BASE_COLUMNS, *axis_cols, "claims_over_seeds", *group("final."), *group("stage."), *group("claim."),
             ALL_HOLD, HOLDING]
    data: dict[str, pd.Series] = {}
    for name in order:
        values = [r.get(name) for r in rows]
        if name in ("point", "hash", "run_dir", "status", "error"):
            data[name] = pd.Series(values, dtype="string")
        elif name in ("seed", "claims_over_seeds"):
            data[name] = pd.Series(pd.array(values, dtype="Int64"))
        elif name in axis_cols:
            data[name] = _axis_column(values) if rows else pd.Series([], dtype="float64")
        elif name.startswith("claim.") or name == ALL_HOLD:
            data[name] = pd.Series(pd.array(values, dtype="boolean"))
        else:
            data[name] = pd.Series([float("nan") if v is None else float(v) for v in values], dtype="float64")
    return pd.DataFrame(data, columns=order)


def collect_frame(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any], int, int]:
    """(table, the sweep.json index, distinct runs, runs that did not finish) of a sweep folder."""
    folder = Path(folder)
    sweep = index(folder)
    points = sweep.get("points") or []
    axes = list(sweep.get("axes") or dict.fromkeys(k for p in points for k in p.get("values", {})))
    runs: dict[str, _Run] = {}
    rows: list[dict[str, Any]] = []
    for point in points:
        run_dir = str(point["run_dir"])
        if run_dir not in runs:
            runs[run_dir] = _read_run(folder, run_dir)
        run = runs[run_dir]
        for seed in _seeds_of(point, run):
            error = run.error
            if run.summary is not None and seed not in run.summary.seeds:
                error = f"seed {seed} is not one of the run's seeds {run.summary.seeds}"
            row = {"point": point.get("label"), "hash": point.get("hash"), "run_dir": run_dir, "status": run.status,
                   "error": error, "seed": seed}
            row.update({k: v for k, v in point.get("values", {}).items() if k != SEED_AXIS})
            if error is None:
                row.update(_values(run, seed))
            rows.append(row)
    n_failed = sum(r.status != DONE for r in runs.values())
    return _typed(rows, axes), {**sweep, "axes": axes}, len(runs), n_failed


# -------------------------------------------------------------------------- figures
def _resolve(frame: pd.DataFrame, name: str, prefixes: tuple[str, ...] = ("", "final.", "claim.", "stage.")) -> str | None:
    for prefix in prefixes:
        if prefix + name in frame.columns:
            return prefix + name
    return None


def _resolve_value(frame: pd.DataFrame, value: str) -> str | None:
    """A phase value with its column resolved (``loss<=0.3`` -> ``final.loss<=0.3``)."""
    column, op, number = parse_condition(value)
    found = _resolve(frame, column)
    if found is None or op is None:
        return found
    return f"{found}{op}{number:g}"


def _has_values(frame: pd.DataFrame, column: str) -> bool:
    return bool(frame[column].notna().any())


def _determines(frame: pd.DataFrame, a: str, b: str) -> bool:
    """Whether every value of axis ``a`` comes with a single value of axis ``b`` (zipped axes)."""
    if frame.empty:
        return False
    pairs = frame[[a, b]].astype(str).drop_duplicates()
    return bool(pairs.groupby(a)[b].nunique().max() <= 1)


def figure_plan(frame: pd.DataFrame, sweep: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    """([(figure name, zero-argument function returning the Figure)], warnings) from the
    sweep's ``report`` section; each kind it leaves out gets its default. Figures are drawn
    against every non-seed axis (the seed axis when it is the only one), except an axis
    zipped one-to-one with an earlier one; lines split by the other such axes. Defaults: for
    every such axis up to MAX_DEFAULT_METRICS key metrics of the
    lab and the fraction of claims holding; with two or more non-seed axes a phase diagram of
    the first two over ``claims_all_hold``; onsets of up to MAX_DEFAULT_ONSETS stages vs the
    first axis."""
    report, axes, warnings = sweep.get("report") or {}, sweep["axes"], []
    varying = [a for a in axes if a != SEED_AXIS and a in frame]
    plot_axes: list[str] = []
    for a in varying:  # of axes zipped one-to-one (d with L and lambda) only the first is drawn
        if not any(_determines(frame, p, a) and _determines(frame, a, p) for p in plot_axes):
            plot_axes.append(a)
    plot_axes = plot_axes or [a for a in axes if a == SEED_AXIS]
    others = lambda axis: [a for a in plot_axes if a != axis and not _determines(frame, axis, a)]  # noqa: E731
    if "metrics" in report:
        metrics = []
        for name in report["metrics"]:
            found = _resolve(frame, name)
            if found is None:
                warnings.append(f"report metrics: {name!r} is not a column of the table "
                                f"(e.g. {', '.join(c for c in frame.columns if c.startswith('final.'))[:200] or 'no final.* columns'})")
            else:
                metrics.append(found)
    else:
        finals = [c for c in frame.columns if c.startswith("final.") and _has_values(frame, c)]
        preferred = [f"final.{m}" for m in _key_metrics(sweep.get("lab")) if f"final.{m}" in finals]
        metrics = (preferred or finals)[:MAX_DEFAULT_METRICS] + ([HOLDING] if _has_values(frame, HOLDING) else [])
    plan: list[tuple[str, Any]] = []
    for axis in plot_axes:
        for metric in metrics:
            plan.append((f"{metric}_vs_{axis}", lambda m=metric, a=axis: metric_vs_axis(frame, m, a, by=others(a))))
    if "phase" in report:
        phases = []
        for item in report["phase"]:
            value = _resolve_value(frame, item["value"])
            if value is None:
                warnings.append(f"report phase: value {item['value']!r} names no column of the table")
            else:
                phases.append((item["x"], item["y"], value))
    else:
        phases = [(plot_axes[0], plot_axes[1], ALL_HOLD)] if len(plot_axes) >= 2 and ALL_HOLD in frame else []
    for x, y, value in phases:
        plan.append((f"phase_{value}_over_{x}_x_{y}", lambda x=x, y=y, v=value: phase_diagram(frame, x, y, v)))
    if "onsets" in report:
        onsets = []
        for item in report["onsets"]:
            stage = _resolve(frame, item["stage"], ("", "stage."))
            if stage is None:
                warnings.append(f"report onsets: stage {item['stage']!r} is not a column of the table "
                                f"(stages: {', '.join(c for c in frame.columns if c.startswith('stage.')) or 'none'})")
            else:
                onsets.append((stage, item["axis"]))
    else:
        stages = [c for c in frame.columns if c.startswith("stage.") and _has_values(frame, c)][:MAX_DEFAULT_ONSETS]
        onsets = [(s, plot_axes[0]) for s in stages] if plot_axes else []
    for stage, axis in onsets:
        plan.append((f"onset_{stage}_vs_{axis}", lambda s=stage, a=axis: onset_vs_axis(frame, s, a, by=others(a))))
    return plan, warnings


_OPS = {"<=": "_le_", ">=": "_ge_", "==": "_eq_", "!=": "_ne_", "<": "_lt_", ">": "_gt_"}


def file_name(name: str) -> str:
    """A figure name as a file stem: operators spelled out, anything but [A-Za-z0-9._-] as '_'."""
    for op, word in _OPS.items():
        name = name.replace(op, word)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "figure"


def _save(fig, folder: Path, stem: str) -> Path:
    import matplotlib.pyplot as plt

    try:
        for ext in ("png", "pdf"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=DPI, bbox_inches="tight")
            atomic_write_bytes(folder / f"{stem}.{ext}", buf.getvalue())
    finally:
        plt.close(fig)
    return folder / f"{stem}.png"


# --------------------------------------------------------------------------- collect
def collect(folder: str | Path) -> Collected:
    """Write ``OUT/collect/sweep.parquet`` and ``OUT/collect/figures/`` for the sweep folder
    ``folder`` (see the module docstring); one-line UserError when it is not a sweep folder."""
    folder = Path(folder)
    frame, sweep, n_runs, n_failed = collect_frame(folder)
    table = folder / TABLE
    write_parquet(frame, table)
    plan, warnings = figure_plan(frame, sweep)
    figures_dir = folder / FIGURES
    figures_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, draw in plan:
        stem = file_name(name)
        while any(p.stem == stem for p in written):
            stem += "_"
        try:
            fig = draw()
        except (KeyError, ValueError) as err:
            warnings.append(f"figure {name} not drawn: {err}")
            continue
        written.append(_save(fig, figures_dir, stem))
    keep = {p.stem for p in written}
    for old in figures_dir.iterdir():
        if old.suffix in (".png", ".pdf") and old.stem not in keep:
            old.unlink()
    return Collected(frame=frame, table=table, figures=written, n_points=len(sweep.get("points") or []), n_runs=n_runs,
                     n_failed=n_failed, warnings=warnings)

