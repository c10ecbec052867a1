"""Figure conventions shared by every lab figure and the sweep figures, in one place.

* Every axis is labelled with its quantity and unit (:func:`label_axes`; the step axis of a
  training curve is :data:`STEP_LABEL`).
* Log axes where the data or the sweep axis is log-spaced (:func:`use_log_scale`): a
  declared log axis (a sweep's ``logrange`` / ``loguniform`` axis), or values that are all
  positive, span at least LOG_DECADES decades and are spaced more evenly in log than linearly.
* Undefined values are gaps, not zeros (:func:`gap_where_zero`: the cosine of an all-zero
  matrix is NaN in the figure, whatever the run logged).
* Theory curves say what is compared (:data:`SLOPE_ONLY` where only the slope is).
* No empty panels: a figure has only panels with data; what could not be drawn is said in
  the title.
* Legends outside the data (:func:`legend_outside`: right of the axes).
* A palette where no two series of one panel share a colour (:func:`palette`; artists of one
  series carry the same ``gid``, see :func:`series_gid`).
* Grids that keep panels readable at the report's width (:func:`panel_grid`: at most as many
  columns as keep each panel >= MIN_PANEL_IN wide when the figure is shown REPORT_WIDTH_IN wide).

Figures are built as matplotlib Figures and written by :func:`save` (PNG + PDF, paths
returned, figure closed). While :func:`recording` is active, every saved Figure is also kept
in the list it yields (still inspectable after closing), which is how the tests walk every
figure a lab or a sweep makes and check it with :func:`check_figure`.
"""

from __future__ import annotations

import contextlib
import io
import math
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # headless: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import PathCollection, QuadMesh  # noqa: E402

from ..measure import series  # noqa: E402
from ..runs.store import atomic_write_bytes  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

STYLE: dict[RcKeyType, Any] = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
         "axes.spines.right": False, "font.size": 9, "legend.fontsize": 7, "legend.frameon": False}

MAX_SEED_LINES = 16  # beyond this many seeds, the rest are shown by the min-max band only
STEP_LABEL = "training step t"
SLOPE_ONLY = "slope only"  # what a theory-shape curve is compared by when its constant is unknown
LOG_DECADES = 2.0  # positive values spanning at least this many decades, evenly in log, get a log axis
GEOMETRIC_TOL = 1e-9  # relative spread of successive ratios that still counts as a logrange's values
REPORT_WIDTH_IN = 11.0  # figures are shown at most this wide in the report (inches)
MIN_PANEL_IN = 2.5  # each panel at least this wide at the report's width (inches)
PANEL_SIZE = (3.6, 2.8)  # (width, height) of one data panel (inches), legend space not counted
LEGEND_WIDTH_IN = 1.6  # room right of a panel for a legend placed outside it
LEGEND_CHARS = 26  # legend labels are wrapped at this many characters (they fit LEGEND_WIDTH_IN)
_BASE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
         "#7f7f7f")
PALETTE = _BASE  # series colours in order: no two alike (tab10, reordered: blue, red, green first)
_COLOR_TOL = 1e-3  # two RGB colours closer than this (max abs difference) are the same colour


def palette(n: int) -> list[str]:
    """``n`` pairwise distinct colours: PALETTE, then evenly spaced hues beyond it."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    # matplotlib's stubs leave the (3,) RGB array hsv_to_rgb returns out of ColorType; to_hex takes it
    extra = [mcolors.to_hex(mcolors.hsv_to_rgb((i / (n - len(PALETTE)), 0.75, 0.8)))  # type: ignore[arg-type]
             for i in range(n - len(PALETTE))]
    return list(PALETTE) + extra


def label_axes(ax, x: str, y: str) -> None:
    """Set both axis labels; each names the quantity and its unit, e.g. ``"test loss (nats)"``."""
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def use_log_scale(values, declared: bool = False) -> bool:
    """Whether an axis over ``values`` is drawn on a log scale: when ``declared`` (a log-spaced
    sweep axis); when the distinct finite values are three or more, all > 0, with one common
    ratio != 1 to GEOMETRIC_TOL (what a sweep's ``logrange`` writes); or when they are all > 0,
    span >= LOG_DECADES decades and are spaced at least as evenly in log as linearly
    (max/min gap ratio)."""
    if declared:
        return True
    arr = np.asarray(values, dtype=float).reshape(-1)
    levels = np.unique(arr[np.isfinite(arr)])  # (K,) ascending
    if levels.size < 2 or levels[0] <= 0:
        return False
    ratios = levels[1:] / levels[:-1]  # (K-1,) all > 1
    if levels.size >= 3 and np.all(np.abs(ratios / ratios[0] - 1) <= GEOMETRIC_TOL):
        return True
    if np.log10(levels[-1] / levels[0]) < LOG_DECADES:
        return False
    if levels.size == 2:
        return True

    def unevenness(gaps: np.ndarray) -> float:
        return float(gaps.max() / gaps.min())

    return unevenness(np.diff(np.log(levels))) <= unevenness(np.diff(levels))


def gap_where_zero(frame: pd.DataFrame, metric: str, norm_metric: str) -> pd.DataFrame:
    """``frame`` (long form: step, seed, metric, value) with ``metric`` set to NaN at every
    (step, seed) where ``norm_metric`` is 0: a quantity undefined there (the cosine of an
    all-zero matrix) is drawn as a gap, not as the value logged in its place."""
    norms = frame[frame["metric"] == norm_metric]
    zero = set(zip(norms.loc[norms["value"] == 0, "step"], norms.loc[norms["value"] == 0, "seed"]))
    if not zero:
        return frame
    rows = (frame["metric"] == metric).to_numpy()
    keys = list(zip(frame["step"], frame["seed"]))
    undefined = rows & np.array([k in zero for k in keys], dtype=bool)
    out = frame.copy()
    out.loc[undefined, "value"] = np.nan
    return out


def series_gid(ax, key: str, start: int = 0) -> None:
    """Mark the artists of ``ax`` from index ``start`` on (lines, collections) as one series
    ``key``: :func:`check_figure` lets the artists of one series share a colour."""
    for artist in [*ax.lines[start:], *ax.collections]:
        if artist.get_gid() is None:
            artist.set_gid(key)


def row_spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(min, mean, max) over seeds of each row of ``values`` (T, S), NaN ignored; each (T,).
    A row where no seed has a value (every entry NaN) gets NaN in all three, by design (a
    gap in the plotted line), and no statistic is taken of the empty selection."""
    known = ~np.isnan(values)  # (T, S)
    count = known.sum(axis=1)  # (T,)
    some = count > 0
    low = np.where(known, values, np.inf).min(axis=1)  # (T,)
    high = np.where(known, values, -np.inf).max(axis=1)  # (T,)
    total = np.where(known, values, 0.0).sum(axis=1)  # (T,)
    mean = np.divide(total, count, out=np.full(count.shape, np.nan), where=some)
    return np.where(some, low, np.nan), mean, np.where(some, high, np.nan)


def has_values(frame: pd.DataFrame, metric: str) -> bool:
    """Whether ``metric`` has a finite value at some step (a panel of it would not be empty)."""
    values = frame.loc[frame["metric"] == metric, "value"].to_numpy(dtype=float)
    return bool(np.isfinite(values).any())


def seed_lines(ax, frame: pd.DataFrame, metric: str, *, label: str | None = None, color: str = PALETTE[0],
               transform=None, mean: bool = True, ls: str = "-") -> None:
    """One thin line per seed (the first MAX_SEED_LINES; a min-max band covers all of them
    when there are more) and the mean across seeds, against the step; all of one series
    (``gid`` = label or metric). Steps where no seed has a value leave a gap; a metric with
    no value at all (NaN throughout: undefined for this run) gets a legend entry
    "LABEL (no value)" and no lines (callers leave such a metric's panel out)."""
    steps, values = series(frame, metric)  # (T,), (T, S)
    if transform is not None:
        values = transform(steps, values)
    if values.size == 0:
        return
    start = len(ax.lines)
    key = label or metric
    if np.isnan(values).all():  # undefined for this run: a legend entry, no lines
        if label:
            ax.plot([], [], color=color, label=f"{label} (no value)", gid=key)
        return
    n_seeds = values.shape[1]
    for col in range(min(n_seeds, MAX_SEED_LINES)):
        ax.plot(steps, values[:, col], color=color, alpha=0.35 if n_seeds > 1 else 1.0, lw=0.8, ls=ls, gid=key)
    low, middle, high = row_spread(values)  # (T,) each
    if n_seeds > MAX_SEED_LINES:
        ax.fill_between(steps, low, high, color=color, alpha=0.15, lw=0, gid=key)
    if mean and n_seeds > 1:
        ax.plot(steps, middle, color=color, lw=1.8, ls=ls, label=label, gid=key)
    elif label:
        ax.lines[-1].set_label(label)
    series_gid(ax, key, start)


def legend_outside(ax, **kwargs) -> None:
    """The legend of ``ax`` right of its axes box (never over the data), labels longer than
    LEGEND_CHARS wrapped (mathtext labels are kept whole); none without labels."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [lb if "$" in lb else textwrap.fill(lb, LEGEND_CHARS) for lb in labels]
    if handles:
        kwargs = {"fontsize": STYLE["legend.fontsize"], "frameon": False, **kwargs}
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def panel_grid(n_panels: int, *, panel: tuple[float, float] = PANEL_SIZE, legend: bool = True,
               max_cols: int | None = None):
    """(fig, axes (R, C)) for ``n_panels`` panels with constrained layout: as many columns as
    keep each panel >= MIN_PANEL_IN wide when the figure is scaled to REPORT_WIDTH_IN (legend
    room of LEGEND_WIDTH_IN per column when ``legend``); the unused cells of the last row are
    removed (no empty panels)."""
    cell = panel[0] + (LEGEND_WIDTH_IN if legend else 0.0)
    fit = max(1, int(REPORT_WIDTH_IN // cell))
    cols = max(1, min(n_panels, fit, max_cols or fit))
    rows = max(1, math.ceil(n_panels / cols))
    fig, axes = figure(rows, cols, (cell * cols, panel[1] * rows + 0.5), layout="constrained")
    for ax in axes.flat[n_panels:]:
        ax.remove()
    return fig, axes


def figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (6.0, 4.0), layout: str | None = None):
    """(fig, axes (nrows, ncols)) in the house style; ``layout="constrained"`` makes room for
    legends outside the axes (:func:`panel_grid` uses it)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, layout=layout)
    for ax in axes.flat:  # the style applies to the axes' own settings: keep legends light after the context
        ax.set_prop_cycle(color=list(PALETTE))
    return fig, axes


_RECORDED: list[list] = []


@contextlib.contextmanager
def recording() -> Iterator[list]:
    """While active, every Figure passed to :func:`save` is appended to the yielded list
    (after writing; closed figures keep their artists, so they can be checked)."""
    kept: list = []
    _RECORDED.append(kept)
    try:
        yield kept
    finally:
        _RECORDED.remove(kept)


def save(fig, folder: str | Path, name: str, dpi: float | None = None) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` atomically; close the figure; return both paths."""
    folder = Path(folder)
    paths = []
    try:
        for ext in ("png", "pdf"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, bbox_inches="tight", **({"dpi": dpi} if dpi else {}))
            path = folder / f"{name}.{ext}"
            atomic_write_bytes(path, buf.getvalue())
            paths.append(path)
    finally:
        plt.close(fig)
    for kept in _RECORDED:
        kept.append(fig)
    return paths


# ------------------------------------------------------------------ the conventions checker
def _is_colorbar(ax) -> bool:
    return getattr(ax, "_colorbar", None) is not None


def _data_artists(ax) -> list:
    """Artists in data coordinates that show data: lines, collections, images, patches
    (not the background, not axhline/axvline reference lines)."""
    lines = [ln for ln in ax.lines if ln.get_transform().contains_branch(ax.transData) and len(ln.get_xdata())]
    return [*lines, *ax.collections, *ax.images, *[p for p in ax.patches if p.get_visible()]]


def _rgb(color) -> tuple[float, float, float] | None:
    arr = np.asarray(mcolors.to_rgba_array(color))
    if not arr.size:
        return None
    red, green, blue = (float(v) for v in arr[0, :3])  # a row of an RGBA array
    return red, green, blue


def _series_colors(ax) -> dict[str, tuple[float, float, float]]:
    """{series key: RGB} of the data lines and collections of ``ax`` (key: gid, else the
    label, else the artist itself); reference lines in axes coordinates are not series."""
    out: dict[str, tuple[float, float, float]] = {}
    artists = [ln for ln in ax.lines if ln.get_transform().contains_branch(ax.transData)]
    artists += [c for c in ax.collections if len(c.get_offsets()) or len(c.get_paths())]
    for artist in artists:
        label = artist.get_label() or ""
        key = artist.get_gid() or (label if not label.startswith("_") else f"_artist{id(artist)}")
        color = artist.get_color() if hasattr(artist, "get_xdata") else (
            artist.get_facecolor() if len(artist.get_facecolor()) else artist.get_edgecolor())
        rgb = _rgb(color)
        if rgb is not None and not isinstance(artist, QuadMesh):
            out.setdefault(key, rgb)
    return out


def _data_points(ax) -> np.ndarray:
    """(P, 2) display coordinates of the finite data points of the lines and scatters."""
    points = [ln.get_xydata() for ln in ax.lines if ln.get_transform().contains_branch(ax.transData)]
    points += [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)
               and c.get_offset_transform().contains_branch(ax.transData)]
    xy = np.concatenate([np.asarray(p, float).reshape(-1, 2) for p in points]) if points else np.zeros((0, 2))
    xy = xy[np.isfinite(xy).all(axis=1)]
    return ax.transData.transform(xy) if len(xy) else xy


def check_figure(fig, log_x: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ways ``fig`` breaks the conventions of this module (empty when it keeps them):
    every panel (colorbars aside) has non-empty x and y labels and data artists; no two
    series of one panel share a colour; a legend does not cover data points (outside the
    axes, or inside with no point under it); each panel is >= MIN_PANEL_IN wide when the
    figure is shown at most REPORT_WIDTH_IN wide; the x axis is log where :func:`use_log_scale`
    says so for the lines' x values, and on panels whose x label is in ``log_x``."""
    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: give it a canvas again
        FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    width_in = fig.get_size_inches()[0]
    scale = min(1.0, REPORT_WIDTH_IN / width_in)
    problems: list[str] = []
    for i, ax in enumerate(fig.axes):
        if _is_colorbar(ax) or not ax.get_visible():
            continue
        name = f"axes {i} ({ax.get_title()[:40]!r})"
        if not ax.get_xlabel().strip() or not ax.get_ylabel().strip():
            problems.append(f"{name}: missing label (x={ax.get_xlabel()!r}, y={ax.get_ylabel()!r})")
        if not _data_artists(ax):
            problems.append(f"{name}: no data")
        colors = _series_colors(ax)
        seen: dict[tuple[float, float, float], str] = {}
        for key, rgb in colors.items():
            twin = next((k for c, k in seen.items() if max(abs(a - b) for a, b in zip(c, rgb)) < _COLOR_TOL), None)
            if twin is not None:
                problems.append(f"{name}: series {key!r} and {twin!r} share a colour")
            seen[rgb] = key
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            inside = _data_points(ax)
            covered = ((inside[:, 0] >= box.x0) & (inside[:, 0] <= box.x1) & (inside[:, 1] >= box.y0)
                       & (inside[:, 1] <= box.y1)) if len(inside) else np.zeros(0, bool)
            if covered.any():
                problems.append(f"{name}: the legend covers {int(covered.sum())} data points")
        panel_in = ax.get_position().width * width_in * scale
        if panel_in < MIN_PANEL_IN:
            problems.append(f"{name}: {panel_in:.2f} in wide at the report's width (< {MIN_PANEL_IN} in)")
        line_xs = [ln.get_xdata() for ln in ax.lines if ln.get_transform().contains_branch(ax.transData)]
        xs = np.concatenate([np.asarray(x, float).reshape(-1) for x in line_xs]) if line_xs else np.zeros(0)
        declared = ax.get_xlabel() in log_x
        if (declared or use_log_scale(xs)) and ax.get_xscale() != "log":
            problems.append(f"{name}: x axis should be log ({'declared' if declared else 'log-spaced values'})")
    return tuple(problems)
