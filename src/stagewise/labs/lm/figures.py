"""Figures of the LM lab, drawn from the run's records: the three prediction categories
over epochs (the paper's phenomenon), loss per task over training, answer-rank curves, and
attention spectra when they were logged."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.ticker import MaxNLocator

from ...report.claims import Summary
from ...report.plots import figure, save
from ..contract import Tables
from .categories import CATEGORIES
from .config import Config
from .summary import category_counts, epoch_series

COLORS = {"semantic-correct": "C2", "type-correct": "C1", "type-wrong": "C3"}


def categories_figure(config: Config, predictions: pd.DataFrame, folder: Path) -> list[Path]:
    tasks = config.task.tasks()
    fig, axes = figure(1, len(tasks), (5.0 * len(tasks), 3.6))
    for ax, task in zip(axes[0], tasks):
        counts = category_counts(predictions, task if len(tasks) > 1 else None)
        for cat in CATEGORIES:
            ax.plot(counts.index, counts[cat], marker="o", ms=3, color=COLORS[cat], label=cat)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("examples")
        ax.set_title(f"{task}: top-1 prediction categories")
        ax.legend(fontsize=8)
    control = " (control: shuffled groups)" if config.task.shuffle_groups else ""
    fig.suptitle(f"syntactically wrong -> type-correct -> semantically correct{control}")
    fig.tight_layout()
    return save(fig, folder, "categories")


def loss_figure(config: Config, frame: pd.DataFrame, folder: Path) -> list[Path]:
    fig, axes = figure(1, 2, (10.0, 3.6))
    tasks = config.task.tasks()
    metrics = [f"train.loss.{t}" for t in tasks] if len(tasks) > 1 else ["train.loss"]
    for i, (metric, task) in enumerate(zip(metrics, tasks)):
        epochs, loss = epoch_series(frame, metric)
        axes[0, 0].plot(epochs, loss, marker="o", ms=3, color=f"C{i}", label=task)
    axes[0, 0].set_xlabel("epoch")
    axes[0, 0].set_ylabel("mean loss (training set, eval mode)")
    axes[0, 0].set_title("loss per task")
    axes[0, 0].legend(fontsize=8)
    per_task = [(f"train.batch_loss.{t}", t) for t in tasks] if len(tasks) > 1 else [("train.batch_loss", tasks[0])]
    for i, (metric, task) in enumerate(per_task):
        batch = frame[frame["metric"] == metric].sort_values("step")
        axes[0, 1].plot(batch["step"], batch["value"], lw=0.8, color=f"C{i}", label=task)
    axes[0, 1].set_xlabel("optimizer step")
    axes[0, 1].set_title(f"training loss (mean over the {config.train.log_every} steps before each point)")
    axes[0, 1].legend(fontsize=8)
    axes[0, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return save(fig, folder, "loss")


def rank_figure(predictions: pd.DataFrame, folder: Path) -> list[Path]:
    """Quartiles of the answer's rank and the share of answers in the top 1 / top 10."""
    by = predictions.groupby("epoch")["answer_rank"]
    q = by.quantile([0.25, 0.5, 0.75]).unstack()
    fig, axes = figure(1, 2, (10.0, 3.6))
    axes[0, 0].plot(q.index, q[0.5], color="C0", label="median")
    axes[0, 0].fill_between(q.index, q[0.25], q[0.75], color="C0", alpha=0.2, label="quartiles")
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_xlabel("epoch")
    axes[0, 0].set_ylabel("rank of the answer (1 = top-1)")
    axes[0, 0].legend(fontsize=8)
    for k, color in ((1, "C2"), (10, "C1")):
        share = predictions.assign(hit=predictions["answer_rank"] <= k).groupby("epoch")["hit"].mean()
        axes[0, 1].plot(share.index, share.to_numpy(), color=color, label=f"answer in top {k}")
    axes[0, 1].set_xlabel("epoch")
    axes[0, 1].set_ylim(0, 1)
    axes[0, 1].legend(fontsize=8)
    fig.tight_layout()
    return save(fig, folder, "answer_rank")


def spectra_figure(frame: pd.DataFrame, folder: Path) -> list[Path]:
    """Mean over heads of each layer's sv_top_share of W_Q W_K^T (and W_V, W_O) over steps."""
    rows = frame[frame["metric"].str.endswith(".sv_top_share") & frame["metric"].str.startswith("blocks.")]
    if not len(rows):
        return []
    parts = rows["metric"].str.extract(r"^blocks\.(?P<layer>\d+)\.attn\.head\.\d+\.(?P<proj>\w+)\.sv_top_share$")
    rows = pd.concat([rows.reset_index(drop=True), parts.reset_index(drop=True)], axis=1).dropna(subset=["layer"])
    projs = [p for p in ("qk", "q", "k", "v", "o") if p in set(rows["proj"])]
    fig, axes = figure(1, len(projs), (3.4 * len(projs), 3.2))
    for ax, proj in zip(axes[0], projs):
        sub = rows[rows["proj"] == proj].groupby(["layer", "step"])["value"].mean().unstack(0)
        for col in sub.columns:
            ax.plot(sub.index, sub[col].to_numpy(), label=f"block {col}")
        ax.set_title(f"{proj}: top-k share (mean over heads)")
        ax.set_xlabel("optimizer step")
        ax.set_ylim(0, 1.02)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return save(fig, folder, "spectra")


def make_figures(config: Config, frame: pd.DataFrame, tables: Tables, summary: Summary, folder: Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = loss_figure(config, frame, folder)
    predictions = tables.get("predictions")
    if predictions is not None and len(predictions):
        paths += categories_figure(config, predictions, folder)
        paths += rank_figure(predictions, folder)
    paths += spectra_figure(frame, folder)
    return paths
