"""The lab's figure, in the conventions of :mod:`stagewise.report.plots`: mode strengths
a_i against the step, one panel per group (the run, then its controls), one colour per mode
(a thin line per seed, the mean bold) and the closed form of :mod:`.theory` dashed in the
mode's colour. Written as ``mode_strengths.png`` and ``.pdf``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stagewise.report import plots
from stagewise.report.claims import Summary

from .config import Config
from .summary import metric
from .theory import accumulated_lr, closed_form
from .train import groups


def draw_group(ax, config: Config, frame: pd.DataFrame, variant: str) -> None:
    """One panel: every mode's measured strength and its closed form."""
    s = np.asarray(config.data.singular_values, dtype=np.float64)
    acc = accumulated_lr(config, config.train.steps)  # (T + 1,)
    theory = closed_form(s, config.model.init_scale, acc)  # (T + 1, r)
    steps = np.arange(acc.size)
    for i, color in enumerate(plots.palette(s.size)):
        label = f"mode {i} (s = {s[i]:g})"
        plots.seed_lines(ax, frame, metric(variant, i), label=label, color=color)
        ax.plot(steps, theory[:, i], color=color, ls="--", lw=1.0, gid=label)
    ax.plot([], [], color="black", ls="--", lw=1.0, label="closed form (Saxe et al.)")
    init = f"{config.model.init} init, a0 = {config.model.init_scale:g}"
    ax.set_title(f"{variant or 'main run'}: {init}", fontsize=8)
    plots.label_axes(ax, plots.STEP_LABEL, "mode strength $u_i^T W_2 W_1 v_i$")
    plots.legend_outside(ax)


def make_figures(config: Config, frame: pd.DataFrame, tables, summary: Summary, folder: Path) -> list[Path]:
    """The mode-strength figure of every group, PNG and PDF."""
    plan = groups(config)
    fig, axes = plots.panel_grid(len(plan), max_cols=1)
    for ax, (variant, group_config) in zip(axes.flat, plan):
        draw_group(ax, group_config, frame, variant)
    return plots.save(fig, folder, "mode_strengths")
