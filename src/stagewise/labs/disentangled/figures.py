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
from .summary import LOG2, REVIEW_FLOOR

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


def two_stage(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = figure(1, 3, (14, 4))
    accuracy_panels(axes[0, 0], axes[0, 1], config, frame)
    axes[0, 0].set_title("P-only / Q-only / both queries (dotted: t1)")
    axes[0, 1].set_title("branch losses K1, K2")
    seed_lines(axes[0, 2], frame, "W.fro", label="||W||_F", color="C0")
    seed_lines(axes[0, 2], frame, "V.fro", label="||V||_F", color="C3")
    axes[0, 2].set_title("weight norms")
    axes[0, 2].legend(fontsize=7)
    _stage_line(axes[0, 2], config)
    fig.tight_layout()
    return save(fig, folder, "two_stage")


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
    cells = [[v] + [f"{summary[key][v][k]:.3f}" for k in ("stage1.acc.p_only", "stage1.acc.q_only", "stage2.acc.p_only", "stage2.acc.q_only")]
             for v in variants]
    table = table_ax.table(cellText=cells, colLabels=["variant", "P-only @ t1", "Q-only @ t1", "P-only @ end", "Q-only @ end"],
                           loc="center", bbox=[0, 0, 4.2, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for cell in table.get_celld().values():
        cell.get_text().set_parse_math(False)
    fig.suptitle(f"{key} on the same data and seeds (mean over seeds)")
    fig.subplots_adjust(hspace=0.45, wspace=0.3)
    return save(fig, folder, key)


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
    if kind in ("ablations", "grid"):
        return ablations(config, frame, summary.details, folder, kind)
    if kind == "d-scaling":
        return d_scaling(summary.details, folder)
    return two_stage(config, frame, folder) + spectra(config, frame, folder)
