"""Figures of the NTP lab: the paper's six-panel Figure 2, rate fits, attention mass and
the generalization table. Every figure is drawn from the logged metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...measure import series
from ...report.plots import MAX_SEED_LINES, figure, save, seed_lines
from ...report.claims import Summary
from ..contract import Tables
from .config import Config

FIG2_PANELS = [("loss_stage1", "$L_0$ (stage-1 loss)"), ("cos_wov", r"cos($W_{ov}$, $W_{ov}^*$)"),
               ("norm_wov", r"$\|W_{ov}\|_F$"), ("loss", "$L$ (main loss)"),
               ("cos_wkq", r"cos($W_{kq}$, $W_{kq}^*$)"), ("norm_wkq", r"$\|W_{kq}\|_F$")]
EXACT = 1e-12  # |1 - cos| below this at every step: the direction is exact up to round-off (no log-log plot)


def _stage_line(ax, config: Config) -> None:
    if config.train.algorithm == "two_stage" and config.train.steps_stage1 > 0:
        ax.axvline(config.train.steps_stage1, color="0.5", ls=":", lw=0.8)


def figure2(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = figure(2, 3, (11, 6))
    for ax, (metric, title) in zip(axes.flat, FIG2_PANELS):
        seed_lines(ax, frame, metric)
        ax.set_title(title)
        ax.set_xlabel("t")
        _stage_line(ax, config)
    n = frame["seed"].nunique()
    fig.suptitle(f"NTP lab: two-stage dynamics ({n} seed{'s' if n > 1 else ''}; dotted: end of stage 1)")
    fig.tight_layout()
    return save(fig, folder, "figure2")


def rate_fits(config: Config, frame: pd.DataFrame, summary: Summary, folder: Path) -> list[Path]:
    """1 - cos against stage time on log axes beside the theory's log t / t (W_ov) and
    log^2 t / t (W_kq) shapes (scaled to the median over seeds at the last step), and L -
    floor. NaN values (cos with no target direction, a seed without a fit) are left out
    explicitly: a panel with none left says so instead of plotting."""
    two_stage = config.train.algorithm == "two_stage"
    T = config.train.steps_stage1 if two_stage else 0
    total = config.train.steps_stage1 + config.train.steps_stage2
    fig, axes = figure(1, 3, (13, 4))
    panels = [("cos_wov", 0, T if two_stage else total, r"$1-\cos(W_{ov})$", "log t/t", lambda t: np.log(t) / t),
              ("cos_wkq", T, total, r"$1-\cos(W_{kq})$", r"log$^2$ t/t", lambda t: np.log(t) ** 2 / t)]
    for ax, (metric, origin, end, title, shape_name, shape) in zip(axes[0], panels):
        steps, values = series(frame, metric)
        sel = (steps > origin) & (steps <= end)
        tau = steps[sel] - origin
        gap = 1 - values[sel]
        ax.set_title(title + (" (stage time t - T)" if origin else ""))
        ax.set_xlabel("t - T" if origin else "t")
        if not len(tau):
            continue
        known = gap[~np.isnan(gap)]  # every logged value of 1 - cos in the window
        if not known.size:  # cos undefined here (no max-margin target for this data)
            ax.text(0.5, 0.5, "no value of cos at any step:\nno target direction for this run",
                    ha="center", va="center", transform=ax.transAxes)
            continue
        if np.abs(known).max() < EXACT:
            ax.text(0.5, 0.5, f"|1 - cos| <= {np.abs(known).max():.1e} at every step:\nexact up to round-off",
                    ha="center", va="center", transform=ax.transAxes)
            continue
        for col in range(min(gap.shape[1], MAX_SEED_LINES)):
            ax.loglog(tau, np.clip(gap[:, col], 1e-17, None), color="C0", alpha=0.5, lw=0.8)
        ref_t = tau[tau >= 3].astype(float)
        last = gap[-1][~np.isnan(gap[-1])]  # (S',) seeds with a value at the last step
        if len(ref_t) and last.size:
            ref = shape(ref_t)
            ref = ref * (np.median(last) / ref[-1])
            ax.loglog(ref_t, ref, "k--", lw=1, label=f"theory shape {shape_name}")
            ax.legend(fontsize=8)
    ax = axes[0, 2]
    steps, gap = series(frame, "loss_gap")
    sel = steps > T
    ax.semilogy(steps[sel], np.clip(gap[sel][:, :MAX_SEED_LINES], 1e-17, None), color="C1", lw=0.8, alpha=0.6)
    rates = np.asarray([r for r in summary.details.get("rates", {}).get("loss_gap_rate", []) if r is not None],
                       dtype=float)  # (S',) seeds with a fit (JSON null: no fit)
    rates = rates[~np.isnan(rates)]
    ax.set_title(f"$L$ - floor (fitted rate {rates.mean():.3g}/step)" if rates.size else "$L$ - floor (no fitted rate)")
    ax.set_xlabel("t")
    fig.tight_layout()
    return save(fig, folder, "rate_fits")


def attention_figure(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = figure(1, 2, (10, 3.8))
    seed_lines(axes[0, 0], frame, "opt_attn_min", label="min over samples", color="C2")
    seed_lines(axes[0, 0], frame, "opt_attn_mean", label="mean over samples", color="C0")
    axes[0, 0].set_title("attention mass on optimal positions")
    axes[0, 0].legend(fontsize=8)
    for metric, color in (("score_optimal", "C2"), ("score_non_comparable", "C7"), ("score_non_optimal", "C3")):
        seed_lines(axes[0, 1], frame, metric, label=metric.replace("score_", "").replace("_", "-"), color=color)
    axes[0, 1].set_title(r"mean key score $x^T W_{kq} x_q$ by token type")
    axes[0, 1].legend(fontsize=8)
    for ax in axes[0]:
        ax.set_xlabel("t")
        _stage_line(ax, config)
    fig.tight_layout()
    return save(fig, folder, "attention")


def generalization(summary: Summary, rows: pd.DataFrame, folder: Path, max_rows: int = 24) -> list[Path]:
    """Table of unseen sentences of the first seed: input, predicted, expected by theory."""
    first = rows[rows["seed"] == rows["seed"].min()] if len(rows) else rows
    shown = pd.concat([g.head(max(2, max_rows // max(1, first["category"].nunique()))) for _, g in first.groupby("category", sort=False)]) if len(first) else first
    named = [r for r in summary.details.get("named_cases", []) if r["seed"] == summary.seeds[0]]
    cells = [[r["input"], "named (spec)", r["predicted"], r["expected"]] for r in named]
    cells += [[r.input, r.category, r.predicted, r.expected] for r in shown.itertuples()]
    fig, axes = figure(1, 1, (8, 0.9 + 0.24 * max(1, len(cells))))
    ax = axes[0, 0]
    ax.axis("off")
    if cells:
        table = ax.table(cellText=cells, colLabels=["input", "category", "predicted", "expected by theory"],
                         colWidths=[0.24, 0.36, 0.16, 0.24], cellLoc="left", loc="center")
        table.auto_set_font_size(False)
        table.set_fontsize(7.5)
        table.scale(1, 1.15)
        for cell in table.get_celld().values():  # token names are user text: a '$' is not mathtext
            cell.get_text().set_parse_math(False)
        for i, row in enumerate(cells, start=1):
            if row[3] != "not covered":
                table[i, 2].set_facecolor("#d9f2d9" if row[2] == row[3] else "#f8d0d0")
    acc = summary.final["gen_acc"].mean if "gen_acc" in summary.final else None
    acc = float("nan") if acc is None else acc
    ax.set_title(f"generalization (seed {summary.seeds[0]}); covered-case accuracy over seeds: {acc:.3f}")
    return save(fig, folder, "generalization")


def make_figures(config: Config, frame: pd.DataFrame, tables: Tables, summary: Summary, folder: str | Path) -> list[Path]:
    """All figures of a finished run into ``folder`` (PNG and PDF)."""
    folder = Path(folder)
    paths = figure2(config, frame, folder) + rate_fits(config, frame, summary, folder) + attention_figure(config, frame, folder)
    rows = tables.get("generalization")
    return paths + generalization(summary, rows if rows is not None else pd.DataFrame(), folder)
