"""The ntp lab's claims judged: every :class:`~stagewise.report.claims.Claim` the lab gives is
built here, from measured values, as an instance of a declared :mod:`.claimspecs` claim (its
verdict from the verdict engine, :mod:`stagewise.report.verdicts`). What is measured stays
where it is measured: the rate fits in :mod:`.summary`, the late-window fits and Theorem 1's
band ratios in :mod:`.horizon`, the variants' final values in :mod:`.compare`.

Three groups, one function each (docs/ntp.md sections 4, 10 and 12):

- :func:`training_claims`: the claims of one training (stage 1, stage 2, generalization,
  Example 1, and the long-horizon claims below), each under the theory's preconditions for it;
  data outside the theory's assumptions leaves only :data:`STAGE1_CLAIMS` testable.
- :func:`horizon_claims`: the late rates against the margin's growth rate -eta/||W_kq*||
  (relative error <= :data:`RATE_RTOL`), Theorem 2's rate C_1 = eta / (4 L_max ||W_kq*||^2),
  Theorem 1's band t eta / (2 ||W_kq*||) <= ||W_kq(t)|| <= t eta (slack :data:`BAND_RTOL`),
  and the QP target against Proposition 2's (seeds where they differ by more than
  :data:`PROP2_DISTINCT_TOL`). The rate claims need the late window's predicted margin
  (T1/2) eta / ||W_kq*|| >= :data:`~.horizon.LATE_MIN_MARGIN` on every seed.
- :func:`compare_claims`: strict per-seed inequalities between the variants of one
  comparison run at the last step (:class:`VariantFinals`), fixed before the runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...measure import values_at
from ...report.claims import Claim, ClaimSpec
from . import claimspecs as cs
from .config import Config
from .horizon import GAPS, LATE_MIN_MARGIN, late_fits, norm_band

RATE_RTOL = cs.LATE_RATE_MARGIN.threshold  # 0.05: |fitted rate / (-eta/||W*||) - 1| allowed (the local rate deviates ~ c / margin)
BAND_RTOL = cs.NORM_BAND_THEOREM1.threshold  # 1e-9: round-off slack on Theorem 1's band (||W(1)|| = eta exactly)
PROP2_DISTINCT_TOL = 1e-6  # the QP and Proposition-2 directions differ when 1 - cos(W_qp, W_p2) > this

STAGE1_CLAIMS = ("stage1_direction", "stage1_exact", "stage1_norm_exact", "loss_floor_closed_form")
"""The claims that need only the collocation samples (derived for any map n): kept under breaches of the assumptions."""

NO_VALUE = "nan (no seed has a value)"
"""How :func:`_stats_text` shows values of which none is known (all NaN, or none logged)."""


def _stats_text(values) -> str:
    """Per-seed values (S,) as one text: the value when S = 1, else ``min .., mean .., max
    ..`` over the seeds whose value is known (not NaN), with the count of NaN seeds;
    ``NO_VALUE`` when no seed has one (a metric undefined for this data, e.g. cos(W_kq,
    W_kq*) without a max-margin target, or a fit on an empty window). No statistic is taken
    of an empty selection."""
    arr = np.asarray(values, dtype=float).ravel()  # (S,)
    if arr.size == 1:
        return f"{arr.item():.6g}"
    known = arr[~np.isnan(arr)]
    if not known.size:
        return NO_VALUE
    unknown = f" ({arr.size - known.size} of {arr.size} seeds nan)" if known.size < arr.size else ""
    return f"min {known.min():.6g}, mean {known.mean():.6g}, max {known.max():.6g}{unknown}"


def _range_text(values) -> str:
    """Per-seed values (S,) as ``min..max`` (4 digits; the value itself when S = 1; ``nan``
    when no seed has one, without numpy's All-NaN warning): the long-horizon evidence."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 1:
        return f"{arr.item():.4g}"
    if np.isnan(arr).all():  # no seed has a value (e.g. no fit): said as such, no All-NaN warning
        return "nan"
    return f"{np.nanmin(arr):.4g}..{np.nanmax(arr):.4g}"


def _bounds_text(values) -> str:
    """Per-seed values (S,) as ``min..max`` (4 digits, also when S = 1): the comparison evidence."""
    arr = np.asarray(values, dtype=float)
    return f"{np.nanmin(arr):.4g}..{np.nanmax(arr):.4g}"


# --- one training (docs/ntp.md section 4) ------------------------------------------------------------------------------
def training_claims(config: Config, frame: pd.DataFrame, extras: dict[str, Any], rates: dict[str, Any],
                    gen: pd.DataFrame) -> list[Claim]:
    """The theory's predictions tested on one training, each an instance of a declared
    :mod:`.claimspecs` claim (its verdict from the declared relation and threshold). Each
    claim applies only under the theory's preconditions for it (e.g. the exact stage-1
    claims need zero init); a claim outside them is left out or not testable.

    ``frame``: the training's long-form records (no variant prefix); ``rates``: its per-seed
    fits (:func:`.summary.rate_fits`, lists of length S); ``gen``: the generalization table
    (one row per seed and case: ``seed``, ``category``, ``covered``, ``correct``)."""
    T, total = config.train.steps_stage1, config.train.steps_stage1 + config.train.steps_stage2
    two_stage = config.train.algorithm == "two_stage"
    ngd = config.train.optimizer == "normalized_gd"
    seeds = extras["seeds"]
    out = []
    if two_stage and T > 0:
        cos_t = values_at(frame, "W_ov.cos_target", T)
        out.append(cs.STAGE1_DIRECTION.result(cos_t, f"cos(W_ov, W_ov*) at t={T}: {_stats_text(cos_t)}", seeds=seeds))
        if ngd and config.model.init == "zero" and extras["orthonormal"]:
            out += _stage1_exact_claims(frame, extras, rates, T)
    r2 = np.asarray(rates["W_kq.fro.r2"])
    slope = np.asarray(rates["W_kq.fro.slope"])
    step = rates["eta"] if two_stage else rates["eta0"]
    out.append(cs.NORMS_LINEAR.result(r2, f"R^2 {_stats_text(r2)}; slope/eta {_stats_text(slope / step)}", seeds=seeds))
    cos_end = values_at(frame, "W_kq.cos_target", total)
    expo = np.asarray(rates["W_kq.cos_target.gap.exponent"])
    out.append(cs.COS_WKQ_TO_ONE.result(cos_end, f"cos at t={total}: {_stats_text(cos_end)}", seeds=seeds))
    out.append(cs.COS_WKQ_EXPONENT.result(expo, f"exponent of 1 - cos vs t: {_stats_text(expo)} (theory: ~1 up to log factors)",
                                          seeds=seeds))
    rate = np.asarray(rates["train.loss.gap.rate"])
    gr2 = np.asarray(rates["train.loss.gap.r2"])
    out.append(cs.LOSS_LINEAR.result(rate, f"slope {_stats_text(rate)}; R^2 {_stats_text(gr2)}", seeds=seeds))
    out.append(cs.LOSS_LINEAR_FIT.result(gr2, f"R^2 {_stats_text(gr2)}; slope {_stats_text(rate)}", seeds=seeds))
    start = T if two_stage else 0
    start_attn = values_at(frame, "train.opt_attn.min", start)
    end_attn = values_at(frame, "train.opt_attn.min", total)
    arate, ar2 = np.asarray(rates["train.opt_attn.min.gap.rate"]), np.asarray(rates["train.opt_attn.min.gap.r2"])
    attn = (f"min optimal attention at t={start}: {_stats_text(start_attn)}; at t={total}: {_stats_text(end_attn)}; "
            f"rate of log(1 - mass) {_stats_text(arate)} (R^2 {_stats_text(ar2)})")
    out.append(cs.ATTENTION_CONCENTRATES.result(arate, attn, seeds=seeds))
    out.append(cs.ATTENTION_FIT.result(ar2, attn, seeds=seeds))
    if len(start_attn) == len(end_attn):
        out.append(cs.ATTENTION_RISES.result(end_attn - start_attn, attn, seeds=seeds))
    else:
        out.append(cs.ATTENTION_RISES.not_testable(f"min optimal attention not logged at t={start} and t={total}", attn))
    covered = gen[gen["covered"].astype(bool)] if len(gen) else gen
    if len(covered):
        acc = covered.groupby("seed")["correct"].apply(lambda c: c.astype(bool).mean())
        out.append(cs.GENERALIZATION.result({int(s): float(a) for s, a in acc.items()},
                                            f"{int(covered['correct'].sum())}/{len(covered)} covered cases correct; "
                                            f"{int((~gen['covered'].astype(bool)).sum())} uncovered cases reported separately"))
    extra, _ = horizon_claims(config, frame, extras)
    out += extra
    for row in [r for r in extras["named_cases"] if r["seed"] == extras["seeds"][0]]:
        cases = [r for r in extras["named_cases"] if r["input"] == row["input"]]
        preds = [r["predicted"] for r in cases]
        out.append(cs.EXAMPLE1.result({int(r["seed"]): float(r["predicted"] == row["expected"]) for r in cases},
                                      f"predicted {', '.join(sorted(set(preds)))}", case=row["input"].replace(" ", "_"),
                                      statement=f"'{row['input']}' predicts {row['expected']}"))
    kinds = extras.get("violations") or []
    if kinds:
        reason = f"data outside the theory's assumptions (data.out_of_assumption: {', '.join(kinds)})"
        out = [c if c.id in STAGE1_CLAIMS else c.with_not_testable(reason) for c in out]
    return out


def _stage1_exact_claims(frame: pd.DataFrame, extras: dict[str, Any], rates: dict[str, Any], T: int) -> list[Claim]:
    """stage1_exact, stage1_norm_exact and loss_floor_closed_form (zero init, normalized GD,
    orthonormal embeddings): per-seed round-off errors against the exact stage-1 solution,
    max_t |1 - cos(W_ov, W_ov*)| and max_t | ||W_ov(t)|| - t eta0 | over steps 1..T (the
    latter before the member froze), and |floor(T) - log(1 + (|V|-1) e^-Delta)| / max(1,
    closed form) with Delta = T eta0 / sqrt(|V|-1)."""
    seeds = extras["seeds"]
    rows = frame[(frame["step"] >= 1) & (frame["step"] <= T)]
    cos_err, norm_err = {}, {}
    for seed in seeds:
        mine = rows[rows["seed"] == seed]
        cos = mine[mine["metric"] == "W_ov.cos_target"]
        norm = mine[mine["metric"] == "W_ov.fro"]
        frozen = mine[(mine["metric"] == "frozen") & (mine["value"] > 0)]
        moving = norm if frozen.empty else norm[norm["step"] < frozen["step"].min()]
        cos_err[seed] = float((1 - cos["value"]).abs().max()) if len(cos) else math.nan
        norm_err[seed] = float((moving["value"] - moving["step"] * rates["eta0"]).abs().max()) if len(moving) else math.nan
    vocab = extras["vocab_size"]
    delta = T * rates["eta0"] / math.sqrt(vocab - 1)
    closed = math.log1p((vocab - 1) * math.exp(-delta))
    floor = values_at(frame, "train.loss.floor", T)
    err = np.abs(floor - closed) / max(1.0, closed)  # (S,)
    return [
        cs.STAGE1_EXACT.result(cos_err, f"max |1 - cos| over steps 1..{T}: {_stats_text(list(cos_err.values()))}"),
        cs.STAGE1_NORM_EXACT.result(norm_err, f"max | ||W_ov|| - t*eta0 | before freezing: {_stats_text(list(norm_err.values()))}"),
        cs.LOSS_FLOOR_CLOSED_FORM.result(err, f"closed form {closed:.6g}; measured {_stats_text(floor)}; max error "
                                              f"{float(np.max(np.abs(floor - closed))) if len(floor) else math.nan:.3g}",
                                         seeds=seeds),
    ]


# --- the long horizon (docs/ntp.md section 10) -------------------------------------------------------------------------
def horizon_claims(config: Config, frame: pd.DataFrame, extras: dict[str, Any]) -> tuple[list[Claim], dict[str, Any]]:
    """The claims (a) late_rate_margin, (b) late_rate_theorem2, (c) norm_band_theorem1 and
    closer_to_qp_than_prop2 of one training, plus the numbers behind them (for ``details``:
    ``late_rates``, :func:`.horizon.late_fits`, where the late window can be fitted;
    ``theorem2_rate``, C_1 per seed, where the rate claims are testable).

    (a) per seed the worse relative error max(|r_L / r* - 1|, |r_A / r* - 1|) of the late
    rates of the loss gap r_L and the attention gap r_A against r* = -eta/||W_kq*||;
    (b) per seed min(-r_L / C_1, -r_A / C_1), C_1 = eta / (4 L_max ||W_kq*||^2) with L_max
    the longest training sentence (the strictest admissible value)."""
    seeds, eta = extras["seeds"], extras["eta"]
    T, T1 = config.train.steps_stage1, config.train.steps_stage2
    total = T + T1
    star = np.sqrt(np.array([t["wkq_star_norm_sq"] for t in extras["targets"]]))  # (S,)
    l_max = np.array(extras["max_len"], dtype=float)  # (S,) longest training sentence
    out: list[Claim] = []
    details: dict[str, Any] = {}
    no_target = not np.all(star > 0)

    # (a), (b): late rates
    specs = (cs.LATE_RATE_MARGIN, cs.LATE_RATE_THEOREM2)
    reason = _late_rate_precondition(config, no_target)
    if reason is None:
        fits = late_fits(config, frame, seeds, eta, star)
        details["late_rates"] = fits
        margin0 = np.asarray(fits["margin_at_start"])
        if np.min(margin0) < LATE_MIN_MARGIN:
            need = int(np.ceil(2 * LATE_MIN_MARGIN * star.max() / eta))
            reason = (f"horizon too short: the predicted margin at the late window's start (stage step "
                      f"{fits['window_stage_steps'][0]}) is {_range_text(margin0)} < {LATE_MIN_MARGIN} (needs T1 >= {need})")
    if reason is not None:
        out += [spec.not_testable(reason) for spec in specs]
    else:
        pred = np.asarray(fits["predicted_rate"])
        lr, ar = (np.asarray(fits[f"{key}.rate"]) for key in GAPS.values())
        lerr, aerr = lr / pred - 1, ar / pred - 1
        window = f"stage steps {fits['window_stage_steps'][0]}..{fits['window_stage_steps'][1]}"
        out.append(specs[0].result(np.maximum(np.abs(lerr), np.abs(aerr)),  # (S,) the worse of the two gaps
                                   f"{window}: loss-gap rate {_range_text(lr)}, attention-gap rate {_range_text(ar)}, -eta/||W*|| "
                                   f"{_range_text(pred)}; relative error loss {_range_text(lerr)}, attention {_range_text(aerr)}",
                                   seeds=seeds))
        c1 = eta / (4 * l_max * star**2)
        ratio_l, ratio_a = -lr / c1, -ar / c1
        details["theorem2_rate"] = list(c1)
        out.append(specs[1].result(np.minimum(ratio_l, ratio_a),  # (S,)
                                   f"C_1 {_range_text(c1)} (L_max {_range_text(l_max)}); -rate / C_1: loss {_range_text(ratio_l)}, "
                                   f"attention {_range_text(ratio_a)}", seeds=seeds))
    out.append(_norm_band_claim(config, frame, extras, star, l_max, no_target))
    out.append(_qp_vs_prop2_claim(frame, extras, total))
    return out, details


def _late_rate_precondition(config: Config, no_target: bool) -> str | None:
    """Why the late rates cannot be fitted for ``config`` (None when they can): the rate
    -eta/||W_kq*|| is derived for stage 2 of two-stage training, needs a max-margin target
    and a stage 2 of at least 3 steps. The horizon's length is checked on the fits."""
    T1 = config.train.steps_stage2
    if config.train.algorithm != "two_stage":
        return "the rate -eta/||W_kq*|| is derived for stage 2 of two-stage training (W_ov frozen)"
    if no_target:
        return "no max-margin target W_kq* exists for this data"
    if T1 < 3:
        return f"stage 2 has {T1} steps"
    return None


def _norm_band_claim(config: Config, frame: pd.DataFrame, extras: dict[str, Any], star: np.ndarray, l_max: np.ndarray,
                     no_target: bool) -> Claim:
    """norm_band_theorem1 on :func:`.horizon.norm_band`'s excursion (S,) outside Theorem 1's
    band, under its preconditions (two-stage training, zero init, a target W_kq*)."""
    spec = cs.NORM_BAND_THEOREM1
    T, eta = config.train.steps_stage1, extras["eta"]
    if config.train.algorithm != "two_stage":
        return spec.not_testable("the band is for stage 2 of two-stage training")
    if config.model.init != "zero":
        return spec.not_testable("Theorem 1 starts W_kq at 0 (model.init=zero)")
    if no_target:
        return spec.not_testable("no max-margin target W_kq* exists for this data")
    band = norm_band(frame, T, eta, star, l_max)
    if band is None:
        return spec.not_testable("no stage-2 step logged")
    return spec.result(band.excursion,
                       f"max ||W_kq|| / (t eta) {_range_text(band.upper)} (<= 1); min ||W_kq|| / (t eta / (2||W*||)) "
                       f"{_range_text(band.lower)} (>= 1); Lemma 6's bound t eta / (2 L_max ||W*||): min ratio "
                       f"{_range_text(band.lemma6)}", seeds=extras["seeds"])


def _qp_vs_prop2_claim(frame: pd.DataFrame, extras: dict[str, Any], total: int) -> Claim:
    """closer_to_qp_than_prop2 on (1 - cos(W_kq, W_qp)) - (1 - cos(W_kq, W_prop2)) at t =
    ``total``, on the seeds where the two targets differ (1 - cos(W_qp, W_prop2) >
    PROP2_DISTINCT_TOL); not testable without a QP target or where they coincide everywhere."""
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
                       f"{int(differ.sum())}/{len(differ)} seeds differ (1 - cos(W_qp, W_p2) {_range_text(1 - mutual[differ])}); "
                       f"at t={total}: 1 - cos to QP {_range_text(qp)}, to Prop. 2 {_range_text(p2)}; distance of unit directions "
                       f"to QP {_range_text(dq)}, to Prop. 2 {_range_text(dp)}", seeds=seeds)


# --- the comparison experiment (docs/ntp.md section 12) ----------------------------------------------------------------
@dataclass(frozen=True)
class VariantFinals:
    """What the comparison claims read of one comparison run (:func:`.compare.variant_finals`):
    per variant of ``compare``, each reported metric at the last step t = ``total``
    (``values``: variant -> metric -> (S,), seeds in the order of ``seeds``)."""

    total: int
    seeds: list[int]
    values: dict[str, dict[str, np.ndarray]]


def compare_claims(finals: VariantFinals) -> list[Claim]:
    """The four comparison claims, each on a per-seed gap (S,) at the last step: ours - theirs,
    the smallest over the other variants where ours must be above every other, the largest
    where it must be below; not testable when a variant it names was not run."""
    total, final = finals.total, finals.values

    def test(spec: ClaimSpec, a: str, b: list[str], metric: str, larger: bool) -> Claim:
        """``spec`` on ours - theirs per seed: the smallest gap to ``b`` when ``larger`` (ours
        must be above every other), else the largest (ours must be below every other)."""
        missing = [v for v in [a, *b] if v not in final]
        if missing:
            return spec.not_testable(f"variant(s) {', '.join(missing)} not in compare")
        ours = final[a][metric]
        gaps = np.stack([ours - final[v][metric] for v in b])  # (len(b), S)
        gap = gaps.min(axis=0) if larger else gaps.max(axis=0)  # (S,)
        parts = [f"{v} {_bounds_text(final[v][metric])}" for v in [a, *b]]
        return spec.result(gap, f"{metric} at t={total}: " + ", ".join(parts), seeds=finals.seeds)

    return [
        test(cs.COMPARE_WKQ_JOINT, "two_stage", ["joint"], "W_kq.cos_target", True),
        test(cs.COMPARE_WOV_JOINT, "two_stage", ["joint"], "W_ov.cos_target", True),
        test(cs.COMPARE_WKQ_ADAM, "two_stage", ["adam", "adamw"], "W_kq.cos_target", True),
        test(cs.COMPARE_NORM_ADAMW, "adamw", ["adam"], "W_kq.fro", False),
    ]
