"""Figures of the LM lab, drawn from the run's records: the three prediction categories
over epochs (the paper's phenomenon), loss per task over training, answer-rank curves, and
attention spectra when they were logged; with the conventions of :mod:`stagewise.report.plots`
(labelled axes, legends outside, distinct colours, grids readable at the report's width)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.ticker import MaxNLocator

from ...report.claims import Summary
from ...report.plots import PALETTE, label_axes, legend_outside, palette, panel_grid, save
from ..contract import Tables
from .categories import CATEGORIES
from .config import Config
from .claims import control_name
from .phases import category_counts, epoch_series, rule_column

COLORS = {"semantic-correct": PALETTE[2], "type-correct": PALETTE[3], "type-wrong": PALETTE[1]}
OPEN_COLORS = {"type-correct": PALETTE[4], "type-wrong": PALETTE[5]}  # the open rule's two type categories, dashed
STEP = "optimizer step"
EPOCH = "epoch"


def categories_figure(config: Config, predictions: pd.DataFrame, folder: Path) -> list[Path]:
    tasks = config.task.tasks()
    fig, axes = panel_grid(len(tasks))
    for ax, task in zip(axes.flat, tasks):
        counts = category_counts(predictions, task if len(tasks) > 1 else None)
        for cat in CATEGORIES:
            ax.plot(counts.index, counts[cat], marker="o", ms=3, color=COLORS[cat],
                    label=cat if cat == "semantic-correct" else f"{cat} (closed rule)")
        if rule_column(predictions, "open") is not None:
            opened = category_counts(predictions, task if len(tasks) > 1 else None, rule="open")
            for cat, color in OPEN_COLORS.items():
                ax.plot(opened.index, opened[cat], ls="--", marker="s", ms=3, color=color, label=f"{cat} (open rule)")
        label_axes(ax, EPOCH, "examples (count)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{task}: top-1 prediction categories")
        legend_outside(ax)
    name = control_name(config)
    control = f" (control: {name})" if name else ""
    fig.suptitle(f"syntactically wrong -> type-correct -> semantically correct{control}", fontsize=9)
    return save(fig, folder, "categories")


def loss_figure(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = panel_grid(2)
    tasks = config.task.tasks()
    colors = palette(len(tasks))
    metrics = [f"train.loss.{t}" for t in tasks] if len(tasks) > 1 else ["train.loss"]
    for i, (metric, task) in enumerate(zip(metrics, tasks)):
        epochs, loss = epoch_series(frame, metric)
        axes[0, 0].plot(epochs, loss, marker="o", ms=3, color=colors[i], label=task)
    label_axes(axes[0, 0], EPOCH, "mean loss, eval mode (nats)")
    axes[0, 0].set_title("loss per task (training set)")
    per_task = [(f"train.batch_loss.{t}", t) for t in tasks] if len(tasks) > 1 else [("train.batch_loss", tasks[0])]
    for i, (metric, task) in enumerate(per_task):
        batch = frame[frame["metric"] == metric].sort_values("step")
        axes[0, 1].plot(batch["step"], batch["value"], lw=0.8, color=colors[i], label=task)
    label_axes(axes[0, 1], STEP, "batch loss (nats)")
    axes[0, 1].set_title(f"training loss (mean of {config.train.log_every} steps per point)")
    axes[0, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[0]:
        legend_outside(ax)
    return save(fig, folder, "loss")


def rank_figure(predictions: pd.DataFrame, folder: Path) -> list[Path]:
    """Quartiles of the answer's rank and the share of answers in the top 1 / top 10."""
    by = predictions.groupby("epoch")["answer_rank"]
    q = by.quantile([0.25, 0.5, 0.75]).unstack()
    fig, axes = panel_grid(2)
    axes[0, 0].plot(q.index, q[0.5], color=PALETTE[0], label="median", gid="rank")
    axes[0, 0].fill_between(q.index, q[0.25], q[0.75], color=PALETTE[0], alpha=0.2, label="quartiles", gid="rank")
    axes[0, 0].set_yscale("log")
    label_axes(axes[0, 0], EPOCH, "rank of the answer (1 = top-1)")
    axes[0, 0].set_title("answer rank over examples")
    for k, color in ((1, PALETTE[2]), (10, PALETTE[3])):
        share = predictions.assign(hit=predictions["answer_rank"] <= k).groupby("epoch")["hit"].mean()
        axes[0, 1].plot(share.index, share.to_numpy(), color=color, label=f"answer in top {k}")
    label_axes(axes[0, 1], EPOCH, "share of examples (fraction)")
    axes[0, 1].set_ylim(0, 1)
    axes[0, 1].set_title("answers in the top k")
    for ax in axes[0]:
        legend_outside(ax)
    return save(fig, folder, "answer_rank")


def spectra_figure(frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Mean over heads of each layer's sv_top_share of W_Q W_K^T (and W_V, W_O) over steps."""
    rows = frame[frame["metric"].str.endswith(".sv_top_share") & frame["metric"].str.startswith("blocks.")]
    if not len(rows):
        return []
    parts = rows["metric"].str.extract(r"^blocks\.(?P<layer>\d+)\.attn\.head\.\d+\.(?P<proj>\w+)\.sv_top_share$")
    rows = pd.concat([rows.reset_index(drop=True), parts.reset_index(drop=True)], axis=1).dropna(subset=["layer"])
    projs = [p for p in ("qk", "q", "k", "v", "o") if p in set(rows["proj"])]
    fig, axes = panel_grid(len(projs))
    for ax, proj in zip(axes.flat, projs):
        sub = rows[rows["proj"] == proj].groupby(["layer", "step"])["value"].mean().unstack(0)
        for col, color in zip(sub.columns, palette(len(sub.columns))):
            ax.plot(sub.index, sub[col].to_numpy(), color=color, label=f"block {col}")
        ax.set_title(f"{proj}: top-k share (mean over heads)")
        label_axes(ax, STEP, "top-k singular value share (fraction)")
        ax.set_ylim(0, 1.02)
        legend_outside(ax)
    return save(fig, folder, "spectra")


PROBE_LINES = {"questions": ("accuracy", "share.type_correct", "share.type_wrong"), "text": ("loss", "loss.bucket_"),
               "pairs": ("accuracy", "field."), "words": ("share.exact", "share.class_correct", "content.share.")}
"""What each kind of probe set plots: its records whose name is one of these or starts with one ending in '_' or '.'."""


def probes_figure(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    """One panel per probe set of ``probes``: its main records over the steps (issue 39)."""
    if not config.probes:
        return []
    fig, axes = panel_grid(len(config.probes))
    for ax, p in zip(axes.flat, config.probes):
        prefix = f"probe.{p.name}."
        names = [m for m in dict.fromkeys(frame.loc[frame["metric"].str.startswith(prefix), "metric"])
                 if any(m[len(prefix):] == w or (w[-1] in "_." and m[len(prefix):].startswith(w))
                        for w in PROBE_LINES[p.kind])]
        for name, color in zip(names, palette(len(names))):
            rows = frame[frame["metric"] == name].sort_values("step")
            ax.plot(rows["step"], rows["value"], marker="o", ms=2, lw=0.9, color=color, label=name[len(prefix):])
        ax.set_xscale("symlog", linthresh=1)
        label_axes(ax, STEP, "nats per token" if p.kind == "text" else "fraction")
        ax.set_title(f"probe set {p.name} ({p.kind})")
        legend_outside(ax)
    return save(fig, folder, "probes")


def make_figures(config: Config, frame: pd.DataFrame, tables: Tables, summary: Summary, folder: Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = loss_figure(config, frame, folder) if config.task.tasks() else []
    paths += probes_figure(config, frame, folder)
    predictions = tables.get("predictions")
    if predictions is not None and len(predictions):
        paths += categories_figure(config, predictions, folder)
        paths += rank_figure(predictions, folder)
    paths += spectra_figure(frame, folder)
    return paths
