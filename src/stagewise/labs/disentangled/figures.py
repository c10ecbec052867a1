"""Figures of the disentangled lab, drawn from the logged metrics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...measure import series
from ...report.plots import figure, save, seed_lines
from ...report.claims import Summary
from ..contract import Tables
from .config import Config
from .claims import LOG2, REVIEW_FLOOR, STAGED

KIND_COLORS = (("p_only", "C0", "P-only"), ("q_only", "C3", "Q-only"), ("both", "C2", "both"))


def _stage_line(ax, config: Config) -> None:
    ax.axvline(config.train.t1, color="0.5", ls=":", lw=0.8)


def accuracy_panels(ax_acc, ax_loss, config: Config, frame: pd.DataFrame, prefix: str = "", legend: bool = True) -> None:
    for kind, color, label in KIND_COLORS:
        seed_lines(ax_acc, frame, f"{prefix}test.acc.{kind}", label=label, color=color)
    th = config.thresholds
    ax_acc.axhline(th.p_learned, color="C0", ls="--", lw=0.6)
    ax_acc.axhline(th.q_learned, color="C3", ls="--", lw=0.6)
    ax_acc.set_ylim(0.3, 1.02)
    ax_acc.set_ylabel("test accuracy")
    if ax_loss is not None:
        seed_lines(ax_loss, frame, f"{prefix}train.K1", label="K1 (P part)", color="C0")
        seed_lines(ax_loss, frame, f"{prefix}train.K2", label="K2 (Q part)", color="C3")
        ax_loss.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
        ax_loss.set_ylabel("train branch loss")
        ax_loss.legend(fontsize=7)
    for ax in (ax_acc, ax_loss):
        if ax is not None:
            ax.set_xlabel("t")
            _stage_line(ax, config)
    if legend:
        ax_acc.legend(fontsize=7, loc="lower right")


def loss_level_panel(ax, config: Config, frame: pd.DataFrame, prefix: str = "") -> None:
    """Test K1 on P-bearing and K2 on Q-bearing queries, the run's and its shuffled-label
    control's (grey), with the thresholds of the per-seed claims."""
    th = config.thresholds
    control = f"{prefix.rstrip('/')}|control/" if prefix else "control/"
    seed_lines(ax, frame, f"{control}test.K2.q_queries", label="K2, control", color="0.6")
    seed_lines(ax, frame, f"{prefix}test.K1.p_queries", label="K1 (P part), P-bearing queries", color="C0")
    seed_lines(ax, frame, f"{prefix}test.K2.q_queries", label="K2 (Q part), Q-bearing queries", color="C3")
    ax.axhspan((1 - th.q_flat) * LOG2, (1 + th.q_flat) * LOG2, color="C3", alpha=0.08, lw=0)
    ax.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
    ax.axhline(th.q_loss * LOG2, color="C3", ls="--", lw=0.6, label=f"{th.q_loss:g} log 2")
    ax.axhline(REVIEW_FLOOR, color="0.5", ls="-.", lw=0.6, label="log(1 + 1/e)")
    ax.set_ylabel("test branch loss")
    ax.set_xlabel("t")
    _stage_line(ax, config)
    ax.legend(fontsize=6)


def two_stage(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = figure(1, 4, (18, 4))
    accuracy_panels(axes[0, 0], axes[0, 1], config, frame)
    axes[0, 0].set_title("P-only / Q-only / both queries (dotted: t1)")
    axes[0, 1].set_title("train branch losses K1, K2")
    loss_level_panel(axes[0, 2], config, frame)
    axes[0, 2].set_title("loss level: test K1, K2 and the control (band: Q not learned)")
    seed_lines(axes[0, 3], frame, "W.fro", label="||W||_F", color="C0")
    seed_lines(axes[0, 3], frame, "V.fro", label="||V||_F", color="C3")
    seed_lines(axes[0, 3], frame, "W.signal", label="w*^T W w*", color="C0", transform=lambda t, v: np.abs(v))
    seed_lines(axes[0, 3], frame, "V.signal.sv.0", label="sigma_max(Z^T V Z)", color="C1")
    axes[0, 3].set_yscale("log")
    axes[0, 3].set_title("weight norms and signal parts")
    axes[0, 3].legend(fontsize=7)
    _stage_line(axes[0, 3], config)
    fig.tight_layout()
    return save(fig, folder, "two_stage")


def phase_diagram(config: Config, summary: dict[str, Any], folder: Path) -> list[Path]:
    """Fraction of seeds passing all four loss-level stage criteria (and each one) over the
    grid: two axes as a heat map (rows: the first axis, columns: the second), one panel per
    combination of any further axes; one axis: a bar row."""
    from itertools import product

    axes_values = summary["grid_axes"]
    names = list(axes_values)
    row_ax, col_ax = names[0], names[1] if len(names) > 1 else None
    rest = names[2:]
    combos = list(product(*(axes_values[k] for k in rest))) or [()]
    criteria = ("staged", *STAGED)
    fig, axs = figure(len(combos), len(criteria), (3.3 * len(criteria), 2.8 * len(combos) + 0.6))
    cells = summary["grid"]
    for r, combo in enumerate(combos):
        fixed = dict(zip(rest, combo))
        for c, criterion in enumerate(criteria):
            ax = axs[r, c]
            rows, cols = axes_values[row_ax], axes_values[col_ax] if col_ax else [None]
            grid = np.full((len(rows), len(cols)), np.nan)
            for i, rv in enumerate(rows):
                for j, cv in enumerate(cols):
                    point = {row_ax: rv, **({col_ax: cv} if col_ax else {}), **fixed}
                    cell = cells.get(_variant_name(names, point), {})
                    value = cell.get("staged_fraction") if criterion == "staged" else cell.get("pass_fraction", {}).get(criterion)
                    grid[i, j] = np.nan if value is None else value
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
            for (i, j), v in np.ndenumerate(grid):
                ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="w" if not np.isnan(v) and v < 0.5 else "k")
            ax.set_yticks(range(len(rows)), [f"{v:g}" for v in rows] if c == 0 else [])
            if c == 0:
                ax.set_ylabel(row_ax)
            ax.set_xticks(range(len(cols)), [f"{v:g}" for v in cols] if col_ax else [""])
            ax.set_xlabel(col_ax or "")
            ax.grid(False)
            title = criterion.replace("_", " ") + ("" if not fixed else "\n" + ", ".join(f"{k}={v:g}" for k, v in fixed.items()))
            ax.set_title(title, fontsize=8, parse_math=False)
    fig.colorbar(image, ax=axs, shrink=0.6, pad=0.02, label="fraction of seeds passing")
    fig.suptitle("phase diagram: per-seed loss-level stage criteria (thresholds fixed before the runs)")
    return save(fig, folder, "phase_diagram")


def _variant_name(keys: list[str], point: dict[str, float]) -> str:
    """The grid variant name of a point (experiments.grid_variants' format)."""
    from .experiments import INTEGER_AXES

    return ",".join(f"{k}={(int(point[k]) if k in INTEGER_AXES else float(point[k])):g}" for k in keys)


def robustness(summary: dict[str, Any], folder: Path) -> list[Path]:
    """Fraction of seeds passing each criterion per (d, seed block) cell."""
    cells = summary["robustness"]
    names = list(cells)
    criteria = ("staged", *STAGED)
    grid = np.array([[cells[n].get("staged_fraction") if k == "staged" else cells[n].get("pass_fraction", {}).get(k)
                      for k in criteria] for n in names], dtype=float)
    fig, axes = figure(1, 1, (1.6 * len(criteria) + 2, 0.45 * len(names) + 1.5))
    ax = axes[0, 0]
    ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                color="w" if not np.isnan(v) and v < 0.5 else "k")
    ax.set_xticks(range(len(criteria)), [c.replace("_", " ") for c in criteria], rotation=20, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.grid(False)
    ax.set_title("fraction of seeds passing, per d and seed block")
    return save(fig, folder, "robustness")


def spectra(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Singular values of W and V over training, stable ranks, and the truncation curves."""
    d, end = config.data.d, config.train.steps
    fig, axes = figure(1, 3, (14, 4))
    for name, color, ax in (("W", "C0", axes[0, 0]), ("V", "C3", axes[0, 0])):
        for i in range(min(d, 4)):
            steps, vals = series(frame, f"{name}.sv.{i}")
            if vals.size:
                ax.plot(steps, np.nanmean(vals, 1), color=color, alpha=1 - 0.2 * i, lw=1, label=f"{name} sv {i}" if i == 0 else None)
    axes[0, 0].set_title("top singular values of W (blue) and V (red)")
    axes[0, 0].legend(fontsize=7)
    seed_lines(axes[0, 1], frame, "W.stable_rank", label="W", color="C0")
    seed_lines(axes[0, 1], frame, "V.stable_rank", label="V", color="C3")
    axes[0, 1].set_title("stable rank")
    axes[0, 1].legend(fontsize=7)
    for ax in axes[0, :2]:
        ax.set_xlabel("t")
        _stage_line(ax, config)
    ax = axes[0, 2]
    rows = frame[(frame["step"] == end) & frame["metric"].str.startswith("truncate.")]
    if len(rows):
        parts = rows["metric"].str.split(".", expand=True)  # truncate, keep, k, acc, kind
        rows = rows.assign(keep=parts[1], k=parts[2].astype(int), kind=parts[4])
        for (keep, kind), grp in rows.groupby(["keep", "kind"]):
            if kind == "both":
                continue
            mean = grp.groupby("k")["value"].mean()
            ax.plot(mean.index, mean.values, marker="o", ms=3, ls="-" if keep == "top" else "--",
                    color="C0" if kind == "p_only" else "C3", label=f"{keep}-k, {kind.replace('_', '-')}")
        ax.set_xlabel("k singular directions kept (of 2d)")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
    ax.set_title("truncating blockdiag(W, V) at the end")
    fig.tight_layout()
    return save(fig, folder, "spectra")


def ablations(config: Config, frame: pd.DataFrame, summary: dict[str, Any], folder: Path, key: str = "ablations") -> list[Path]:
    """One accuracy panel per variant and the stage table (ablations or grid)."""
    variants = list(summary[key])
    cols = 4
    rows = math.ceil(len(variants) / cols)
    fig, axes = figure(rows + 1, cols, (15, 3.2 * (rows + 1)))
    for i, variant in enumerate(variants):
        ax = axes.flat[i]
        accuracy_panels(ax, None, config, frame, f"{variant}/", legend=i == 0)
        ax.set_title(variant, parse_math=False)  # names built from config values: a '$' is not mathtext
    for ax in axes.flat[len(variants):]:
        ax.axis("off")
    table_ax = axes[rows, 0]
    for ax in axes[rows, 1:]:
        ax.remove()
    cols = ("stage1.K1.p_queries", "stage1.K2.q_queries", "stage2.K1.p_queries", "stage2.K2.q_queries", "stage2.acc.q_part")
    cells = [[v] + [f"{summary[key][v][k]:.3f}" for k in cols] + [_fraction(summary[key][v].get("staged_fraction"))]
             for v in variants]
    table = table_ax.table(cellText=cells, colLabels=["variant", "K1 @ t1", "K2 @ t1", "K1 @ end", "K2 @ end", "Q-part acc @ end",
                                                      "seeds staged"],
                           loc="center", bbox=[0, 0, 4.2, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for cell in table.get_celld().values():
        cell.get_text().set_parse_math(False)
    fig.suptitle(f"{key} on the same data and seeds (mean over seeds)")
    fig.subplots_adjust(hspace=0.45, wspace=0.3)
    return save(fig, folder, key)


def _fraction(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def d_scaling(summary: dict[str, Any], folder: Path) -> list[Path]:
    rows = summary["d_scaling"]
    ds = [r["d"] for r in rows]
    fig, axes = figure(1, 2, (11, 4))
    for ax, stage in zip(axes[0], ("stage1", "stage2")):
        ax.plot(ds, [r[f"K1_{stage}"] for r in rows], "o-", color="C0", label="K1 (P part, all prompts)")
        ax.plot(ds, [r[f"K1.p_queries_{stage}"] for r in rows], "o:", color="C0", label="K1, queries with P")
        ax.plot(ds, [r[f"K2_{stage}"] for r in rows], "s-", color="C3", label="K2 (Q part, all prompts)")
        ax.plot(ds, [r[f"K2.q_queries_{stage}"] for r in rows], "s:", color="C3", label="K2, queries with Q")
        ax.plot(ds, [r["bound_shape"] for r in rows], "k--", lw=1, label="sqrt(d) log d / L + 1/sqrt(log d)")
        ax.axhline(LOG2, color="k", ls=":", lw=0.8, label="log 2")
        ax.axhline(REVIEW_FLOOR, color="0.5", ls="-.", lw=0.8, label="log(1 + 1/e)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d")
        ax.set_title(f"train branch losses at the end of {stage.replace('stage', 'stage ')}")
        ax.legend(fontsize=7)
    fig.tight_layout()
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
