"""Figures of the acquisition study (issue 44; the definitions in :mod:`.acquisition`), with the
conventions of :mod:`stagewise.report.plots` (labelled axes, legends outside the data, distinct
colours, PNG + PDF written by :func:`~stagewise.report.plots.save`).

* :func:`acquisition_heatmap`: rows = the testable paradigms ordered by their median acquisition
  step over seeds (never-acquired at the bottom, learned heuristics last and marked), columns =
  the record steps (log-spaced, so equal-width columns are a log axis), cell = the median over
  seeds of accuracy - chance (a diverging colormap centred at 0); a strip of each paradigm's
  field on the left, its legend below.
* :func:`category_curves`: the content-word class_correct and exact shares against the step
  (symlog: step 0 is the first record), the median over seeds with the seeds' min-max band, the
  shuffled-word corpus dashed; each seed's onset as a short tick, the median onset as a line.

Each function takes the tables / frames and a path (``name.png``; ``name.pdf`` is written beside
it) and returns the path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import CenteredNorm, to_rgb
from matplotlib.patches import Patch

from ...report.plots import PALETTE, STEP_LABEL, figure, label_axes, legend_outside, palette, save
from .acquisition import (CONTENT_CLASS, CONTENT_EXACT, curve, median_step, onset, paradigm_metric, testable_split,
                          wide)

ROW_IN = 0.17
"""Height of one heatmap row (inches): 23 rows ~ 5.4 in, 70 rows ~ 13.4 in, labels at 6.5 pt stay apart."""
MAX_STEP_LABELS = 16
"""At most this many labelled columns (every k-th record beyond)."""
LEGEND_DROP_IN = 0.7
"""The field legend's top, this far below the heatmap (inches: under the rotated step labels and the x label)."""
TICK = 0.05
"""Height of an onset tick, as a fraction of the axes (real runs at the bottom, shuffled at the top)."""


def _written(fig, path: str | Path) -> Path:
    path = Path(path)
    written = save(fig, path.parent, path.stem)
    return next((p for p in written if p.suffix == path.suffix), written[0])


def _row_order(tables: Mapping[int, pd.DataFrame], paradigms: list[str]) -> list[tuple[str, float, int]]:
    """(paradigm, median acquisition step (inf: never in most seeds), seeds where it is a heuristic), in
    row order: by median step, never-acquired after, and among those the heuristics last."""
    rows = []
    for p in paradigms:
        steps, heuristic = [], 0
        for t in tables.values():
            row = t[t["paradigm"] == p]
            acquired = not row.empty and bool(row["acquired"].iloc[0]) and not pd.isna(row["step"].iloc[0])
            steps.append(float(row["step"].iloc[0]) if acquired else None)
            heuristic += int(not row.empty and bool(row["heuristic"].iloc[0]))
        rows.append((p, median_step(steps), heuristic))
    return sorted(rows, key=lambda r: (math.isinf(r[1]), r[1], r[2] > 0, r[2], r[0]))


def acquisition_heatmap(frames: Mapping[int, pd.DataFrame], tables: Mapping[int, pd.DataFrame],
                        coverage: pd.DataFrame, path: str | Path, probe: str = "zorro") -> Path:
    """The paradigms' learning over training (``frames``, ``tables``: seed -> metrics frame and its
    :func:`~.acquisition.acquisition_table`). Returns ``path``."""
    testable, _ = testable_split(coverage)
    fields = dict(zip(coverage["paradigm"], coverage["field"]))
    paradigms = sorted({p for t in tables.values() for p in t["paradigm"] if p in testable})
    if not paradigms:
        raise ValueError("acquisition_heatmap: no testable paradigm in the tables")
    order = _row_order(tables, paradigms)
    wides = {s: wide(f) for s, f in frames.items()}
    steps = sorted({float(x) for w in wides.values() for x in w.index})
    cells = np.full((len(order), len(steps), len(wides)), np.nan)  # (P, T, S)
    for j, (seed, w) in enumerate(wides.items()):
        chance = dict(zip(tables[seed]["paradigm"], tables[seed]["chance"]))
        for i, (p, _, _) in enumerate(order):
            metric = paradigm_metric(p, probe)
            if metric in w.columns and p in chance:
                series = w[metric].reindex(steps)  # (T,)
                cells[i, :, j] = series.to_numpy(dtype=float) - chance[p]
    with np.errstate(all="ignore"):
        median = np.nanmedian(cells, axis=2)  # (P, T) NaN where no seed has a value
    n_rows, n_cols = median.shape
    fig, axes = figure(1, 1, (max(7.0, 3.5 + 0.32 * n_cols), 2.2 + ROW_IN * n_rows), layout="constrained")
    ax = axes[0, 0]
    ax.grid(False)
    mesh = ax.imshow(median, aspect="auto", cmap="RdBu_r", norm=CenteredNorm(0.0), interpolation="nearest",
                     extent=(-0.5, n_cols - 0.5, n_rows - 0.5, -0.5))
    names = sorted({fields.get(p, "") or "(no field)" for p, _, _ in order})
    colours = dict(zip(names, palette(len(names))))
    strip = np.array([[to_rgb(colours[fields.get(p, '') or '(no field)'])] for p, _, _ in order])  # (P, 1, 3)
    ax.imshow(strip, aspect="auto", extent=(-1.6, -0.7, n_rows - 0.5, -0.5), interpolation="nearest")
    ax.set_xlim(-1.6, n_cols - 0.5)
    for i, (_, step, _) in enumerate(order):  # the median acquisition step: a dot in its column
        if not math.isinf(step):
            col = int(np.searchsorted(steps, step - 1e-9 * max(1.0, step)))
            ax.plot([col], [i], marker="o", ms=2.5, color="black", ls="none", gid="median acquisition step")
    every = max(1, math.ceil(n_cols / MAX_STEP_LABELS))
    ax.set_xticks(range(0, n_cols, every), [f"{s:g}" for s in steps[::every]], rotation=60, fontsize=7)
    seeds = len(tables)
    ax.set_yticks(range(n_rows), [p + (f"  [heuristic {h}/{seeds}]" if h else "") for p, _, h in order],
                  fontsize=6.5)
    for label, (_, _, h) in zip(ax.get_yticklabels(), order):
        if h:
            label.set_color(PALETTE[1])
    label_axes(ax, f"{STEP_LABEL} (records, log-spaced)", "paradigm (by median acquisition step)")
    ax.set_title(f"{probe}: median over {seeds} seeds of accuracy - chance (dot: median acquisition step; "
                 "bottom: never acquired, heuristics marked)", fontsize=8)
    bar = fig.colorbar(mesh, ax=ax, shrink=min(1.0, 12.0 / max(n_rows, 1)) if n_rows > 12 else 1.0, pad=0.01)
    bar.set_label("accuracy - chance (median over seeds)")
    ax.legend(handles=[Patch(color=colours[n], label=n) for n in names], title="field", loc="upper center",
              bbox_to_anchor=(0.5, -LEGEND_DROP_IN / (ROW_IN * n_rows)), ncol=min(4, len(names)), fontsize=7,
              frameon=False)
    return _written(fig, path)


def _band(frames: Mapping[int, pd.DataFrame], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps (T,), min (T,), median (T,), max (T,)) of ``metric`` over the seeds' frames."""
    columns = [wide(f)[metric] for f in frames.values()]
    joined = pd.concat(columns, axis=1).sort_index()  # (T, S)
    values = joined.to_numpy(dtype=float)
    with np.errstate(all="ignore"):
        return (joined.index.to_numpy(dtype=float), np.nanmin(values, axis=1), np.nanmedian(values, axis=1),
                np.nanmax(values, axis=1))


def category_curves(real: Mapping[int, pd.DataFrame], shuffled: Mapping[int, pd.DataFrame], path: str | Path) -> Path:
    """Claim 1's curves: content class_correct and exact shares of both corpora (seed -> metrics frame)."""
    fig, axes = figure(1, 1, (7.5, 4.2), layout="constrained")
    ax = axes[0, 0]
    series = [(real, CONTENT_CLASS, "class_correct", "-", PALETTE[0]), (real, CONTENT_EXACT, "exact", "-", PALETTE[1]),
              (shuffled, CONTENT_CLASS, "class_correct, shuffled words", "--", PALETTE[2]),
              (shuffled, CONTENT_EXACT, "exact, shuffled words", "--", PALETTE[3])]
    ticks = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for frames, metric, label, ls, colour in series:
        if not frames:
            continue
        steps, low, middle, high = _band(frames, metric)
        ax.fill_between(steps, low, high, color=colour, alpha=0.15, lw=0, gid=label)
        ax.plot(steps, middle, color=colour, ls=ls, lw=1.6, label=f"{label} (median, min-max band)", gid=label)
        onsets = [onset(*curve(wide(f), metric)) for f in frames.values()]
        y0, y1 = (0.0, TICK) if frames is real else (1.0 - TICK, 1.0)
        for x in onsets:
            if x is not None:
                ax.plot([x, x], [y0, y1], transform=ticks, color=colour, lw=1.2, gid=label)
        mid = median_step(onsets)
        if not math.isinf(mid):
            ax.axvline(mid, color=colour, ls=ls, lw=0.9, alpha=0.8, gid=label)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0.0)
    label_axes(ax, f"{STEP_LABEL} (symlog)", "share of content-word positions")
    ax.set_title("content words: top-1 of the right class vs the exact word (ticks: each seed's onset; line: median)",
                 fontsize=8)
    legend_outside(ax)
    return _written(fig, path)
