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
* one column per axis, named as the axis key (``train.lr_stage2``); the ``seed`` axis is the
  ``seed`` column, i.e. the row's own seed (the first seed of a run when n_seeds > 1);
* ``claims_over_seeds`` (Int64): how many seeds the run's claims were computed over;
* ``final.NAME``: every numeric scalar of ``summary.per_seed[seed]`` (booleans as 0/1;
  a one-seed run with an empty ``per_seed``, as the LM lab wrote before it recorded its seed's, takes ``summary.final``'s
  means, which are that seed's values); an old metric name is read as its current one (the
  lab's ``metric_aliases``);
* ``stage.NAME``: the step at which the seed enters each stage (NaN: never), from every
  StageReport-shaped dict (``{"order", "stages": {name: {"per_seed": {seed: step}}}}``) in
  ``summary.details``, searched through nested dicts. A report's own key is dropped and the
  keys above it kept: ``details.stage_detection`` gives ``stage.NAME`` (the disentangled,
  NTP and LM labs), ``details.A.B.stage_detection`` gives ``stage.A.B.NAME``; a name taken
  by an earlier report keeps the report's key (``stage.A.B.KEY.NAME``);
* ``claim.ID`` (nullable boolean: True / False / <NA> for not testable): run-level, so every
  seed row of a run carries its run's value; ``claims_all_hold`` (True when every testable
  claim holds, False when one fails, <NA> without a testable claim) and
  ``claims_holding_fraction`` (holding / testable);
* ``claim_value.ID`` (float, NaN without one): the claim's measured value for the row's seed
  (``Claim.per_seed[seed]``), else the run's value (``Claim.value``: the worst seed's, or the
  ensemble's one value).

Figures (:func:`figure_plan`) are drawn with :mod:`stagewise.report.sweepfigs`; an axis is
log-scaled when declared so (``sweep.json``'s ``log_axes``, when present: the sweep's
``logrange`` / ``loguniform`` axes), or when :func:`stagewise.report.plots.use_log_scale`
says so (exactly geometric values, as a ``logrange`` writes them; log-spaced over >= 2
decades). The claims' thresholds come from the summaries' claim records (``Claim.threshold``
/ ``relation``).

Runs that did not finish (failed, diverged, interrupted, running, missing) give one row per
seed (the point's seeds, else the manifest's, else ``config.yaml``'s ``seed`` and
``n_seeds``, else the point's ``seed`` axis value, else one row with seed <NA>) with status
and error set and every metric column NaN / <NA>.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..errors import UserError
from ..labs import get_lab, metric_aliases
from ..report.claims import Summary, read_summary
from ..report.sweepfigs import CLAIM_VALUE, DONE
from ..runs import read_manifest, write_parquet
from ..runs.names import rename_keys
from ..yamlio import load_yaml
from .sweep import index
from .sweepplot import ALL_HOLD, HOLDING, SEED_AXIS, figure_plan, file_name, save_figure

__all__ = ["Collected", "check_report_spec", "collect", "collect_frame", "stage_columns"]

def check_report_spec(report: Any, axes: list[str], lab: str | None = None) -> None:
    """A sweep file's ``report`` section, checked before any run against this table's columns
    (:func:`stagewise.report.sweepfigs.check_report_spec`); with ``lab``, the ``claims`` it
    names must be claims the lab declares (``Lab.claims``; a lab declaring none is not checked)."""
    from ..report.sweepfigs import check_report_spec as check

    claim_ids = [c.id for c in get_lab(lab).claims] if lab is not None else None
    check(report, axes, fixed=(*BASE_COLUMNS, "claims_over_seeds", ALL_HOLD, HOLDING), claim_ids=claim_ids)


TABLE = Path("collect") / "sweep.parquet"
FIGURES = Path("collect") / "figures"
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


def _values(run: _Run, seed: int | None, aliases: Mapping[str, str]) -> dict[str, Any]:
    """The metric columns of one seed of a finished run (empty for others); ``aliases``: the
    lab's old metric names -> current ones (a run summarized before a rename gets the
    columns a new run gets)."""
    summary = run.summary
    if summary is None or seed is None:
        return {}
    row: dict[str, Any] = {"claims_over_seeds": len(summary.seeds)}
    per_seed = summary.per_seed.get(str(seed))
    if per_seed is None and not summary.per_seed and len(summary.seeds) == 1:
        per_seed = {name: stats.mean for name, stats in summary.final.items()}
    for name, value in rename_keys(per_seed or {}, aliases).items():
        if value is None or _scalar(value) is not None:
            row[f"final.{name}"] = float("nan") if value is None else _scalar(value)
    for column, steps in stage_columns(summary.details).items():
        row[column] = steps.get(seed, float("nan"))
    testable = [c.holds for c in summary.claims if c.holds is not None]
    for c in summary.claims:
        row[f"claim.{c.id}"] = c.holds
        value = c.per_seed[str(seed)] if str(seed) in c.per_seed else c.value
        row[f"{CLAIM_VALUE}{c.id}"] = float("nan") if value is None else float(value)
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
    order: base, axes, claims_over_seeds, final.*, stage.*, claim.*, the two claim summaries,
    claim_value.*."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    axis_cols = [a for a in axes if a != SEED_AXIS]
    group = lambda prefix: [n for n in names if n.startswith(prefix)]  # noqa: E731
    order = [*BASE_COLUMNS, *axis_cols, "claims_over_seeds", *group("final."), *group("stage."), *group("claim."),
             ALL_HOLD, HOLDING, *group(CLAIM_VALUE)]
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


def claim_records(runs: list[_Run]) -> dict[str, dict[str, Any]]:
    """{claim id: {threshold, relation, quantity, unit}} from the first finished run that
    declares each claim (undeclared, version-1 claims: threshold and relation None)."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for c in run.summary.claims if run.summary is not None else ():
            if c.id not in out or (out[c.id]["threshold"] is None and c.threshold is not None):
                out[c.id] = {"threshold": c.threshold, "relation": c.relation, "quantity": c.quantity, "unit": c.unit}
    return out


def collect_frame(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any], int, int]:
    """(table, the sweep.json index, distinct runs, runs that did not finish) of a sweep
    folder; the index gains ``claim_records`` (:func:`claim_records`)."""
    folder = Path(folder)
    sweep = index(folder)
    points = sweep.get("points") or []
    axes = list(sweep.get("axes") or dict.fromkeys(k for p in points for k in p.get("values", {})))
    runs: dict[str, _Run] = {}
    rows: list[dict[str, Any]] = []
    aliases = metric_aliases(sweep.get("lab"))
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
                row.update(_values(run, seed, aliases))
            rows.append(row)
    n_failed = sum(r.status != DONE for r in runs.values())
    records = claim_records(list(runs.values()))
    return _typed(rows, axes), {**sweep, "axes": axes, "claim_records": records}, len(runs), n_failed


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
        written.append(save_figure(fig, figures_dir, stem))
    keep = {p.stem for p in written}
    for old in figures_dir.iterdir():
        if old.suffix in (".png", ".pdf") and old.stem not in keep:
            old.unlink()
    return Collected(frame=frame, table=table, figures=written, n_points=len(sweep.get("points") or []), n_runs=n_runs,
                     n_failed=n_failed, warnings=warnings)

