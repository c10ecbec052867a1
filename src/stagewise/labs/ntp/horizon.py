"""Long-horizon measurements of the NTP lab: the late-window rate fits and Theorem 1's norm
band read on the logged ||W_kq||; the claims judged on them are :func:`.claims.horizon_claims`.

Derivation of the late rate [derived]: normalized GD moves W_kq by exactly eta per step,
and its direction converges to W*/||W*|| (W* = W_kq*, every active margin of W* equal to
1), so the score gap of an active (optimal, non-optimal) pair grows by eta/||W*|| per step.
Both gaps below are sums of exponentials of minus such score gaps, so asymptotically::

    d/dt log(L - floor)            -> -eta / ||W*||
    d/dt log(1 - min opt. attn.)   -> -eta / ||W*||

The log t corrections to the direction make the local rate deviate by about c / margin
(margin = t eta / ||W*||), so the fit uses a *late window* fixed before the runs: the second
half of stage 2 (stage time T1/2..T1), and only when the margin the theory predicts at the
window's start, (T1/2) eta / ||W*||, is at least LATE_MIN_MARGIN for every seed; otherwise
the rate claims are null with that reason (e.g. the paper's T1 = 900 gives 1.1).

Theorem 1's band (zero init, t counted from the start of stage 2) is
t eta / (2 ||W*||) <= ||W_kq(t)|| <= t eta; the appendix's Lemma 6 has the weaker lower bound
t eta / (2 L_max ||W*||), reported too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...measure import log_linear_rate, series
from .config import Config

LATE_FRACTION = 0.5  # the late window is the last half of stage 2
LATE_MIN_MARGIN = 6.0  # predicted margin (t eta / ||W*||) at the late window's start, every seed
GAP_FLOOR = 1e-12  # gap values at or below this are round-off and dropped from the fits
GAPS = {"train.loss.gap": "train.loss.gap", "train.opt_attn.min": "train.opt_attn.min.gap"}
"""The metrics whose distance to their limit is fitted (L - floor, logged; 1 - min attention mass) -> the name of that
gap in the fits' keys (``{gap}.rate``, ``{gap}.r2``, ``{gap}.points``)."""


def late_window(config: Config) -> tuple[int, int]:
    """(first, last) stage time of the late window: the last LATE_FRACTION of stage 2."""
    T1 = config.train.steps_stage2
    return int(round(T1 * (1 - LATE_FRACTION))), T1


def late_fits(config: Config, frame: pd.DataFrame, seeds: list[int], eta: float,
              star_norms: np.ndarray) -> dict[str, Any]:
    """Per-seed fitted slopes of log(L - floor) and log(1 - train.opt_attn.min) over the late
    window (keys ``{gap}.rate`` and ``{gap}.points``, :data:`GAPS`), the
    predicted rate -eta/||W*|| and the margin at the window's start."""
    T = config.train.steps_stage1
    start, end = late_window(config)
    out: dict[str, Any] = {"window_stage_steps": [start, end], "min_margin": LATE_MIN_MARGIN,
                           "predicted_rate": list(-eta / star_norms),
                           "margin_at_start": list(start * eta / star_norms)}
    for metric, key in GAPS.items():
        steps, values = series(frame, metric)  # (T,), (T, S) seed order as in `seeds`
        sel = (steps - T >= start) & (steps - T <= end)
        rates, counts = [], []
        for i in range(len(seeds)):
            gap = values[sel, i] if metric == "train.loss.gap" else 1 - values[sel, i]
            fit = log_linear_rate(steps[sel] - T, gap, floor=GAP_FLOOR)
            rates.append(fit.slope)
            counts.append(fit.n_points)
        out[f"{key}.rate"], out[f"{key}.points"] = rates, counts
    return out


@dataclass(frozen=True)
class NormBand:
    """Theorem 1's band read on the logged stage-2 steps, per seed (S,), with t = step - T the
    stage time and eta the stage-2 step: ``upper`` = max_t ||W_kq(t)|| / (t eta) (<= 1 inside
    the band), ``lower`` = min_t ||W_kq(t)|| / (t eta / (2 ||W*||)) (>= 1), ``lemma6`` =
    min_t ||W_kq(t)|| / (t eta / (2 L_max ||W*||)) (>= 1: Lemma 6's weaker bound, reported)."""

    upper: np.ndarray
    lower: np.ndarray
    lemma6: np.ndarray

    @property
    def excursion(self) -> np.ndarray:
        """max(upper - 1, 1 - lower) (S,): the worst relative excursion outside the band
        (at most round-off, :data:`.claims.BAND_RTOL`, inside it)."""
        return np.maximum(self.upper - 1, 1 - self.lower)


def norm_band(frame: pd.DataFrame, T: int, eta: float, star: np.ndarray, l_max: np.ndarray) -> NormBand | None:
    """:class:`NormBand` of one training's records (``star``: ||W_kq*|| (S,); ``l_max``: the
    longest training sentence (S,)); None when no stage-2 step (step > T) was logged."""
    steps, norms = series(frame, "W_kq.fro")  # (T,), (T, S)
    sel = steps > T
    if not sel.any():
        return None
    t = (steps[sel] - T).astype(float)[:, None]  # (n, 1) stage time
    w = norms[sel]  # (n, S)
    return NormBand(upper=np.nanmax(w / (t * eta), axis=0),  # (S,) <= 1
                    lower=np.nanmin(w / (t * eta / (2 * star)), axis=0),  # (S,) >= 1
                    lemma6=np.nanmin(w / (t * eta / (2 * l_max * star)), axis=0))  # (S,) >= 1
