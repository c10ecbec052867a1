"""Summary of an NTP run: final values, fitted rates and claims, all computed from the
logged metrics (the long-form frame) and the run's extras (targets, generalization); the
claims are judged in :mod:`.claims`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...measure import detect_stages, linear_fit, log_linear_rate, power_exponent, series, values_at
from ...report.claims import Stats, Summary
from ..contract import RunResult, Tables
from .claims import horizon_claims, training_claims
from .config import Config
from .horizon import GAPS

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
        claims=training_claims(config, frame, extras, rates, gen),
        details=details,
    )
