"""Figures of the disentangled lab, drawn from the logged metrics with the conventions of
:mod:`stagewise.report.plots` (labelled axes, legends outside, distinct colours per panel,
grids that stay readable at the report's width). The per-variant stage numbers of an
ablation or grid run are a table, not a figure: ``summary.details["ablations"]`` /
``summary.details["grid"]`` (variant -> stage1/stage2 losses, Q-part accuracy,
``staged_fraction``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...measure import series
from ...report.claims import Summary
from ...report.plots import (PALETTE, STEP_LABEL, has_values, label_axes, legend_outside, panel_grid, palette, save,
                             seed_lines)
from ..contract import Tables
from .claims import LOG2, REVIEW_FLOOR, STAGED
from .config import Config

KIND_COLORS = (("p_only", PALETTE[0], "P-only"), ("q_only", PALETTE[1], "Q-only"), ("both", PALETTE[2], "both"))
ACCURACY = "test accuracy (fraction)"
BRANCH_LOSS = "branch loss (nats)"
FRACTION_PASSING = "fraction of seeds passing"
HEAT_PANEL = (3.6, 2.6)  # (width, height) inches of one heat-map panel
SV_SHOWN = 4  # top singular values drawn per matrix


def _stage_line(ax, config: Config) -> None:
    ax.axvline(config.train.t1, color="0.5", ls=":", lw=0.8)


def accuracy_panels(ax_acc, ax_loss, config: Config, frame: pd.DataFrame, prefix: str = "", legend: bool = True) -> None:
    """Test accuracy by query kind (dashed: the learned thresholds) and, with ``ax_loss``, the
    train branch losses K1, K2 against the step."""
    for kind, color, label in KIND_COLORS:
        seed_lines(ax_acc, frame, f"{prefix}test.acc.{kind}", label=label, color=color)
    th = config.thresholds
    ax_acc.axhline(th.p_learned, color=PALETTE[0], ls="--", lw=0.6)
    ax_acc.axhline(th.q_learned, color=PALETTE[1], ls="--", lw=0.6)
    ax_acc.set_ylim(0.3, 1.02)
    label_axes(ax_acc, STEP_LABEL, ACCURACY)
    if ax_loss is not None:
        seed_lines(ax_loss, frame, f"{prefix}train.K1", label="K1 (P part)", color=PALETTE[0])
        seed_lines(ax_loss, frame, f"{prefix}train.K2", label="K2 (Q part)", color=PALETTE[1])
        ax_loss.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
        label_axes(ax_loss, STEP_LABEL, f"train {BRANCH_LOSS}")
        legend_outside(ax_loss)
    for ax in (ax_acc, ax_loss):
        if ax is not None:
            _stage_line(ax, config)
    if legend:
        legend_outside(ax_acc)


def loss_level_panel(ax, config: Config, frame: pd.DataFrame, prefix: str = "") -> None:
    """Test K1 on P-bearing and K2 on Q-bearing queries, the run's and its shuffled-label
    control's (grey), with the thresholds of the per-seed claims."""
    th = config.thresholds
    control = f"{prefix.rstrip('/')}|control/" if prefix else "control/"
    seed_lines(ax, frame, f"{control}test.K2.q_queries", label="K2, control", color="0.6")
    seed_lines(ax, frame, f"{prefix}test.K1.p_queries", label="K1 (P part), P-bearing queries", color=PALETTE[0])
    seed_lines(ax, frame, f"{prefix}test.K2.q_queries", label="K2 (Q part), Q-bearing queries", color=PALETTE[1])
    ax.axhspan((1 - th.q_flat) * LOG2, (1 + th.q_flat) * LOG2, color=PALETTE[1], alpha=0.08, lw=0)
    ax.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
    ax.axhline(th.q_loss * LOG2, color=PALETTE[1], ls="--", lw=0.6, label=f"{th.q_loss:g} log 2")
    ax.axhline(REVIEW_FLOOR, color="0.5", ls="-.", lw=0.6, label="log(1 + 1/e)")
    label_axes(ax, STEP_LABEL, f"test {BRANCH_LOSS}")
    _stage_line(ax, config)
    legend_outside(ax)


def two_stage(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Accuracies, train branch losses, the loss level against its control, and the weight
    norms with their signal parts (2 x 2 panels; dotted: t1)."""
    fig, axes = panel_grid(4)
    accuracy_panels(axes[0, 0], axes[0, 1], config, frame)
    axes[0, 0].set_title("P-only / Q-only / both queries")
    axes[0, 1].set_title("train branch losses K1, K2")
    loss_level_panel(axes[1, 0], config, frame)
    axes[1, 0].set_title("loss level vs control (band: Q not learned)")
    norms = axes[1, 1]
    seed_lines(norms, frame, "W.fro", label="||W||_F", color=PALETTE[0])
    seed_lines(norms, frame, "V.fro", label="||V||_F", color=PALETTE[1])
    seed_lines(norms, frame, "W.signal", label="|w*^T W w*|", color=PALETTE[4], transform=lambda t, v: np.abs(v))
    seed_lines(norms, frame, "V.signal.sv.0", label="sigma_max(Z^T V Z)", color=PALETTE[3])
    norms.set_yscale("log")
    norms.set_title("weight norms and signal parts")
    label_axes(norms, STEP_LABEL, "norm (weight units)")
    legend_outside(norms)
    _stage_line(norms, config)
    fig.suptitle("two-stage dynamics (dotted: t1)", fontsize=9)
    return save(fig, folder, "two_stage")


def _heat(ax, grid: np.ndarray):
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                color="w" if not np.isnan(v) and v < 0.5 else "k")
    ax.grid(False)
    return image


def phase_diagram(config: Config, summary: dict[str, Any], folder: Path) -> list[Path]:
    """Fraction of seeds passing all four loss-level stage criteria (and each one) over the
    grid: two axes as a heat map (rows: the first axis, columns: the second), one panel per
    criterion and combination of any further axes; one axis: a single column."""
    from itertools import product

    axes_values = summary["grid_axes"]
    names = list(axes_values)
    row_ax, col_ax = names[0], names[1] if len(names) > 1 else None
    rest = names[2:]
    combos = list(product(*(axes_values[k] for k in rest))) or [()]
    criteria = ("staged", *STAGED)
    fig, axs = panel_grid(len(combos) * len(criteria), panel=HEAT_PANEL, legend=False)
    cells = summary["grid"]
    rows, cols = axes_values[row_ax], axes_values[col_ax] if col_ax else [None]
    image = None
    for n, (combo, criterion) in enumerate(product(combos, criteria)):
        fixed = dict(zip(rest, combo))
        ax = axs.flat[n]
        grid = np.full((len(rows), len(cols)), np.nan)  # (R, C)
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                point = {row_ax: rv, **({col_ax: cv} if col_ax else {}), **fixed}
                cell = cells.get(_variant_name(names, point), {})
                value = cell.get("staged_fraction") if criterion == "staged" else cell.get("pass_fraction", {}).get(criterion)
                grid[i, j] = np.nan if value is None else value
        image = _heat(ax, grid)
        ax.set_yticks(range(len(rows)), [f"{v:g}" for v in rows])
        ax.set_xticks(range(len(cols)), [f"{v:g}" for v in cols] if col_ax else [""])
        label_axes(ax, col_ax or "(one grid axis: single column)", row_ax)
        title = criterion.replace("_", " ") + ("" if not fixed else "\n" + ", ".join(f"{k}={v:g}" for k, v in fixed.items()))
        ax.set_title(title, fontsize=8, parse_math=False)
    fig.colorbar(image, ax=list(fig.axes), shrink=0.6, label=FRACTION_PASSING)
    fig.suptitle("phase diagram: per-seed loss-level stage criteria (thresholds fixed before the runs)", fontsize=9)
    return save(fig, folder, "phase_diagram")


def _variant_name(keys: list[str], point: dict[str, float]) -> str:
    """The grid variant name of a point (experiments.grid_variants' format)."""
    from .experiments import INTEGER_AXES

    return ",".join(f"{k}={(int(point[k]) if k in INTEGER_AXES else float(point[k])):g}" for k in keys)


def robustness(summary: dict[str, Any], folder: Path) -> list[Path]:
    """Fraction of seeds passing each criterion per (d, seed block) cell."""
    cells = summary["robustness"]
    names = list(cells)
    from .summary import cell_fraction

    extra = [k for k in ("q_drop_stage2", "anneal_gain", "control_no_gain") if any(cell_fraction(cells[n], k) is not None for n in names)]
    criteria = ("staged", *STAGED, *extra)
    grid = np.array([[cell_fraction(cells[n], k) for k in criteria] for n in names], dtype=float)  # (cells, criteria); None -> nan
    fig, axes = panel_grid(1, panel=(1.6 * len(criteria) + 2, 0.45 * len(names) + 1.5), legend=False)
    ax = axes[0, 0]
    image = _heat(ax, grid)
    ax.invert_yaxis()
    ax.set_xticks(range(len(criteria)), [c.replace("_", " ") for c in criteria], rotation=20, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    label_axes(ax, "stage criterion", "d, seed block")
    fig.colorbar(image, ax=ax, shrink=0.8, label=FRACTION_PASSING)
    ax.set_title("fraction of seeds passing, per d and seed block")
    return save(fig, folder, "robustness")


def _truncation_rows(config: Config, frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[(frame["step"] == config.train.steps) & frame["metric"].str.startswith("truncate.")]
    if not len(rows):
        return rows
    parts = rows["metric"].str.split(".", expand=True)  # truncate, keep, k, acc, kind
    rows = rows.assign(keep=parts[1], k=parts[2].astype(int), kind=parts[4])
    return rows[rows["kind"] != "both"]


def spectra(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Top singular values of W and V over training, stable ranks, and the truncation curves
    (a panel without data is left out)."""
    d = config.data.d
    svs = [(name, i) for name in ("W", "V") for i in range(min(d, SV_SHOWN)) if has_values(frame, f"{name}.sv.{i}")]
    truncation = _truncation_rows(config, frame)
    fig, axes = panel_grid(2 + bool(len(truncation)))
    flat = list(axes.flat)
    for (name, i), color in zip(svs, palette(len(svs))):
        steps, vals = series(frame, f"{name}.sv.{i}")
        with np.errstate(all="ignore"):
            flat[0].plot(steps, np.nanmean(vals, 1), color=color, lw=1, label=f"{name}: singular value {i + 1}")
    flat[0].set_title("top singular values (mean over seeds)")
    label_axes(flat[0], STEP_LABEL, "singular value (weight units)")
    seed_lines(flat[1], frame, "W.stable_rank", label="W", color=PALETTE[0])
    seed_lines(flat[1], frame, "V.stable_rank", label="V", color=PALETTE[1])
    flat[1].set_title("stable rank")
    label_axes(flat[1], STEP_LABEL, "stable rank (dimensions)")
    for ax in flat[:2]:
        _stage_line(ax, config)
        legend_outside(ax)
    if len(truncation):
        ax = flat[2]
        groups = list(truncation.groupby(["keep", "kind"]))
        for ((keep, kind), grp), color in zip(groups, palette(len(groups))):
            mean = grp.groupby("k")["value"].mean()
            ax.plot(mean.index, mean.values, marker="o", ms=3, ls="-" if keep == "top" else "--", color=color,
                    label=f"{keep}-k, {kind.replace('_', '-')}")
        label_axes(ax, "k singular directions kept (of 2d)", ACCURACY)
        ax.set_title("truncating blockdiag(W, V) at the end")
        legend_outside(ax)
    return save(fig, folder, "spectra")


def ablations(config: Config, frame: pd.DataFrame, summary: dict[str, Any], folder: Path, key: str = "ablations") -> list[Path]:
    """One accuracy panel per variant (the stage numbers per variant: ``summary.details[key]``,
    shown as a table by the report)."""
    variants = list(summary[key])
    fig, axes = panel_grid(len(variants))
    for i, variant in enumerate(variants):
        ax = axes.flat[i]
        accuracy_panels(ax, None, config, frame, f"{variant}/", legend=True)
        ax.set_title(f"{variant} (seeds staged: {_fraction(summary[key][variant].get('staged_fraction'))})",
                     parse_math=False, fontsize=8)  # names built from config values: a '$' is not mathtext
    fig.suptitle(f"{key} on the same data and seeds (dotted: t1)", fontsize=9)
    return save(fig, folder, key)


def _fraction(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def d_scaling(summary: dict[str, Any], folder: Path) -> list[Path]:
    """Train branch losses at the end of each stage against d, beside the bound's shape."""
    rows = summary["d_scaling"]
    ds = [r["d"] for r in rows]
    fig, axes = panel_grid(2)
    curves = [("K1_{}", "o-", "K1 (P part, all prompts)"), ("K1.p_queries_{}", "o:", "K1, queries with P"),
              ("K2_{}", "s-", "K2 (Q part, all prompts)"), ("K2.q_queries_{}", "s:", "K2, queries with Q")]
    for ax, stage in zip(axes[0], ("stage1", "stage2")):
        for (key, style, label), color in zip(curves, (PALETTE[0], PALETTE[3], PALETTE[1], PALETTE[4])):
            ax.plot(ds, [r[key.format(stage)] for r in rows], style, color=color, label=label)
        ax.plot(ds, [r["bound_shape"] for r in rows], "k--", lw=1, label="bound shape sqrt(d) log d / L + 1/sqrt(log d)")
        ax.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
        ax.axhline(REVIEW_FLOOR, color="0.5", ls="-.", lw=0.8, label="log(1 + 1/e)")
        ax.set_xscale("log", base=2)
        label_axes(ax, "dimension d", f"train {BRANCH_LOSS}")
        ax.set_title(f"end of {stage.replace('stage', 'stage ')}")
        legend_outside(ax)
    return save(fig, folder, "d_scaling")


def make_figures(config: Config, frame: pd.DataFrame, tables: Tables, summary: Summary, folder: str | Path) -> list[Path]:
    """The figures of the experiment (PNG and PDF) into ``folder``."""
    folder = Path(folder)
    kind = config.experiment.kind
    if kind == "grid":
        return ablations(config, frame, summary.details, folder, kind) + phase_diagram(config, summary.details, folder)
    if kind == "ablations":
        return ablations(config, frame, summary.details, folder, kind)
    if kind == "robustness":
        return robustness(summary.details, folder)
    if kind == "d-scaling":
        return d_scaling(summary.details, folder)
    return two_stage(config, frame, folder) + spectra(config, frame, folder)
