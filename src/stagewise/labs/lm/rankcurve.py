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

The spectral claim (:data:`~.claimspecs.SPECTRAL_SMALL_DIRECTIONS_EARLY`, ``lm rank-curve --claim``)
over runs: for every run (one seed) an early and a late checkpoint, the examples E semantic-correct
at both before any reduction, and the retained fraction of E after keeping k = floor(p r) singular
directions of every selected attention matrix, chosen three ways: the largest, at random (``draws``
seeded draws, :func:`draw_seed`), the smallest (the largest removed).

    retained(run, stage, keep, p, draw) = |{e in E_run : top-1 of the reduced model = answer}| / |E_run|

Random draw d uses the same seed at both checkpoints and every p (the same direction indices
by rank: paired early vs late, nested over p). Per seed the claim's value is
rho_early - rho_late at p* (:mod:`.claimspecs`); it is judged over seeds in
:func:`.claims.spectral_claim`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import torch

from ...config import MAX_SEED
from ...engine.seeds import stream_word
from ...errors import UserError, finite_number
from ...lmkit.adapters import adapter_for
from ...lmkit.surgery import RankReducer, check_reduce_args
from ...report import verdicts
from ...report.plots import figure, save
from ...report.seedstats import AGGREGATIONS, paired_differences
from ...runs import atomic_write_json, safe_csv, write_parquet
from ...runs.store import atomic_write_text
from .batching import Encoded
from .categories import CATEGORIES, EXCLUDED, OPEN_CATEGORIES, RULES, SEMANTIC, TYPE_CORRECT, TYPE_WRONG, AnswerSpace
from .claimspecs import CLAIM_DRAWS, CLAIM_P, MIN_RANDOM_DAMAGE, SPECTRAL_SMALL_DIRECTIONS_EARLY as SPEC
from .config import Config
from .train import evaluate_answers
from .prepare import encode, tokenize_data
from .refs import ModelRef

if TYPE_CHECKING:
    from .claims import SpectralClaim

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
    attention (GPT-2 and GPT-NeoX: the fused qkv and o, as the weights are stored; other
    families: q, k, v, o)."""
    adapter = adapter_for(model)
    if adapter.family == "gpt2":
        return AUTHORS_SELECTOR if adapter.n_layers >= 7 else "blocks.*.attn.{qkv,o}"
    if adapter.family == "gpt_neox":
        return "blocks.*.attn.{qkv,o}"
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


# --- the spectral claim's curves (module docstring) ------------------------------------------------------------------
SELECTIONS = ("largest", "random", "smallest")
STAGES = ("early", "late")
AGGREGATION = SPEC.aggregation or "median"
_IGNORED = ("seed", "task.sample_seed", "device", "train.threads", "train.snapshot_epochs", "train.checkpoint_every")
"""Config keys the runs of one claim may differ in (everything else must agree): the seed key (init, order and
subsample: claims.SEED_FIELDS) and how the run was executed."""


@dataclass(frozen=True, eq=False)
class CheckpointPair:
    """One run's early and late checkpoint (the same data: the run's config)."""

    run: Path
    seed: int
    early: ModelRef
    late: ModelRef


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: data}


def pair_checkpoints(refs: Sequence[ModelRef]) -> list[CheckpointPair]:
    """Group MODEL references into (early, late) pairs by run folder, in order of first mention;
    one-line UserError for a model that is not a run, a run without exactly two epochs,
    runs that compare other epochs or differ in anything but the seed, or two runs of one seed."""
    by_run: dict[Path, list[ModelRef]] = {}
    for ref in refs:
        if ref.run_dir is None or ref.config is None or ref.epoch is None:
            raise UserError(f"{ref.label}: --claim compares checkpoints of runs of this lab (RUN@EPOCH); this is not a run")
        by_run.setdefault(ref.run_dir.resolve(), []).append(ref)
    pairs = []
    for run, found in by_run.items():
        epochs = sorted(r.epoch for r in found if r.epoch is not None)
        if len(found) != 2 or epochs[0] == epochs[1]:
            raise UserError(f"{run}: --claim needs two checkpoints of each run, an early and a late one (RUN@5 RUN@30); "
                            f"got epoch{'s' if len(found) > 1 else ''} {', '.join(map(str, epochs))}")
        early, late = sorted(found, key=lambda r: r.epoch or 0)
        pairs.append(CheckpointPair(run, int(early.config.seed), early, late))  # type: ignore[union-attr]
    first = pairs[0]
    base = _flat(first.early.config.model_dump(mode="json"))  # type: ignore[union-attr]
    seen: dict[int, Path] = {}
    for pair in pairs:
        if (pair.early.epoch, pair.late.epoch) != (first.early.epoch, first.late.epoch):
            raise UserError(f"{pair.run}: compares epochs {pair.early.epoch} and {pair.late.epoch}, {first.run} "
                            f"{first.early.epoch} and {first.late.epoch}; every run needs the same early and late epochs")
        other = _flat(pair.early.config.model_dump(mode="json"))  # type: ignore[union-attr]
        differ = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k)
                        and not any(k == i or k.startswith(i + ".") for i in _IGNORED))
        if differ:
            raise UserError(f"{pair.run}: differs from {first.run} in {differ[0]} ({other.get(differ[0])!r} vs "
                            f"{base.get(differ[0])!r}); the runs of one claim differ only in the seed (seed, task.sample_seed)")
        if pair.seed in seen:
            raise UserError(f"{pair.run} and {seen[pair.seed]}: both have seed {pair.seed}; one run per seed")
        seen[pair.seed] = pair.run
    return pairs


def claim_grid(ps: Sequence[float]) -> list[float]:
    """The grid with the declared p* added (sorted, no duplicates)."""
    grid = sorted(set(float(p) for p in ps))
    return grid if any(abs(p - CLAIM_P) < _P_TOL for p in grid) else sorted([*grid, CLAIM_P])


@dataclass(frozen=True, eq=False)
class SpectralCurves:
    """Retained fractions: one row per (seed, stage, keep, p, draw).

    Columns: run, seed, stage, epoch, keep, p, draw, draw_seed, n (|E|), retained (semantic-correct
    / n), semantic-correct, type-correct, type-wrong, excluded (counts among E under ``rule``)."""

    table: pd.DataFrame
    selector: str
    rule: str
    draws: int
    seed: int


def spectral_curves(pairs: Sequence[CheckpointPair], ps: Sequence[float], *, selector: str | None = None, draws: int = CLAIM_DRAWS,
                    seed: int = 0, rule: str = "open", quiet: bool = True) -> SpectralCurves:
    """Evaluate every run's two checkpoints on E under the three selections at every p (p* added)."""
    check_curve_args(rule, draws)
    grid = claim_grid(ps)
    for p in grid:
        check_reduce_args("random", p)
    plan = [("largest", 0, seed), ("smallest", 0, seed), *(("random", d, draw_seed(seed, d)) for d in range(draws))]
    rows: list[dict[str, Any]] = []
    chosen = selector
    cpu = torch.device("cpu")
    for pair in pairs:
        cfg = pair.early.config
        assert cfg is not None  # pair_checkpoints admits runs only
        prepared = []
        for ref in (pair.early, pair.late):
            encoded, space = encode(cfg, tokenize_data(cfg, ref.loaded.tokenizer, quiet=quiet), ref.loaded)
            if space is None:
                raise UserError(f"{ref.label}: --claim counts answers; this run has task.framing={cfg.task.framing}")
            model = ref.loaded.model.eval()
            correct = evaluate_answers(model, encoded, space, cfg, cpu).codes == SEMANTIC  # (N,) before any reduction
            prepared.append((ref, model, encoded, space, correct))
        both = torch.nonzero(prepared[0][4] & prepared[1][4]).flatten()  # (n,) E: correct at both checkpoints
        whole = cfg.train.reproduce_original_padding  # the authors' padding depends on the batch: evaluate all, count E
        for stage, (ref, model, encoded, space, _) in zip(STAGES, prepared):
            chosen = chosen or default_selector(model)
            sub, sub_space = (encoded, space) if whole else restrict(encoded, space, both)
            pristine = {k: v.detach().clone() for k, v in model.state_dict().items()}
            reducer = RankReducer(model, chosen)  # one SVD per matrix group, reused for every p and draw
            for p in grid:
                for keep, draw, used_seed in plan:
                    model.load_state_dict(pristine)
                    counts = dict.fromkeys(("semantic-correct", "type-correct", "type-wrong", "excluded"), 0)
                    if len(both):
                        reducer.apply(model, keep, p, seed=used_seed)
                        codes = rule_codes(evaluate_answers(model, sub, sub_space, cfg, cpu), rule)  # (n,) or (N,)
                        counts = category_counts(codes[both] if whole else codes)
                    rows.append({"run": str(pair.run), "seed": pair.seed, "stage": stage, "epoch": ref.epoch, "keep": keep,
                                 "p": p, "draw": draw, "draw_seed": used_seed, "n": int(len(both)),
                                 "retained": counts["semantic-correct"] / len(both) if len(both) else math.nan, **counts})
            model.load_state_dict(pristine)
    return SpectralCurves(pd.DataFrame(rows), str(chosen), rule, draws, seed)


def at_p(table: pd.DataFrame, p: float = CLAIM_P) -> pd.DataFrame:
    """Per (seed, stage, keep) at ``p``: retained mean, sd (over random draws; 0 otherwise), min, max."""
    rows = table[(table["p"] - p).abs() < _P_TOL]
    out = rows.groupby(["seed", "stage", "keep"], sort=True)["retained"].agg(["mean", "std", "min", "max"])
    return out.fillna({"std": 0.0})


def per_seed_values(table: pd.DataFrame, p: float = CLAIM_P) -> pd.DataFrame:
    """One row per seed: n, R_{stage}_{keep} (random: mean of draws), rho_early, rho_late (NaN
    when that stage's random damage < MIN_RANDOM_DAMAGE), value = rho_early - rho_late, and the
    difference in differences did = (R_late - R_early)^largest - (R_late - R_early)^random."""
    means = at_p(table, p)["mean"]
    out = []
    for seed in sorted(table["seed"].unique()):
        r = {(stage, keep): float(means[(seed, stage, keep)]) for stage in STAGES for keep in SELECTIONS}
        rho = {}
        for stage in STAGES:
            damage = 1.0 - r[(stage, "random")]
            rho[stage] = (1.0 - r[(stage, "largest")]) / damage if damage >= MIN_RANDOM_DAMAGE else math.nan
        n = int(table.loc[table["seed"] == seed, "n"].iloc[0])
        out.append({"seed": int(seed), "n": n, **{f"R_{s}_{k}": v for (s, k), v in r.items()},
                    "rho_early": rho["early"], "rho_late": rho["late"],
                    "did": (r[("late", "largest")] - r[("early", "largest")]) - (r[("late", "random")] - r[("early", "random")])})
    frame = pd.DataFrame(out)
    diff = paired_differences(dict(zip(frame["seed"], frame["rho_early"])), dict(zip(frame["seed"], frame["rho_late"])))
    frame["value"] = [diff.get(int(s), math.nan) for s in frame["seed"]]
    return frame


def spectral_figure(curves: SpectralCurves, folder: Path, name: str = "spectral_claim") -> list[Path]:
    """Retained fraction of E vs p, one panel per seed: early and late, keep-largest (solid),
    random (dashed, mean of the draws with a band of +-1 sd), keep-smallest (dotted); p* marked."""
    table = curves.table
    seeds = sorted(table["seed"].unique())
    fig, axes = figure(1, len(seeds), (4.2 * len(seeds), 3.6))
    styles = {"largest": "-", "random": "--", "smallest": ":"}
    for ax, seed in zip(axes[0], seeds):
        rows = table[table["seed"] == seed]
        for i, stage in enumerate(STAGES):
            for keep, style in styles.items():
                part = rows[(rows["stage"] == stage) & (rows["keep"] == keep)].groupby("p")["retained"]
                mean, sd = part.mean(), part.std().fillna(0.0)
                epoch = int(rows.loc[rows["stage"] == stage, "epoch"].iloc[0])
                ax.plot(mean.index, mean.to_numpy(), style, marker="o", ms=2.5, color=f"C{i}",
                        label=f"{stage} (epoch {epoch}), keep {keep}")
                if keep == "random":
                    ax.fill_between(mean.index, (mean - sd).to_numpy(), (mean + sd).to_numpy(), color=f"C{i}", alpha=0.15)
        ax.axvline(CLAIM_P, color="0.5", lw=0.8)
        ax.set_title(f"seed {seed} (E = {int(rows['n'].iloc[0])})")
        ax.set_xlabel("keep fraction p")
        ax.set_ylabel("retained fraction of E")
        ax.set_ylim(-0.02, 1.02)
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(f"{SPEC.id}: {curves.selector}, random = mean of {curves.draws} draws (band +-1 sd), {curves.rule} type rule")
    fig.tight_layout()
    return save(fig, folder, name)


def write_spectral(curves: SpectralCurves, result: SpectralClaim, out: Path) -> list[Path]:
    """spectral_curve.parquet/.csv (the retained table), spectral_claim.json, spectral_claim.png/.pdf."""
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(curves.table, out / "spectral_curve.parquet")
    atomic_write_text(out / "spectral_curve.csv", safe_csv(curves.table))
    atomic_write_json(out / "spectral_claim.json", spectral_json(curves, result))
    return [out / "spectral_claim.json", out / "spectral_curve.parquet", out / "spectral_curve.csv",
            *spectral_figure(curves, out)]


def spectral_json(curves: SpectralCurves, result: SpectralClaim) -> dict[str, Any]:
    """spectral_claim.json: the claim judged by :func:`.claims.spectral_claim`, the per-seed values, the over-seeds decision."""
    records = result.values.replace({np.nan: None}).to_dict(orient="records")
    iv, sign = result.decision.interval, result.decision.sign
    stats = {"median": None if iv is None else iv.median, "low": None if iv is None else iv.low,
             "high": None if iv is None else iv.high, "coverage": None if iv is None else iv.coverage,
             "n": int(result.values["value"].notna().sum()), "min_seeds": SPEC.seeds_rule().min_seeds,
             "sign_test": None if sign is None else {"above": sign.passing, "n": sign.n, "p": sign.p}}
    return {"claim": result.claim.model_dump(mode="json"), "p": CLAIM_P, "selector": curves.selector,
            "rule": curves.rule, "draws": curves.draws, "draw_base_seed": curves.seed,
            "random_directions": "k of the r singular directions of every target, uniformly at random (lmkit.surgery)",
            "per_seed": records, "over_seeds": {"aggregation": AGGREGATION, "rule": AGGREGATIONS[AGGREGATION],
                                                "pairing": "per seed: rho_early - rho_late", "statistic": stats,
                                                "verdict": result.over_seeds, "reason": result.decision.reason,
                                                "judged_by": verdicts.ENGINE}}
