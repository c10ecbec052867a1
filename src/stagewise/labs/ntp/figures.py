"""Figures of the NTP lab: the paper's Figure 2 panels, rate fits and attention mass, drawn
from the logged metrics with the conventions of :mod:`stagewise.report.plots`.

The cosines to the max-margin directions are undefined while their matrix is all zero (zero
init, or W_kq during stage 1; the run logs 0 there): the figures draw those steps as gaps
(:func:`stagewise.report.plots.gap_where_zero` with ``W_ov.fro`` / ``W_kq.fro``). The
generalization cases are a table, not a figure: they are in ``tables/generalization``
(seed, input, category, predicted, expected, covered, correct, ...) and, per category, in
``summary.details["generalization"]`` and ``summary.details["named_cases"]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...measure import series
from ...report.claims import Summary
from ...report.plots import (MAX_SEED_LINES, PALETTE, SLOPE_ONLY, STEP_LABEL, gap_where_zero, has_values, label_axes,
                             legend_outside, panel_grid, save, seed_lines, series_gid)
from ..contract import Tables
from .config import Config

COSINE = "cosine (unitless)"
FIG2_PANELS = [("train.loss.stage1", "$L_0$ (stage-1 loss)", "$L_0$ (nats)"),
               ("W_ov.cos_target", r"cos($W_{ov}$, $W_{ov}^*$)", COSINE),
               ("W_ov.fro", r"$\|W_{ov}\|_F$", "Frobenius norm (weight units)"),
               ("train.loss", "$L$ (main loss)", "$L$ (nats)"),
               ("W_kq.cos_target", r"cos($W_{kq}$, $W_{kq}^*$)", COSINE),
               ("W_kq.fro", r"$\|W_{kq}\|_F$", "Frobenius norm (weight units)")]
UNDEFINED_AT_ZERO = (("W_ov.cos_target", "W_ov.fro"), ("W_kq.cos_target", "W_kq.fro"))  # (cosine, the norm of its matrix)
EXACT = 1e-12  # |1 - cos| below this at every step: the direction is exact up to round-off (no log-log plot)
LOG_FLOOR = 1e-17  # smallest value drawn on a log axis (an exact zero would have no place)
SHAPE_FROM = 3  # theory shapes are drawn from this stage time on (log t / t is 0 at t = 1)


def _stage_line(ax, config: Config) -> None:
    if config.train.algorithm == "two_stage" and config.train.steps_stage1 > 0:
        ax.axvline(config.train.steps_stage1, color="0.5", ls=":", lw=0.8)


def defined(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each cosine NaN where its matrix is all zero (:data:`UNDEFINED_AT_ZERO`)."""
    for metric, norm in UNDEFINED_AT_ZERO:
        frame = gap_where_zero(frame, metric, norm)
    return frame


def _never(names: list[str]) -> str:
    return f"; not drawn (no value at any step): {', '.join(names)}" if names else ""


def figure2(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Figure 2: losses, cosines to the max-margin directions and norms against the step,
    one line per seed and their mean; a metric without any value is left out (named in the
    title)."""
    panels = [p for p in FIG2_PANELS if has_values(frame, p[0])]
    missing = [p[0] for p in FIG2_PANELS if p not in panels]
    fig, axes = panel_grid(len(panels), legend=False)
    for ax, (metric, title, ylabel) in zip(axes.flat, panels):
        seed_lines(ax, frame, metric)
        ax.set_title(title)
        label_axes(ax, STEP_LABEL, ylabel)
        _stage_line(ax, config)
    n = frame["seed"].nunique()
    fig.suptitle(f"NTP lab: two-stage dynamics ({n} seed{'s' if n > 1 else ''}; dotted: end of stage 1; "
                 f"gaps: cosine of an all-zero matrix){_never(missing)}", fontsize=9)
    return save(fig, folder, "figure2")


def _rate_panels(config: Config, frame: pd.DataFrame) -> tuple[list[tuple], list[str]]:
    """([(metric, origin, tau (T',), gap (T', S), title, shape name, shape)], notes): the
    cosine panels with a drawable 1 - cos, and why the others are left out."""
    two_stage = config.train.algorithm == "two_stage"
    T = config.train.steps_stage1 if two_stage else 0
    total = config.train.steps_stage1 + config.train.steps_stage2
    specs = [("W_ov.cos_target", 0, T if two_stage else total, r"$1-\cos(W_{ov})$", "log t/t", lambda t: np.log(t) / t),
             ("W_kq.cos_target", T, total, r"$1-\cos(W_{kq})$", r"log$^2$ t/t", lambda t: np.log(t) ** 2 / t)]
    panels, notes = [], []
    for metric, origin, end, title, shape_name, shape in specs:
        steps, values = series(frame, metric)
        sel = (steps > origin) & (steps <= end)
        gap = 1 - values[sel]  # (T', S)
        known = gap[~np.isnan(gap)]  # every defined value of 1 - cos in the window
        if not known.size:
            notes.append(f"{metric}: no value (no target direction, or an all-zero matrix)")
        elif np.abs(known).max() < EXACT:
            notes.append(f"{metric}: |1 - cos| <= {np.abs(known).max():.1e} at every step (exact up to round-off)")
        else:
            panels.append((metric, origin, steps[sel] - origin, gap, title, shape_name, shape))
    return panels, notes


def rate_fits(config: Config, frame: pd.DataFrame, summary: Summary, folder: Path) -> list[Path]:
    """1 - cos against stage time on log axes beside the theory's log t / t (W_ov) and
    log^2 t / t (W_kq) shapes, and L - floor. Only the slope of a shape is compared: it is
    scaled to meet the median over seeds in geometric mean over the window (label: "slope
    only"). A cosine with no value or an exact direction gets no panel (said in the title)."""
    T = config.train.steps_stage1 if config.train.algorithm == "two_stage" else 0
    panels, notes = _rate_panels(config, frame)
    steps, loss_gap = series(frame, "train.loss.gap")
    sel = steps > T
    draw_loss = bool(np.isfinite(loss_gap[sel]).any()) if loss_gap.size else False
    if not draw_loss:
        notes.append("train.loss.gap: no value")
    if not panels and not draw_loss:
        return []
    fig, axes = panel_grid(len(panels) + draw_loss)
    flat = list(axes.flat)
    for ax, (_metric, origin, tau, gap, title, shape_name, shape) in zip(flat, panels):
        for col in range(min(gap.shape[1], MAX_SEED_LINES)):
            ax.loglog(tau, np.clip(gap[:, col], LOG_FLOOR, None), color=PALETTE[0], alpha=0.5, lw=0.8,
                      label="1 - cos, one line per seed" if col == 0 else None)
        series_gid(ax, "data")
        ref_t = tau[tau >= SHAPE_FROM].astype(float)
        with np.errstate(all="ignore"):
            middle = np.nanmedian(gap[tau >= SHAPE_FROM], axis=1) if len(ref_t) else np.zeros(0)  # (T'',)
        ok = np.isfinite(middle) & (middle > 0)
        if ok.any():
            ref = shape(ref_t)
            ref = ref * np.exp(np.mean(np.log(middle[ok])) - np.mean(np.log(ref[ok])))
            ax.loglog(ref_t, ref, "k--", lw=1, label=f"theory {shape_name}\n({SLOPE_ONLY})", gid="theory")
        ax.set_title(title + (" (stage time t - T)" if origin else ""))
        label_axes(ax, "stage-2 step t - T" if origin else STEP_LABEL, "1 - cosine (unitless)")
        legend_outside(ax)
    if draw_loss:
        ax = flat[len(panels)]
        ax.semilogy(steps[sel], np.clip(loss_gap[sel][:, :MAX_SEED_LINES], LOG_FLOOR, None), color=PALETTE[1], lw=0.8,
                    alpha=0.6)
        series_gid(ax, "train.loss.gap")
        rates = np.asarray([r for r in summary.details.get("rates", {}).get("train.loss.gap.rate", []) if r is not None],
                           dtype=float)  # (S',) seeds with a fit (JSON null: no fit)
        rates = rates[~np.isnan(rates)]
        ax.set_title(f"$L$ - floor (fitted rate {rates.mean():.3g}/step)" if rates.size else "$L$ - floor (no fitted rate)")
        label_axes(ax, STEP_LABEL, "$L$ - floor (nats)")
    if notes:
        fig.suptitle("not drawn: " + "; ".join(notes), fontsize=8)
    return save(fig, folder, "rate_fits")


def attention_figure(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Attention mass on the optimal positions (min and mean over samples) and the mean key
    score by token type, against the step; a panel none of whose metrics has a value is
    left out (no figure when neither has one)."""
    mass = [("train.opt_attn.min", "min over samples", PALETTE[2]), ("train.opt_attn.mean", "mean over samples", PALETTE[0])]
    scores = [(m, m.removeprefix("train.score.").replace("_", "-"), c) for m, c in
              (("train.score.optimal", PALETTE[2]), ("train.score.non_comparable", PALETTE[9]),
               ("train.score.non_optimal", PALETTE[1]))]
    panels = [(curves, title, ylabel) for curves, title, ylabel in (
        (mass, "attention mass on optimal positions", "attention mass (fraction)"),
        (scores, r"mean key score $x^T W_{kq} x_q$ by token type", "key score (logit units)"))
        if any(has_values(frame, m) for m, _, _ in curves)]
    if not panels:
        return []
    fig, axes = panel_grid(len(panels))
    for ax, (curves, title, ylabel) in zip(axes.flat, panels):
        for metric, label, color in curves:
            seed_lines(ax, frame, metric, label=label, color=color)
        ax.set_title(title)
        label_axes(ax, STEP_LABEL, ylabel)
        _stage_line(ax, config)
        legend_outside(ax)
    return save(fig, folder, "attention")


def make_figures(config: Config, frame: pd.DataFrame, tables: Tables, summary: Summary, folder: str | Path) -> list[Path]:
    """All figures of a finished run into ``folder`` (PNG and PDF); the generalization cases
    are tables (module docstring)."""
    folder = Path(folder)
    frame = defined(frame)
    return figure2(config, frame, folder) + rate_fits(config, frame, summary, folder) + attention_figure(config, frame, folder)
