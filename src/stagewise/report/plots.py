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


def seed_lines(ax, frame: pd.DataFrame, metric: str, *, label: str | None = None, color: str = "C0",
               transform=None, mean: bool = True) -> None:
    """One thin line per seed (the first MAX_SEED_LINES; a min-max band covers all of them
    when there are more) and the mean across seeds, against the step."""
    steps, values = series(frame, metric)  # (T,), (T, S)
    if transform is not None:
        values = transform(steps, values)
    if values.size == 0:
        return
    n_seeds = values.shape[1]
    for col in range(min(n_seeds, MAX_SEED_LINES)):
        ax.plot(steps, values[:, col], color=color, alpha=0.35 if n_seeds > 1 else 1.0, lw=0.8)
    if n_seeds > MAX_SEED_LINES:
        ax.fill_between(steps, np.nanmin(values, axis=1), np.nanmax(values, axis=1), color=color, alpha=0.15, lw=0)
    if mean and n_seeds > 1:
        ax.plot(steps, np.nanmean(values, axis=1), color=color, lw=1.8, label=label)
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
