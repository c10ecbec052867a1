"""Rate fits on a metric curve: linear growth, power-law decay, linear (geometric)
convergence. Least squares in the transformed coordinates; each fit reports R^2 and the
number of points it used, so a claim can say how good the fit is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Fit:
    """y ~ intercept + slope * x in the fit's coordinates."""

    slope: float
    intercept: float
    r2: float
    n_points: int


def _least_squares(x: np.ndarray, y: np.ndarray) -> Fit:
    if len(x) < 3 or np.ptp(x) == 0:
        return Fit(float("nan"), float("nan"), float("nan"), int(len(x)))
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - np.sum(resid**2) / total if total > 0 else 1.0
    return Fit(float(slope), float(intercept), float(r2), int(len(x)))


def linear_fit(t: np.ndarray, y: np.ndarray) -> Fit:
    """y ~ a + b t (e.g. a weight norm growing linearly). t, y shape (n,)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    keep = np.isfinite(t) & np.isfinite(y)
    return _least_squares(t[keep], y[keep])


def power_exponent(t: np.ndarray, y: np.ndarray, floor: float = 1e-13) -> Fit:
    """log y ~ a - b log t; ``slope`` is -b, so the decay exponent is ``-fit.slope``.

    Points with y <= floor (round-off level) or t <= 0 are dropped.
    """
    t, y = np.asarray(t, float), np.asarray(y, float)
    keep = np.isfinite(y) & (y > floor) & (t > 0)
    return _least_squares(np.log(t[keep]), np.log(y[keep]))


def log_linear_rate(t: np.ndarray, y: np.ndarray, floor: float = 1e-13) -> Fit:
    """log y ~ a + r t: linear convergence (y ~ e^{r t}, r < 0) of a positive gap."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    keep = np.isfinite(y) & (y > floor)
    return _least_squares(t[keep], np.log(y[keep]))


def series(metrics: pd.DataFrame, metric: str, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one metric for one seed (or a (steps, seeds) matrix when seed is None).

    ``metrics`` is a long-form frame with columns step, seed, metric, value.
    """
    rows = metrics[metrics["metric"] == metric]
    if seed is not None:
        rows = rows[rows["seed"] == seed].sort_values("step")
        return rows["step"].to_numpy(), rows["value"].to_numpy()
    wide = rows.pivot(index="step", columns="seed", values="value").sort_index()
    return wide.index.to_numpy(), wide.to_numpy()


def values_at(metrics: pd.DataFrame, metric: str, step: int) -> np.ndarray:
    """Values of one metric at one step, one per seed in seed order (empty if not logged)."""
    rows = metrics[(metrics["metric"] == metric) & (metrics["step"] == step)].sort_values("seed")
    return rows["value"].to_numpy()
