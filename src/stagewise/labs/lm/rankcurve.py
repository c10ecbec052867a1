"""The paper's rank-preservation test, with categories: for each checkpoint and each
rank preservation p, keep k = floor(p r) singular directions of the selected attention
matrices (default: the authors' blocks 1-6, fused c_attn and c_proj) and count the
prediction categories on the checkpoint's training data.

The model is reduced from a pristine copy of its weights for every p (never cumulatively).
``keep``: the largest, the smallest, or k chosen at random (``draws`` seeded draws per p,
draw d with seed :func:`draw_seed`; :mod:`stagewise.lmkit.surgery`). Categories follow a type
``rule`` (:data:`~.categories.RULES`): ``open`` (default, the lab's ``thresholds.type_rule``
default: the prompt's declared answer type; wrong answers of an unclear type are
``excluded``) or ``closed`` (another answer of the same group in the sample; nothing is
excluded). semantic-correct is the same under both rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch

from ...config import MAX_SEED
from ...engine.seeds import stream_word
from ...errors import UserError, finite_number
from ...lmkit.adapters import adapter_for
from ...lmkit.surgery import RankReducer
from ...report.plots import figure, save
from ...runs import atomic_write_json, safe_csv, write_parquet
from ...runs.store import atomic_write_text
from .batching import Encoded
from .categories import CATEGORIES, EXCLUDED, OPEN_CATEGORIES, RULES, SEMANTIC, TYPE_CORRECT, TYPE_WRONG, AnswerSpace
from .config import Config
from .train import evaluate_answers
from .prepare import encode, tokenize_data
from .refs import ModelRef

AUTHORS_SELECTOR = "blocks.1-6.attn.{qkv,o}"  # the paper's code: GPT-2 blocks 1-6, c_attn and c_proj
_P_TOL = 1e-9
MAX_P_POINTS = 1000
"""Most rank preservations one rank curve evaluates (each p is one reduction and one evaluation)."""

_P_HELP = "use START:STOP:STEP (e.g. 0.1:1.0:0.1) or a list 0.1,0.5,1.0"

DEFAULT_DRAWS = 5
"""Random-direction draws per (checkpoint, p) for keep="random" (each is one reduction and one evaluation)."""
MAX_DRAWS = 100


def draw_seed(seed: int, draw: int) -> int:
    """The seed of random draw ``draw`` of base seed ``seed``: the first word of
    ``SeedSequence([seed, draw])`` mod 2^62 (a valid ``lm reduce --keep random --seed``)."""
    return stream_word(seed, draw) % MAX_SEED


def check_curve_args(rule: str, draws: int) -> None:
    """One-line UserError unless the type rule and the number of random draws are allowed."""
    if rule not in RULES:
        raise UserError(f"--rule {rule}: not a type rule; use one of {', '.join(RULES)}")
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MAX_DRAWS:
        raise UserError(f"--draws {draws}: the number of random-direction draws must be an integer in 1..{MAX_DRAWS}")


def category_counts(codes: torch.Tensor) -> dict[str, int]:
    """{category: count} of category codes (N,), the three categories and ``excluded``."""
    names = dict(zip(OPEN_CATEGORIES, (SEMANTIC, TYPE_CORRECT, TYPE_WRONG, EXCLUDED)))
    return {name: int((codes == code).sum()) for name, code in names.items()}


def rule_codes(ev: Any, rule: str) -> torch.Tensor:
    """The category codes (N,) of an evaluation under ``rule`` (open: ``codes_open``)."""
    if rule == "closed":
        return ev.codes
    if ev.codes_open is None:
        raise UserError("--rule open: this data has no declared answer types; use --rule closed")
    return ev.codes_open


def restrict(encoded: Encoded, space: AnswerSpace, rows: torch.Tensor) -> tuple[Encoded, AnswerSpace]:
    """The examples ``rows`` (n,) int64 of a dataset and its answer space, in that order (the
    answer space's per-example tensors cut to them; the vocabulary-side tensors kept)."""
    sub = Encoded(ids=encoded.ids[rows], lengths=encoded.lengths[rows], targets=encoded.targets[rows],  # (n, L_max), (n,), (n,)
                  task=encoded.task[rows], tasks=encoded.tasks,
                  example_ids=tuple(encoded.example_ids[i] for i in rows.tolist()), pad=encoded.pad)
    types = space.types
    if types is not None:
        types = replace(types, example_type=types.example_type[rows])  # (n,)
    return sub, replace(space, example_answer=space.example_answer[rows], example_group=space.example_group[rows],
                        types=types)  # (n,), (n,)


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
    """One row per (model, p, draw): the category counts under ``rule`` (and the examples evaluated).

    Columns: model, run, epoch, p, keep, draw (0 unless keep="random"), draw_seed, rule,
    selector, matrices, n, semantic-correct, type-correct, type-wrong, excluded."""

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
               keep: str = "largest", method: str = "exact", seed: int = 0, quiet: bool = True, rule: str = "open",
               draws: int = DEFAULT_DRAWS) -> RankCurve:
    """Category counts per checkpoint and p (and draw, for keep="random": ``draws`` draws with
    seeds :func:`draw_seed` of ``seed``). ``config`` gives the data for models that are not run
    directories (a run's own config is used otherwise)."""
    check_curve_args(rule, draws)
    rows: list[dict[str, Any]] = []
    used: dict[str, str] = {}
    seeds = [(d, draw_seed(seed, d)) for d in range(draws)] if keep == "random" else [(0, seed)]
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
            for draw, used_seed in seeds:
                model.load_state_dict(pristine)
                reduction = reducer.apply(model, keep, p, method=method, seed=used_seed)
                ev = evaluate_answers(model, encoded, space, cfg, torch.device("cpu"))
                rows.append({"model": ref.label, "run": str(ref.run_dir) if ref.run_dir else None, "epoch": ref.epoch,
                             "p": p, "keep": keep, "draw": draw, "draw_seed": used_seed, "rule": rule, "selector": chosen,
                             "matrices": len(reduction.items), "n": int(len(encoded)),
                             **category_counts(rule_codes(ev, rule))})
        model.load_state_dict(pristine)
    return RankCurve(pd.DataFrame(rows), used)


def rank_curve_figure(curve: RankCurve, folder: Path) -> list[Path]:
    """The paper's rank-preservation plot with categories: counts vs p, one colour per model."""
    fig, axes = figure(1, 3, (13.0, 3.6))
    for i, (label, rows) in enumerate(curve.table.groupby("model", sort=False)):
        mean = rows.groupby("p", sort=True)[list(CATEGORIES)].mean()  # over random draws (one row otherwise)
        for ax, cat in zip(axes[0], CATEGORIES):
            ax.plot(mean.index, mean[cat], marker="o", ms=3, color=f"C{i}", label=label)
    for ax, cat in zip(axes[0], CATEGORIES):
        ax.set_title(cat)
        ax.set_xlabel("rank preservation p")
        ax.set_ylabel("examples")
    axes[0, 0].legend(fontsize=7)
    keep = curve.table["keep"].iloc[0] if len(curve.table) else "largest"
    rule = curve.table["rule"].iloc[0] if len(curve.table) else "open"
    how = f"{keep} (mean of {curve.table['draw'].max() + 1} draws)" if keep == "random" and len(curve.table) else keep
    fig.suptitle(f"rank reduction (keep {how} singular directions) of {', '.join(sorted(set(curve.selector.values())))}; "
                 f"{rule} type rule")
    fig.tight_layout()
    return save(fig, folder, "rank_curve")


def write_rank_curve(curve: RankCurve, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(curve.table, out / "rank_curve.parquet")
    atomic_write_text(out / "rank_curve.csv", safe_csv(curve.table))
    atomic_write_json(out / "rank_curve.json", {"selector": curve.selector, "rows": curve.table.to_dict(orient="records")})
    return [out / "rank_curve.parquet", out / "rank_curve.csv", *rank_curve_figure(curve, out)]
