"""Summary of an NTP run: final values, fitted rates and claims, all computed from the
logged metrics (the long-form frame) and the run's extras (targets, generalization)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...measure import detect_stages, linear_fit, log_linear_rate, power_exponent, series, values_at
from ...report.claims import Claim, Stats, Summary
from ..contract import RunResult, Tables
from . import claimspecs as cs
from .config import Config
from .horizon import GAPS, horizon_claims

FINAL_METRICS = ("train.loss", "train.loss.stage1", "train.loss.floor", "train.loss.gap", "W_ov.cos_target", "W_kq.cos_target",
                 "W_kq.cos_prop2", "W_ov.fro", "W_kq.fro", "train.opt_attn.min", "train.opt_attn.mean", "train.acc",
                 "test.acc.covered", "W_kq.grad_fro")

RATE_KEYS = ("W_ov.fro.slope", "W_ov.fro.r2", "W_kq.fro.slope", "W_kq.fro.r2", "W_ov.cos_target.gap.exponent",
             "W_kq.cos_target.gap.exponent", "W_kq.cos_target.gap.r2", "train.loss.gap.rate", "train.loss.gap.r2",
             "train.opt_attn.min.gap.rate", "train.opt_attn.min.gap.r2")
"""The per-seed fits of ``details.rates``, named ``{metric}.{fit}`` (docs/ntp.md section 4): ``.gap`` is the
metric's distance to its limit (L - floor is the logged ``train.loss.gap``; 1 - cos and 1 - attention mass are
not logged); ``slope`` / ``r2`` of a linear fit, ``exponent`` of a power law in t, ``rate`` of log(gap) in t."""


ALIGNED = 0.99  # cos(W, W*) from which a matrix counts as aligned with its max-margin direction (stage detection)
STAGE_CRITERIA = {"stage2_start": ("stage", 2.0, "above"),  # the schedule's stage 2 begins (logged stage = 2: step T + 1)
                  "wov_aligned": ("W_ov.cos_target", ALIGNED, "above"),
                  "wkq_aligned": ("W_kq.cos_target", ALIGNED, "above")}


def stage_detection(frame: pd.DataFrame) -> dict[str, Any]:
    """Per-seed stage boundaries (:meth:`~stagewise.measure.StageReport.as_dict`) of one
    training's records (no variant prefix): ``stage2_start``, the first logged step of the
    schedule's stage 2 (the configured T + 1; for ``algorithm=joint`` the same split of the
    step count); ``wov_aligned`` / ``wkq_aligned``, the first logged step where
    cos(W_ov, W_ov*) / cos(W_kq, W_kq*) >= ALIGNED (the first crossing; null where never
    reached). Criteria whose metric was not logged are left out."""
    logged = set(frame["metric"].unique())
    criteria = {name: c for name, c in STAGE_CRITERIA.items() if c[0] in logged}
    return detect_stages(frame, criteria).as_dict() if criteria else {"order": [], "stages": {}}


def _window(t: np.ndarray, start: int, end: int) -> np.ndarray:
    return (t >= start) & (t <= end)


def rate_fits(config: Config, frame: pd.DataFrame, seeds: list[int], eta0: float, eta: float) -> dict[str, Any]:
    """Per-seed fits: norm slopes, 1 - cos exponents, linear rate of log(L - floor).

    Stage-2 fits use time since the stage began (t - T); exponents use the second half of
    the stage, where the asymptotic regime is expected.
    """
    T, T1 = config.train.steps_stage1, config.train.steps_stage2
    total = T + T1
    two_stage = config.train.algorithm == "two_stage"
    s1 = (1, T) if two_stage else (1, total)
    s2 = (T + 1, total) if two_stage else (1, total)
    origin2 = T if two_stage else 0
    out: dict[str, list[float]] = {k: [] for k in RATE_KEYS}
    wide = {m: series(frame, m) for m in ("W_ov.fro", "W_kq.fro", "W_ov.cos_target", "W_kq.cos_target", *GAPS)}
    columns = {m: {s: i for i, s in enumerate(sorted(frame.loc[frame["metric"] == m, "seed"].unique()))} for m in wide}

    def seed_series(metric: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
        steps, values = wide[metric]  # (T,), (T, S): one pivot per metric, not per seed
        col = values[:, columns[metric][seed]]
        keep = ~np.isnan(col)
        return steps[keep], col[keep]

    for seed in seeds:
        t, nw = seed_series("W_ov.fro", seed)
        fit = linear_fit(t[_window(t, *s1)], nw[_window(t, *s1)])
        out["W_ov.fro.slope"].append(fit.slope)
        out["W_ov.fro.r2"].append(fit.r2)
        t, nk = seed_series("W_kq.fro", seed)
        fit = linear_fit(t[_window(t, *s2)], nk[_window(t, *s2)])
        out["W_kq.fro.slope"].append(fit.slope)
        out["W_kq.fro.r2"].append(fit.r2)
        t, cw = seed_series("W_ov.cos_target", seed)
        half = _window(t, (s1[0] + s1[1]) // 2, s1[1])
        out["W_ov.cos_target.gap.exponent"].append(-power_exponent(t[half], 1 - cw[half]).slope)
        t, ck = seed_series("W_kq.cos_target", seed)
        half = _window(t, (s2[0] + s2[1]) // 2, s2[1])
        fit = power_exponent(t[half] - origin2, 1 - ck[half])
        out["W_kq.cos_target.gap.exponent"].append(-fit.slope)
        out["W_kq.cos_target.gap.r2"].append(fit.r2)
        for metric, key in GAPS.items():
            t, values = seed_series(metric, seed)
            gap = values if metric == "train.loss.gap" else 1 - values
            sel = _window(t, (s2[0] + s2[1]) // 2, s2[1])
            fit = log_linear_rate(t[sel], gap[sel], floor=1e-12)
            out[f"{key}.rate"].append(fit.slope)
            out[f"{key}.r2"].append(fit.r2)
    return {**out, "eta0": eta0, "eta": eta}


NO_VALUE = "nan (no seed has a value)"
"""How :func:`_fmt` shows values of which none is known (all NaN, or none logged)."""


def _fmt(values) -> str:
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


def claims(config: Config, frame: pd.DataFrame, extras: dict[str, Any], rates: dict[str, Any],
           gen: pd.DataFrame) -> list[Claim]:
    """The theory's predictions tested on this run, each an instance of a declared
    :mod:`.claimspecs` claim (its verdict from the declared relation and threshold). Each
    claim applies only under the theory's preconditions for it (e.g. the exact stage-1
    claims need zero init); a claim outside them is left out or not testable."""
    T, total = config.train.steps_stage1, config.train.steps_stage1 + config.train.steps_stage2
    two_stage = config.train.algorithm == "two_stage"
    ngd = config.train.optimizer == "normalized_gd"
    seeds = extras["seeds"]
    out = []
    if two_stage and T > 0:
        cos_t = values_at(frame, "W_ov.cos_target", T)
        out.append(cs.STAGE1_DIRECTION.result(cos_t, f"cos(W_ov, W_ov*) at t={T}: {_fmt(cos_t)}", seeds=seeds))
        if ngd and config.model.init == "zero" and extras["orthonormal"]:
            out += _stage1_exact(frame, extras, rates, T)
    r2 = np.asarray(rates["W_kq.fro.r2"])
    slope = np.asarray(rates["W_kq.fro.slope"])
    step = rates["eta"] if two_stage else rates["eta0"]
    out.append(cs.NORMS_LINEAR.result(r2, f"R^2 {_fmt(r2)}; slope/eta {_fmt(slope / step)}", seeds=seeds))
    cos_end = values_at(frame, "W_kq.cos_target", total)
    expo = np.asarray(rates["W_kq.cos_target.gap.exponent"])
    out.append(cs.COS_WKQ_TO_ONE.result(cos_end, f"cos at t={total}: {_fmt(cos_end)}", seeds=seeds))
    out.append(cs.COS_WKQ_EXPONENT.result(expo, f"exponent of 1 - cos vs t: {_fmt(expo)} (theory: ~1 up to log factors)",
                                          seeds=seeds))
    rate = np.asarray(rates["train.loss.gap.rate"])
    gr2 = np.asarray(rates["train.loss.gap.r2"])
    out.append(cs.LOSS_LINEAR.result(rate, f"slope {_fmt(rate)}; R^2 {_fmt(gr2)}", seeds=seeds))
    out.append(cs.LOSS_LINEAR_FIT.result(gr2, f"R^2 {_fmt(gr2)}; slope {_fmt(rate)}", seeds=seeds))
    start = T if two_stage else 0
    start_attn = values_at(frame, "train.opt_attn.min", start)
    end_attn = values_at(frame, "train.opt_attn.min", total)
    arate, ar2 = np.asarray(rates["train.opt_attn.min.gap.rate"]), np.asarray(rates["train.opt_attn.min.gap.r2"])
    attn = (f"min optimal attention at t={start}: {_fmt(start_attn)}; at t={total}: {_fmt(end_attn)}; "
            f"rate of log(1 - mass) {_fmt(arate)} (R^2 {_fmt(ar2)})")
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


def _stage1_exact(frame: pd.DataFrame, extras: dict[str, Any], rates: dict[str, Any], T: int) -> list[Claim]:
    """stage1_exact, stage1_norm_exact and loss_floor_closed_form (zero init, normalized GD,
    orthonormal embeddings): per-seed round-off errors against the exact stage-1 solution."""
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
        cs.STAGE1_EXACT.result(cos_err, f"max |1 - cos| over steps 1..{T}: {_fmt(list(cos_err.values()))}"),
        cs.STAGE1_NORM_EXACT.result(norm_err, f"max | ||W_ov|| - t*eta0 | before freezing: {_fmt(list(norm_err.values()))}"),
        cs.LOSS_FLOOR_CLOSED_FORM.result(err, f"closed form {closed:.6g}; measured {_fmt(floor)}; max error "
                                              f"{float(np.max(np.abs(floor - closed))) if len(floor) else math.nan:.3g}",
                                         seeds=seeds),
    ]


# claims that need only the collocation samples (derived for any map n): kept under breaches
STAGE1_CLAIMS = ("stage1_direction", "stage1_exact", "stage1_norm_exact", "loss_floor_closed_form")


def summarize(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """The Summary: final values and per-seed values; details hold the targets (first
    seed), stage-1 values, rate fits, generalization by category, the named cases and
    ``stage_detection`` (:func:`stage_detection`: per-seed stage boundaries)."""
    extras = result.extras
    T, total = config.train.steps_stage1, config.train.steps_stage1 + config.train.steps_stage2
    seeds = extras["seeds"]
    rates = rate_fits(config, frame, seeds, extras["eta0"], extras["eta"])
    _, long_horizon = horizon_claims(config, frame, extras)
    gen = tables.get("generalization")
    gen = gen if gen is not None else pd.DataFrame(columns=["seed", "category", "covered", "correct"])
    by_category = {}
    if len(gen):
        for cat, rows in gen.groupby("category"):
            cov = rows[rows["covered"].astype(bool)]
            by_category[cat] = {"cases": int(len(rows)), "covered": int(len(cov)),
                                "accuracy_on_covered": float(cov["correct"].astype(bool).mean()) if len(cov) else None}
    finals = {m: values_at(frame, m, total) for m in FINAL_METRICS}
    finals = {m: v for m, v in finals.items() if len(v)}
    stage1 = {m: values_at(frame, m, T) for m in ("train.loss.stage1", "W_ov.cos_target", "W_ov.fro")}
    details: dict[str, Any] = {
        "vocab_size": extras["vocab_size"], "dim": extras["dim"], "lr_stage1": extras["eta0"], "lr_stage2": extras["eta"],
        "steps": {"stage1": T, "stage2": config.train.steps_stage2},
        **{k: extras["targets"][0][k] for k in ("wov_star_norm", "wkq_star_norm_sq", "prop2_wkq_norm_sq", "prop2_gap")},
        "end_of_stage1": {m: Stats.of(v).model_dump() for m, v in stage1.items() if len(v)},
        "rates": rates,
        **long_horizon,
        "generalization": by_category,
        "named_cases": extras["named_cases"],
        "stage_detection": stage_detection(frame),
    }
    return Summary(
        lab="ntp", seeds=seeds,
        final={m: Stats.of(v) for m, v in finals.items()},
        per_seed={str(s): {**extras["targets"][i], "n_samples": extras["n_samples"][i],
                           **{m: float(v[i]) for m, v in finals.items()}} for i, s in enumerate(seeds)},
        claims=claims(config, frame, extras, rates, gen),
        details=details,
    )
