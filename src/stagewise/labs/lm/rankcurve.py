"""The paper's rank-preservation test, with categories: for each checkpoint and each
rank preservation p, keep k = floor(p r) singular directions of the selected attention
matrices (default: the authors' blocks 1-6, fused c_attn and c_proj) and count the three
prediction categories on the checkpoint's training data.

The model is reduced from a pristine copy of its weights for every p (never cumulatively).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch

from ...errors import UserError, finite_number
from ...lmkit.adapters import adapter_for
from ...lmkit.surgery import RankReducer
from ...report.plots import figure, save
from ...runs import atomic_write_json, safe_csv, write_parquet
from ...runs.store import atomic_write_text
from .categories import CATEGORIES, SEMANTIC, TYPE_CORRECT, TYPE_WRONG
from .config import Config
from .train import evaluate_answers
from .prepare import encode, tokenize_data
from .refs import ModelRef

AUTHORS_SELECTOR = "blocks.1-6.attn.{qkv,o}"  # the paper's code: GPT-2 blocks 1-6, c_attn and c_proj
_P_TOL = 1e-9
MAX_P_POINTS = 1000
"""Most rank preservations one rank curve evaluates (each p is one reduction and one evaluation)."""

_P_HELP = "use START:STOP:STEP (e.g. 0.1:1.0:0.1) or a list 0.1,0.5,1.0"


def default_selector(model: Any) -> str:
    """The authors' selector where it exists (GPT-2 with >= 7 blocks), else every block's
    attention (GPT-2: fused qkv and o; other families: q, k, v, o)."""
    adapter = adapter_for(model)
    if adapter.family == "gpt2":
        return AUTHORS_SELECTOR if adapter.n_layers >= 7 else "blocks.*.attn.{qkv,o}"
    return "blocks.*.attn"


def _p_number(text: str, part: str, what: str) -> float:
    """One finite number of ``--p`` (``what`` names it in the message)."""
    return finite_number(part, f"--p {text}: {what}", _P_HELP)


def parse_p_range(text: str) -> list[float]:
    """``a:b:step`` (inclusive of b up to round-off) or a comma list -> values in (0, 1].

    The grid has n = floor((b - a) / step) + 1 points; n is computed from the three numbers
    and refused above :data:`MAX_P_POINTS` before any list is built."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise UserError(f"--p {text}: {len(parts)} fields; {_P_HELP}")
        a, b, step = (_p_number(text, x, w) for x, w in zip(parts, ("START", "STOP", "STEP")))
        for value, what in ((a, "START"), (b, "STOP")):
            if not 0 < value <= 1 + _P_TOL:
                raise UserError(f"--p {text}: {what}={value:g} must be in (0, 1]")
        if step <= 0:
            raise UserError(f"--p {text}: STEP={step:g} must be > 0")
        if a > b + _P_TOL:
            raise UserError(f"--p {text}: START={a:g} is above STOP={b:g}")
        intervals = (b - a) / step + _P_TOL  # a float (inf for a tiny STEP): no list is built before the bound
        n = math.floor(intervals) + 1 if math.isfinite(intervals) else math.inf
        if n > MAX_P_POINTS:
            raise UserError(f"--p {text}: {n:.3g} grid points; at most {MAX_P_POINTS} (use a larger STEP)")
        values = [round(a + i * step, 12) for i in range(int(n))]  # n is a finite int here (inf is above the bound)
    else:
        parts = text.split(",")
        if len(parts) > MAX_P_POINTS:
            raise UserError(f"--p: {len(parts)} values; at most {MAX_P_POINTS}")
        values = [_p_number(text, x, "value") for x in parts]
    bad = [v for v in values if not 0 < v <= 1 + _P_TOL]
    if bad or not values:
        raise UserError(f"--p {text}: every p must be in (0, 1], got {bad[0] if bad else 'none'}")
    return [min(v, 1.0) for v in values]


@dataclass(frozen=True, eq=False)
class RankCurve:
    """One row per (model, p): the three category counts (and the examples evaluated)."""

    table: pd.DataFrame
    selector: dict[str, str]


def curve_configs(refs: Sequence[ModelRef], config: Config | None) -> list[Config]:
    """The config whose data each ref is counted on (a run's own, else ``config``); one-line
    UserError for the first ref that has none or is not in the answer framing, before any work."""
    out = []
    for ref in refs:
        cfg = ref.config or config
        if cfg is None:
            raise UserError(f"{ref.label}: not a run of this lab; say which data to count on (--task, --data)")
        if cfg.task.framing != "answer":
            raise UserError(f"{ref.label}: rank-curve counts answer categories; this run has task.framing={cfg.task.framing}")
        out.append(cfg)
    return out


def rank_curve(refs: Sequence[ModelRef], ps: Sequence[float], *, config: Config | None, selector: str | None = None,
               keep: str = "largest", method: str = "exact", seed: int = 0, quiet: bool = True) -> RankCurve:
    """Category counts per checkpoint and p. ``config`` gives the data for models that are
    not run directories (a run's own config is used otherwise)."""
    rows: list[dict[str, Any]] = []
    used: dict[str, str] = {}
    for ref, cfg in zip(refs, curve_configs(refs, config)):
        loaded = ref.loaded
        data = tokenize_data(cfg, loaded.tokenizer, quiet=quiet)
        encoded, space = encode(cfg, data, loaded)
        if space is None:  # curve_configs admits the answer framing only, which has an answer space
            raise ValueError(f"{ref.label}: no answer space to count categories on")
        model = loaded.model.eval()
        pristine = {k: v.detach().clone() for k, v in model.state_dict().items()}
        chosen = selector or default_selector(model)
        used[ref.label] = chosen
        reducer = RankReducer(model, chosen)  # one SVD per matrix group, reused for every p
        for p in ps:
            model.load_state_dict(pristine)
            reduction = reducer.apply(model, keep, p, method=method, seed=seed)
            ev = evaluate_answers(model, encoded, space, cfg, torch.device("cpu"))
            counts = {c: int((ev.codes == code).sum()) for c, code in zip(CATEGORIES, (SEMANTIC, TYPE_CORRECT, TYPE_WRONG))}
            rows.append({"model": ref.label, "run": str(ref.run_dir) if ref.run_dir else None, "epoch": ref.epoch,
                         "p": p, "keep": keep, "selector": chosen, "matrices": len(reduction.items),
                         "n": int(len(encoded)), **counts})
        model.load_state_dict(pristine)
    return RankCurve(pd.DataFrame(rows), used)


def rank_curve_figure(curve: RankCurve, folder: Path) -> list[Path]:
    """The paper's rank-preservation plot with categories: counts vs p, one colour per model."""
    fig, axes = figure(1, 3, (13.0, 3.6))
    for i, (label, rows) in enumerate(curve.table.groupby("model", sort=False)):
        for ax, cat in zip(axes[0], CATEGORIES):
            ax.plot(rows["p"], rows[cat], marker="o", ms=3, color=f"C{i}", label=label)
    for ax, cat in zip(axes[0], CATEGORIES):
        ax.set_title(cat)
        ax.set_xlabel("rank preservation p")
        ax.set_ylabel("examples")
    axes[0, 0].legend(fontsize=7)
    keep = curve.table["keep"].iloc[0] if len(curve.table) else "largest"
    fig.suptitle(f"rank reduction (keep {keep} singular directions) of {', '.join(sorted(set(curve.selector.values())))}")
    fig.tight_layout()
    return save(fig, folder, "rank_curve")


def write_rank_curve(curve: RankCurve, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(curve.table, out / "rank_curve.parquet")
    atomic_write_text(out / "rank_curve.csv", safe_csv(curve.table))
    atomic_write_json(out / "rank_curve.json", {"selector": curve.selector, "rows": curve.table.to_dict(orient="records")})
    return [out / "rank_curve.parquet", out / "rank_curve.csv", *rank_curve_figure(curve, out)]
