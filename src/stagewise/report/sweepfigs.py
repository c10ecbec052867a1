"""Figures of a sweep's collected table, and the check of a sweep file's ``report`` section.

The table (built by :func:`stagewise.orchestrate.collect.collect`) has one row per point and
seed: ``status`` (``done`` for a finished run), one column per axis, ``final.*`` metrics,
``stage.*`` onset steps (NaN: never reached), ``claim.*`` (nullable boolean). Each function
takes that frame and column names and returns a matplotlib Figure:

* :func:`metric_vs_axis`: mean over seeds (line), min..max band, one dot per seed;
* :func:`phase_diagram`: over two axes, the fraction k/n of finished seeds where a condition
  holds (a boolean column, or ``COLUMN OP NUMBER`` such as ``final.loss<=0.3``);
* :func:`onset_vs_axis`: a stage's onset step vs an axis; seeds that never reach it are
  counted and marked;
* :func:`claim_value_vs_axis`: a claim's measured value (``claim_value.ID``) vs an axis, with
  the declared threshold drawn as a horizontal line.

Rows whose run did not finish (``status != "done"``) are left out of every statistic and
counted in the titles. A numeric axis is drawn on a log scale when it is declared log-spaced
(``log_axes``: the sweep's ``logrange`` / ``loguniform`` axes) or its values are
(:func:`stagewise.report.plots.use_log_scale`); other axes (strings, booleans) are drawn as
evenly spaced categories. Figures follow the conventions of :mod:`stagewise.report.plots`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from ..errors import UserError
from .plots import PANEL_SIZE, figure, label_axes, legend_outside, palette, use_log_scale

DONE = "done"
LINE_FIGURE = (PANEL_SIZE[0] + 2.2, PANEL_SIZE[1] + 0.9)  # inches: one line panel and its outside legend
MAX_GROUPS = 8  # more combinations of the other axes than this: pooled into one line
EMPTY_CELL = "0.85"  # grey of a phase-diagram cell without a finished row
OPERATORS = {"<=": np.less_equal, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
             "<": np.less, ">": np.greater}
_CONDITION = re.compile(r"^\s*(?P<column>.+?)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<rhs>[^<>=!\s]+)\s*$")
TABLE_PREFIXES = ("final.", "stage.", "claim.", "claim_value.")  # the per-run column families of the sweep table
CLAIM_VALUE = "claim_value."  # column prefix of a claim's measured value per seed
REPORT_KEYS = {"metrics": "a list of column names", "phase": "a list of {x, y, value}", "onsets": "a list of {stage, axis}",
               "claims": "a list of claim ids (measured value vs every axis, threshold drawn)"}


# --------------------------------------------------------------------------- conditions
def parse_condition(value: str) -> tuple[str, str | None, float | None]:
    """``"final.loss<=0.3"`` -> ("final.loss", "<=", 0.3); a bare column name -> (name, None,
    None). The right side is a number or true/false (1/0). ValueError on anything else."""
    match = _CONDITION.match(value)
    if match is None:
        if not value.strip() or any(c in value for c in "<>=!"):
            raise ValueError(f"{value!r}: expected a column name or COLUMN OP NUMBER (OP one of {', '.join(OPERATORS)})")
        return value.strip(), None, None
    if any(c in match["column"] for c in "<>=!"):
        raise ValueError(f"{value!r}: the column {match['column']!r} holds an operator character; "
                         f"operators: {', '.join(OPERATORS)} (e.g. final.loss<=0.3)")
    rhs = match["rhs"].lower()
    try:
        number = {"true": 1.0, "false": 0.0}[rhs] if rhs in ("true", "false") else float(rhs)
    except ValueError:
        raise ValueError(f"{value!r}: the right side {match['rhs']!r} is not a number (or true/false)") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r}: the right side {match['rhs']!r} is not finite; give a finite number")
    return match["column"], match["op"], number


def condition(frame: pd.DataFrame, value: str) -> pd.Series:
    """Nullable boolean Series: where ``value`` holds (see :func:`parse_condition`). A bare
    column must be boolean (or numeric: != 0); <NA> where the column is NA / NaN."""
    column, op, number = parse_condition(value)
    if column not in frame.columns:
        raise KeyError(f"{column!r} is not a column of the table")
    data = frame[column]
    if op is None:
        if pd.api.types.is_bool_dtype(data.dtype):
            return data.astype("boolean")
        if not pd.api.types.is_numeric_dtype(data.dtype):
            raise ValueError(f"{column!r} is neither boolean nor numeric; write a condition such as {column}>=0.5")
        op, number = "!=", 0.0
    if number is None:  # parse_condition gives a number with every operator
        raise ValueError(f"{value!r}: an operator without a number")
    values = data.astype("Float64").to_numpy(float, na_value=np.nan)  # booleans -> 0/1, NA -> NaN
    known = np.isfinite(values)
    out = pd.array(OPERATORS[op](np.where(known, values, 0.0), number), dtype="boolean")
    out[~known] = pd.NA
    return pd.Series(out, index=frame.index)


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as float (booleans 0/1, NA -> NaN)."""
    data = frame[column]
    if not (pd.api.types.is_numeric_dtype(data.dtype) or pd.api.types.is_bool_dtype(data.dtype)):
        raise ValueError(f"{column!r} is not numeric (dtype {data.dtype})")
    return data.astype("Float64").to_numpy(float, na_value=np.nan)


# ---------------------------------------------------------------------------- axes
def _is_numeric_axis(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def axis_levels(series: pd.Series) -> list[Any]:
    """The distinct values of an axis column in plotting order (numbers ascending, others
    in the order of their text)."""
    values = [v for v in pd.unique(series) if not (isinstance(v, float) and math.isnan(v)) and v is not pd.NA]
    if _is_numeric_axis(series):
        return sorted(values, key=float)
    return sorted(values, key=str)


def _at_level(series: pd.Series, level: Any) -> np.ndarray:
    """Rows of an axis column equal to one of its levels (numbers compared as numbers)."""
    if _is_numeric_axis(series):
        return (series.astype("Float64").to_numpy(float, na_value=np.nan) == float(level))
    return (series.astype(str) == str(level)).to_numpy()


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (float, np.floating)) else str(value)


def _positions(series: pd.Series, declared_log: bool = False) -> tuple[np.ndarray, list[Any], bool]:
    """(x of every row, levels, log scale): numeric axes keep their values (log scale when
    ``declared_log`` or :func:`~stagewise.report.plots.use_log_scale` says so), others are
    placed at 0..n-1 in the order of :func:`axis_levels`."""
    levels = axis_levels(series)
    if _is_numeric_axis(series):
        x = series.astype("Float64").to_numpy(float, na_value=np.nan)
        lv = np.asarray(levels, float)
        log = bool(len(lv) and np.all(lv > 0) and use_log_scale(lv, declared_log))
        return x, levels, log
    index = {str(v): i for i, v in enumerate(levels)}
    return np.array([index.get(str(v), np.nan) for v in series], float), levels, False


def _groups(frame: pd.DataFrame, by: list[str] | None) -> tuple[list[tuple[str, pd.Index]], bool]:
    """([(label, row index)], pooled): rows split by the combinations of ``by``; pooled into
    one group when there are more than MAX_GROUPS."""
    by = [c for c in (by or []) if c in frame.columns]
    if not by or frame.empty:
        return [("", frame.index)], False
    keys = frame[by].astype(str).agg(", ".join, axis=1) if len(by) > 1 else frame[by[0]].map(_fmt)
    labels = list(dict.fromkeys(keys))
    if len(labels) > MAX_GROUPS:
        return [("", frame.index)], True
    name = ", ".join(by)
    return [(f"{name}={label}", frame.index[(keys == label).to_numpy()]) for label in labels], False


def _finish_axis(ax, axis: str, levels: list[Any], log: bool, numeric: bool) -> None:
    ax.set_xlabel(axis)
    if log:
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(range(len(levels)), [_fmt(v) for v in levels])
    elif len(levels) <= 8:
        ax.set_xticks([float(v) for v in levels], [_fmt(v) for v in levels])
        ax.minorticks_off()


def _spread(ax, x: np.ndarray, y: np.ndarray, color: str, label: str) -> None:
    """Mean line, min..max band and one dot per finite value, at every distinct x (one
    series: ``gid`` = ``label``)."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if not x.size:
        return
    xs = np.unique(x)  # (X,) ascending
    stats = np.array([[y[x == v].mean(), y[x == v].min(), y[x == v].max()] for v in xs])  # (X, 3) mean, min, max
    gid = label or "values"
    ax.scatter(x, y, s=12, color=color, alpha=0.45, lw=0, zorder=3, gid=gid)
    ax.fill_between(xs, stats[:, 1], stats[:, 2], color=color, alpha=0.15, lw=0, gid=gid)
    ax.plot(xs, stats[:, 0], color=color, marker="o", ms=3, lw=1.6, label=label or "mean over seeds", zorder=4, gid=gid)


def _title_counts(n_failed: int, n_missing: int, missing_what: str) -> str:
    parts = [f"{n_failed} failed row{'s' * (n_failed != 1)} excluded"] if n_failed else []
    if n_missing:
        parts.append(f"{n_missing} {missing_what}")
    return "; ".join(parts)


def _require(frame: pd.DataFrame, *columns: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise KeyError(f"not columns of the table: {', '.join(missing)}")


# --------------------------------------------------------------------------- figures
def metric_vs_axis(frame: pd.DataFrame, metric: str, axis: str, *, by: list[str] | None = None,
                   log_axes: Collection[str] = ()):
    """``metric`` against ``axis``: per axis value the mean over the finished seeds (line),
    the min..max band and every seed (dots); one line per combination of the ``by`` columns
    (pooled when there are more than MAX_GROUPS). The title counts failed rows and finished
    rows without a value."""
    return _line_plot(frame, metric, axis, by, ylabel=f"{metric} (as logged)", title=f"{metric} vs {axis}",
                      missing_note="finished without a value", log_axes=log_axes)


def claim_value_vs_axis(frame: pd.DataFrame, claim_id: str, axis: str, *, threshold: float | None,
                        relation: str | None, quantity: str = "", unit: str = "", by: list[str] | None = None,
                        log_axes: Collection[str] = ()):
    """A claim's measured value (column ``claim_value.ID``: the seed's value, else the run's)
    against ``axis`` as :func:`metric_vs_axis` draws a metric, with the declared threshold as
    a horizontal line (the claim holds where ``value relation threshold``)."""
    column = CLAIM_VALUE + claim_id
    ylabel = (quantity or f"value of claim {claim_id}") + (f" ({unit})" if unit else "")
    rule = f"holds where value {relation} {threshold:g}" if threshold is not None and relation else "no declared threshold"
    fig = _line_plot(frame, column, axis, by, ylabel=ylabel, title=f"claim {claim_id} vs {axis} ({rule})",
                     missing_note="finished without a value", log_axes=log_axes)
    if threshold is not None and relation:
        ax = fig.axes[0]
        ax.axhline(threshold, color="k", ls="--", lw=1.0, label=f"threshold: {relation} {threshold:g}")
        legend_outside(ax)
    return fig


def _line_plot(frame: pd.DataFrame, column: str, axis: str, by: list[str] | None, *, ylabel: str, title: str,
               missing_note: str, mark_missing: bool = False, log_axes: Collection[str] = ()):
    """The figure of :func:`metric_vs_axis`, :func:`onset_vs_axis` and :func:`claim_value_vs_axis`:
    ``column`` against ``axis`` over the finished rows, grouped by ``by``; ``mark_missing``
    marks the finished rows without a value (a stage never reached) at the top, with their
    count per axis value; legend right of the axes."""
    frame = frame.reset_index(drop=True)
    _require(frame, column, axis, "status")
    done = frame["status"].astype(str).to_numpy() == DONE
    x, levels, log = _positions(frame[axis], axis in log_axes)
    y = _numeric(frame, column)
    missing = done & ~np.isfinite(y)
    fig, axs = figure(1, 1, LINE_FIGURE, layout="constrained")
    ax = axs[0, 0]
    groups, pooled = _groups(frame[done], by)
    for (label, rows), color in zip(groups, palette(len(groups) + 1)[1:] if mark_missing else palette(len(groups))):
        pos = frame.index.get_indexer(rows)
        _spread(ax, x[pos], y[pos], color, label)
    if mark_missing:
        marker = ax.get_xaxis_transform()  # x in data, y in axes fraction
        for i, xv in enumerate(np.unique(x[missing & np.isfinite(x)])):
            count = int((missing & (x == xv)).sum())
            ax.scatter([xv], [0.97], marker="v", color=palette(1)[0], s=28, transform=marker, clip_on=False, zorder=5,
                       gid="never", label=None if i else "seeds never reaching it")
            ax.text(xv, 0.90, f"{count} never", transform=marker, ha="center", va="top", fontsize=7,
                    color=palette(1)[0])
    _finish_axis(ax, axis, levels, log, _is_numeric_axis(frame[axis]))
    ax.set_ylabel(ylabel)
    note = _title_counts(int((~done).sum()), int(missing.sum()), missing_note)
    pooled_note = f"; pooled over {', '.join(by or [])}" if pooled else ""
    ax.set_title(title + (f"\n{note}" if note else "") + pooled_note, fontsize=9)
    legend_outside(ax)
    return fig


def phase_cells(frame: pd.DataFrame, x: str, y: str, value: str) -> pd.DataFrame:
    """One row per (x, y) level pair: ``k`` finished rows where ``value`` holds, ``n``
    finished rows where it is known (not NA), ``failed`` rows, ``fraction`` k / n (NaN when
    n = 0) and ``label``: ``k/n`` (with the failed count when some failed), or ``failed``
    (only failed rows), ``n/a`` (finished but never known) or ``none`` (no row at all)."""
    frame = frame.reset_index(drop=True)
    _require(frame, x, y, "status")
    holds = condition(frame, value)
    is_true = holds.fillna(False).to_numpy(bool)
    is_known = holds.notna().to_numpy()
    done = frame["status"].astype(str).to_numpy() == DONE
    out = []
    for yv in axis_levels(frame[y]):
        for xv in axis_levels(frame[x]):
            at = _at_level(frame[x], xv) & _at_level(frame[y], yv)
            finished = at & done
            known = finished & is_known
            k, n, failed = int((known & is_true).sum()), int(known.sum()), int((at & ~done).sum())
            if n:
                label = f"{k}/{n}" + (f"\n{failed} failed" if failed else "")
            else:
                label = "failed" if failed else "n/a" if finished.any() else "none"
            out.append({"x": xv, "y": yv, "k": k, "n": n, "failed": failed, "fraction": k / n if n else math.nan,
                        "label": label})
    return pd.DataFrame(out, columns=["x", "y", "k", "n", "failed", "fraction", "label"])


def phase_diagram(frame: pd.DataFrame, x: str, y: str, value: str):
    """Heat map over the levels of ``x`` (columns) and ``y`` (rows) of the fraction of
    finished seeds where ``value`` holds (:func:`condition`), each cell annotated with k/n
    (:func:`phase_cells`); cells without a known finished row are grey and hatched and
    labelled failed / n/a / none."""
    cells = phase_cells(frame, x, y, value)
    xs, ys = axis_levels(frame[x]), axis_levels(frame[y])
    grid = cells["fraction"].to_numpy(float).reshape(len(ys), len(xs)) if len(cells) else np.zeros((0, 0))  # (Y, X)
    fig, axs = figure(1, 1, (1.6 + max(0.9 * len(xs), PANEL_SIZE[0]), 1.2 + 0.7 * max(len(ys), 2)), layout="constrained")
    ax = axs[0, 0]
    ax.grid(False)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0.0, vmax=1.0, origin="lower",
                      aspect="auto", extent=(-0.5, len(xs) - 0.5, -0.5, len(ys) - 0.5))
    for i, cell in enumerate(cells.itertuples()):
        col, row = i % len(xs), i // len(xs)
        if cell.n == 0:
            ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, facecolor=EMPTY_CELL, hatch="//",
                                   edgecolor="0.6", lw=0))
            color = "0.25"
        else:
            color = "white" if cell.fraction < 0.6 else "black"
        ax.text(col, row, cell.label, ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys])
    label_axes(ax, x, y)
    failed = int(cells["failed"].sum()) if len(cells) else 0
    ax.set_title(f"fraction of seeds where {value} holds" + (f"\n{failed} failed rows" if failed else ""), fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03, label="fraction of seeds (k/n)")
    return fig


def onset_vs_axis(frame: pd.DataFrame, stage: str, axis: str, *, by: list[str] | None = None,
                  log_axes: Collection[str] = (), never_reached: Collection[str] = ()):
    """The onset step in ``stage`` (a ``stage.*`` column, NaN = never reached) against
    ``axis``: mean over the finished seeds that reach it, min..max band, every seed as a dot;
    seeds that never reach it are marked with a triangle at the top with their count per axis
    value, and counted in the title; ``never_reached``: the stages no run reached (not drawn,
    named in the title)."""
    never = f"\nnever reached by any run: {', '.join(never_reached)}" if never_reached else ""
    return _line_plot(frame, stage, axis, by, ylabel=f"onset of {stage.removeprefix('stage.')} (training step)",
                      title=f"onset of {stage} vs {axis}{never}", log_axes=log_axes,
                      missing_note="finished rows never reach it (marked at the top)", mark_missing=True)


# ---------------------------------------------------------------------- report spec
def check_report_spec(report: Any, axes: list[str], fixed: tuple[str, ...] = (),
                      claim_ids: Collection[str] | None = None) -> None:
    """Check a sweep file's ``report`` section before any run: keys ``metrics`` (list of
    column names), ``phase`` (list of {x, y, value}; x, y axes of the sweep, value a column or
    COLUMN OP NUMBER, the column an axis, one of ``fixed`` or a ``final.``/``stage.``/
    ``claim.``/``claim_value.`` column), ``onsets`` (list of {stage, axis}) and ``claims``
    (list of claim ids; with ``claim_ids``, the lab's declared ids, each must be one of them
    or a case of one, ``ID_CASE``); one-line UserError otherwise.
    Whether the named metrics and stages exist is known only after the runs (collect warns)."""
    if report is None:
        return
    if not isinstance(report, dict):
        raise UserError(f"sweep report: expected a mapping with {', '.join(REPORT_KEYS)}, got {type(report).__name__}")
    unknown = sorted(set(report) - set(REPORT_KEYS))
    if unknown:
        allowed = "; ".join(f"{k} ({v})" for k, v in REPORT_KEYS.items())
        raise UserError(f"sweep report: unknown key {unknown[0]!r}; allowed: {allowed}")
    known_axes = ", ".join(axes) or "none"
    metrics = report.get("metrics", [])
    if not isinstance(metrics, list) or not all(isinstance(m, str) and m.strip() for m in metrics):
        raise UserError(f"sweep report: metrics={metrics!r}: expected {REPORT_KEYS['metrics']}")
    claims = report.get("claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, str) and c.strip() for c in claims):
        raise UserError(f"sweep report: claims={claims!r}: expected {REPORT_KEYS['claims']}")
    declared = sorted(claim_ids or ())
    for cid in claims if declared else ():
        if not any(cid == d or cid.startswith(d + "_") for d in declared):
            raise UserError(f"sweep report: claims: {cid!r} is not a claim of the lab; claims: {', '.join(declared)}")
    for key, fields in (("phase", ("x", "y", "value")), ("onsets", ("stage", "axis"))):
        items = report.get(key, [])
        if not isinstance(items, list):
            raise UserError(f"sweep report: {key}={items!r}: expected {REPORT_KEYS[key]}")
        for i, item in enumerate(items):
            where = f"sweep report: {key}[{i}]"
            if not isinstance(item, dict) or set(item) != set(fields):
                raise UserError(f"{where}={item!r}: expected exactly the keys {', '.join(fields)}")
            for field in fields:
                if not isinstance(item[field], str) or not item[field].strip():
                    raise UserError(f"{where}.{field}={item[field]!r}: expected a non-empty string")
            for field in ("x", "y", "axis"):
                if field in item and item[field] not in axes:
                    raise UserError(f"{where}.{field}={item[field]!r}: not an axis of the sweep; axes: {known_axes}")
            if key == "phase":
                if item["x"] == item["y"]:
                    raise UserError(f"{where}: x and y are both {item['x']!r}; give two different axes")
                try:
                    column = parse_condition(item["value"])[0]
                except ValueError as err:
                    raise UserError(f"{where}.value={err}") from None
                if column not in axes and column not in fixed and not column.startswith(TABLE_PREFIXES):
                    raise UserError(f"{where}.value={item['value']!r}: {column!r} is not a column of the sweep table; "
                                    f"use an axis ({known_axes}), {', '.join(p + 'NAME' for p in TABLE_PREFIXES)}"
                                    + (f" or one of {', '.join(fixed)}" if fixed else ""))
