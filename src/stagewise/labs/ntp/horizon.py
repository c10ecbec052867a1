"""Long-horizon claims of the NTP lab: the late rates against the margin's growth rate,
Theorem 2's rate, Theorem 1's norm band, and the QP target against Proposition 2's.

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

Theorem 2's rate is C_1 = eta / (4 L_max ||W*||^2); L_max is taken as the longest training
sentence (the smallest admissible value, so the strictest test). Theorem 1's band (zero
init, t counted from the start of stage 2) is t eta / (2 ||W*||) <= ||W_kq(t)|| <= t eta;
the appendix's Lemma 6 has the weaker lower bound t eta / (2 L_max ||W*||), reported too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...measure import log_linear_rate, series, values_at
from ...report.claims import Claim
from . import claimspecs as cs
from .config import Config

LATE_FRACTION = 0.5  # the late window is the last half of stage 2
LATE_MIN_MARGIN = 6.0  # predicted margin (t eta / ||W*||) at the late window's start, every seed
RATE_RTOL = cs.LATE_RATE_MARGIN.threshold  # 0.05: |fitted rate / (-eta/||W*||) - 1| allowed (the local rate deviates ~ c / margin)
GAP_FLOOR = 1e-12  # gap values at or below this are round-off and dropped from the fits
BAND_RTOL = cs.NORM_BAND_THEOREM1.threshold  # 1e-9: round-off slack on Theorem 1's band (||W(1)|| = eta exactly)
PROP2_DISTINCT_TOL = 1e-6  # the QP and Proposition-2 directions differ when 1 - cos(W_qp, W_p2) > this
GAPS = {"train.loss.gap": "train.loss.gap", "train.opt_attn.min": "train.opt_attn.min.gap"}
"""The metrics whose distance to their limit is fitted (L - floor, logged; 1 - min attention mass) -> the name of that
gap in the fits' keys (``{gap}.rate``, ``{gap}.r2``, ``{gap}.points``)."""


def _fmt(values) -> str:
    arr = np.asarray(values, dtype=float)
    if arr.size == 1:
        return f"{arr.item():.4g}"
    if np.isnan(arr).all():  # no seed has a value (e.g. no fit): said as such, no All-NaN warning
        return "nan"
    return f"{np.nanmin(arr):.4g}..{np.nanmax(arr):.4g}"


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


def horizon_claims(config: Config, frame: pd.DataFrame, extras: dict[str, Any]) -> tuple[list[Claim], dict]:
    """The claims (a) late_rate_margin, (b) late_rate_theorem2, (c) norm_band_theorem1 and
    closer_to_qp_than_prop2, plus the numbers behind them (for ``details``)."""
    seeds, eta = extras["seeds"], extras["eta"]
    T, T1 = config.train.steps_stage1, config.train.steps_stage2
    total = T + T1
    two_stage = config.train.algorithm == "two_stage"
    star = np.sqrt(np.array([t["wkq_star_norm_sq"] for t in extras["targets"]]))  # (S,)
    l_max = np.array(extras["max_len"], dtype=float)  # (S,) longest training sentence
    out: list[Claim] = []
    details: dict[str, Any] = {}
    no_target = not np.all(star > 0)

    # (a), (b): late rates
    specs = (cs.LATE_RATE_MARGIN, cs.LATE_RATE_THEOREM2)
    reason = None
    if not two_stage:
        reason = "the rate -eta/||W_kq*|| is derived for stage 2 of two-stage training (W_ov frozen)"
    elif no_target:
        reason = "no max-margin target W_kq* exists for this data"
    elif T1 < 3:
        reason = f"stage 2 has {T1} steps"
    if reason is None:
        fits = late_fits(config, frame, seeds, eta, star)
        details["late_rates"] = fits
        margin0 = np.asarray(fits["margin_at_start"])
        if np.min(margin0) < LATE_MIN_MARGIN:
            need = int(np.ceil(2 * LATE_MIN_MARGIN * star.max() / eta))
            reason = (f"horizon too short: the predicted margin at the late window's start (stage step "
                      f"{fits['window_stage_steps'][0]}) is {_fmt(margin0)} < {LATE_MIN_MARGIN} (needs T1 >= {need})")
    if reason is not None:
        out += [spec.not_testable(reason) for spec in specs]
    else:
        pred = np.asarray(fits["predicted_rate"])
        lr, ar = (np.asarray(fits[f"{key}.rate"]) for key in GAPS.values())
        lerr, aerr = lr / pred - 1, ar / pred - 1
        window = f"stage steps {fits['window_stage_steps'][0]}..{fits['window_stage_steps'][1]}"
        out.append(specs[0].result(np.maximum(np.abs(lerr), np.abs(aerr)),  # (S,) the worse of the two gaps
                                   f"{window}: loss-gap rate {_fmt(lr)}, attention-gap rate {_fmt(ar)}, -eta/||W*|| "
                                   f"{_fmt(pred)}; relative error loss {_fmt(lerr)}, attention {_fmt(aerr)}", seeds=seeds))
        c1 = eta / (4 * l_max * star**2)
        ratio_l, ratio_a = -lr / c1, -ar / c1
        details["theorem2_rate"] = list(c1)
        out.append(specs[1].result(np.minimum(ratio_l, ratio_a),  # (S,)
                                   f"C_1 {_fmt(c1)} (L_max {_fmt(l_max)}); -rate / C_1: loss {_fmt(ratio_l)}, "
                                   f"attention {_fmt(ratio_a)}", seeds=seeds))
    out.append(_norm_band(config, frame, extras, star, l_max, no_target))
    out.append(_qp_vs_prop2(frame, extras, total))
    return out, details


def _norm_band(config, frame, extras, star, l_max, no_target) -> Claim:
    spec = cs.NORM_BAND_THEOREM1
    T, eta = config.train.steps_stage1, extras["eta"]
    if config.train.algorithm != "two_stage":
        return spec.not_testable("the band is for stage 2 of two-stage training")
    if config.model.init != "zero":
        return spec.not_testable("Theorem 1 starts W_kq at 0 (model.init=zero)")
    if no_target:
        return spec.not_testable("no max-margin target W_kq* exists for this data")
    steps, norms = series(frame, "W_kq.fro")  # (T,), (T, S)
    sel = steps > T
    if not sel.any():
        return spec.not_testable("no stage-2 step logged")
    t = (steps[sel] - T).astype(float)[:, None]  # (n, 1) stage time
    w = norms[sel]  # (n, S)
    upper = np.nanmax(w / (t * eta), axis=0)  # (S,) <= 1
    lower = np.nanmin(w / (t * eta / (2 * star)), axis=0)  # (S,) >= 1
    lemma6 = np.nanmin(w / (t * eta / (2 * l_max * star)), axis=0)  # (S,) >= 1
    excursion = np.maximum(upper - 1, 1 - lower)  # (S,) <= BAND_RTOL inside the band
    return spec.result(excursion,
                       f"max ||W_kq|| / (t eta) {_fmt(upper)} (<= 1); min ||W_kq|| / (t eta / (2||W*||)) {_fmt(lower)} "
                       f"(>= 1); Lemma 6's bound t eta / (2 L_max ||W*||): min ratio {_fmt(lemma6)}", seeds=extras["seeds"])


def _qp_vs_prop2(frame, extras, total) -> Claim:
    spec = cs.CLOSER_TO_QP
    mutual = np.asarray(extras["qp_prop2_cos"], dtype=float)  # (S,)
    if not np.all(np.isfinite(mutual)):
        return spec.not_testable("no QP max-margin target exists for this data")
    differ = 1 - mutual > PROP2_DISTINCT_TOL
    if not differ.any():
        return spec.not_testable(f"the QP solution and Proposition 2 coincide on every seed "
                                 f"(1 - cos <= {PROP2_DISTINCT_TOL}; max {np.nanmax(1 - mutual):.2g})")
    qp = 1 - values_at(frame, "W_kq.cos_target", total)[differ]
    p2 = 1 - values_at(frame, "W_kq.cos_prop2", total)[differ]
    dq = values_at(frame, "W_kq.dist_target", total)[differ]
    dp = values_at(frame, "W_kq.dist_prop2", total)[differ]
    seeds = [s for s, d in zip(extras["seeds"], differ) if d]
    return spec.result(qp - p2,
                       f"{int(differ.sum())}/{len(differ)} seeds differ (1 - cos(W_qp, W_p2) {_fmt(1 - mutual[differ])}); "
                       f"at t={total}: 1 - cos to QP {_fmt(qp)}, to Prop. 2 {_fmt(p2)}; distance of unit directions "
                       f"to QP {_fmt(dq)}, to Prop. 2 {_fmt(dp)}", seeds=seeds)
