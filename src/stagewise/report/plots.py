"""Matplotlib helpers shared by the labs: headless backend, seed bands, PNG + PDF output."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..measure import series  # noqa: E402
from ..runs.store import atomic_write_bytes  # noqa: E402

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
         "axes.spines.right": False, "font.size": 9}


MAX_SEED_LINES = 16  # beyond this many seeds, the rest are shown by the min-max band only


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


def seed_lines(ax, frame: pd.DataFrame, metric: str, *, label: str | None = None, color: str = "C0",
               transform=None, mean: bool = True) -> None:
    """One thin line per seed (the first MAX_SEED_LINES; a min-max band covers all of them
    when there are more) and the mean across seeds, against the step. Steps where no seed
    has a value leave a gap; a metric with no value at all (NaN throughout: undefined for
    this run) gets a legend entry "LABEL (no value)", or a note on the axes, instead of lines."""
    steps, values = series(frame, metric)  # (T,), (T, S)
    if transform is not None:
        values = transform(steps, values)
    if values.size == 0:
        return
    if np.isnan(values).all():  # undefined for this run: a legend entry or a note, no lines
        if label:
            ax.plot([], [], color=color, label=f"{label} (no value)")
        else:
            ax.text(0.5, 0.5, f"{metric}: no value at any step\n(undefined for this run)", ha="center",
                    va="center", transform=ax.transAxes, fontsize=8, color="0.4")
        return
    n_seeds = values.shape[1]
    for col in range(min(n_seeds, MAX_SEED_LINES)):
        ax.plot(steps, values[:, col], color=color, alpha=0.35 if n_seeds > 1 else 1.0, lw=0.8)
    low, middle, high = row_spread(values)  # (T,) each
    if n_seeds > MAX_SEED_LINES:
        ax.fill_between(steps, low, high, color=color, alpha=0.15, lw=0)
    if mean and n_seeds > 1:
        ax.plot(steps, middle, color=color, lw=1.8, label=label)
    elif label:
        ax.lines[-1].set_label(label)


def save(fig, folder: str | Path, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` atomically; close the figure."""
    import io

    folder = Path(folder)
    paths = []
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, bbox_inches="tight")
        path = folder / f"{name}.{ext}"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


def figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (6.0, 4.0)):
    with plt.rc_context(STYLE):
        return plt.subplots(nrows, ncols, figsize=size, squeeze=False)
