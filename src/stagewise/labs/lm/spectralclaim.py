"""The spectral claim (:data:`~.claimspecs.SPECTRAL_SMALL_DIRECTIONS_EARLY`) over runs: for
every run (one seed) an early and a late checkpoint, the examples E semantic-correct at both
before any reduction, and the retained fraction of E after keeping k = floor(p r) singular
directions of every selected attention matrix, chosen three ways: the largest, at random
(``draws`` seeded draws, :func:`~.rankcurve.draw_seed`), the smallest (the largest removed).

    retained(run, stage, keep, p, draw) = |{e in E_run : top-1 of the reduced model = answer}| / |E_run|

Random draw d uses the same seed at both checkpoints and every p (the same direction indices
by rank: paired early vs late, nested over p). Per seed the claim's value is
rho_early - rho_late at p* (:mod:`.claimspecs`); over seeds the verdict engine
(:mod:`stagewise.report.verdicts`, the claim's ``median`` aggregation): the exact interval of the
median, the one-sided sign test, at least ``min_seeds`` testable seeds (fewer: inconclusive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ...errors import UserError
from ...lmkit.surgery import RankReducer, check_reduce_args
from ...report.claims import Claim
from ...report.plots import figure, save
from ...report import verdicts
from ...report.seedstats import AGGREGATIONS, paired_differences
from ...runs import atomic_write_json, safe_csv, write_parquet
from ...runs.store import atomic_write_text
from .categories import SEMANTIC
from .prepare import encode, tokenize_data
from .rankcurve import category_counts, check_curve_args, default_selector, draw_seed, restrict, rule_codes
from .refs import ModelRef
from .claimspecs import CLAIM_DRAWS, CLAIM_P, MIN_RANDOM_DAMAGE, SPECTRAL_SMALL_DIRECTIONS_EARLY as SPEC
from .train import evaluate_answers

SELECTIONS = ("largest", "random", "smallest")
STAGES = ("early", "late")
AGGREGATION = SPEC.aggregation or "median"
_P_TOL = 1e-9
_IGNORED = ("seed", "task.sample_seed", "device", "train.threads", "train.snapshot_epochs", "train.checkpoint_every")
"""Config keys the runs of one claim may differ in (everything else must agree): the seed key (init, order and
subsample: summary.SEED_FIELDS) and how the run was executed."""


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


@dataclass(frozen=True, eq=False)
class SpectralClaim:
    """The claim's per-seed verdict (:class:`Claim`, ``over="every"``) with the over-seeds
    decision of the verdict engine (:func:`~stagewise.report.verdicts.decide_arm` with the claim's
    ``seeds_rule``): its interval of the median (None below the minimum seed count), sign test and word."""

    claim: Claim
    values: pd.DataFrame
    decision: verdicts.Decision

    @property
    def over_seeds(self) -> str:
        return self.decision.word

    def line(self) -> str:
        """The one-line verdict."""
        finite = self.values["value"].dropna()
        head = (f"{self.claim.id}: {self.claim.verdict} per seed ({int((finite > SPEC.threshold).sum())}/{len(self.values)} "
                f"seeds with rho_early - rho_late > {SPEC.threshold:g} at p = {CLAIM_P:g})")
        d = self.decision
        said = "; ".join(t for t in (d.reason, d.evidence) if t) or "no testable seed"
        return f"{head}; over seeds: {d.word} ({said})"

    def to_json(self, curves: SpectralCurves) -> dict[str, Any]:
        records = self.values.replace({np.nan: None}).to_dict(orient="records")
        iv, sign = self.decision.interval, self.decision.sign
        stats = {"median": None if iv is None else iv.median, "low": None if iv is None else iv.low,
                 "high": None if iv is None else iv.high, "coverage": None if iv is None else iv.coverage,
                 "n": int(self.values["value"].notna().sum()), "min_seeds": SPEC.seeds_rule().min_seeds,
                 "sign_test": None if sign is None else {"above": sign.passing, "n": sign.n, "p": sign.p}}
        return {"claim": self.claim.model_dump(mode="json"), "p": CLAIM_P, "selector": curves.selector,
                "rule": curves.rule, "draws": curves.draws, "draw_base_seed": curves.seed,
                "random_directions": "k of the r singular directions of every target, uniformly at random (lmkit.surgery)",
                "per_seed": records, "over_seeds": {"aggregation": AGGREGATION, "rule": AGGREGATIONS[AGGREGATION],
                                                    "pairing": "per seed: rho_early - rho_late", "statistic": stats,
                                                    "verdict": self.over_seeds, "reason": self.decision.reason,
                                                    "judged_by": verdicts.ENGINE}}


def judge(values: pd.DataFrame) -> SpectralClaim:
    """The per-seed Claim (every testable seed's value > threshold) and the over-seeds statistic."""
    finite = values.dropna(subset=["value"])
    by_seed = {int(s): float(v) for s, v in zip(values["seed"], values["value"])}
    parts = [f"seed {s}: rho {e:.3g} early, {l_:.3g} late" for s, e, l_ in zip(values["seed"], values["rho_early"], values["rho_late"])]
    evidence = "; ".join(parts) + f" (E = {', '.join(str(int(n)) for n in values['n'])} examples)"
    decision = verdicts.decide_arm({str(int(k)): float(v) for k, v in zip(finite["seed"], finite["value"])},
                                   SPEC.seeds_rule())
    evidence += f"; over seeds: {decision.word}" + "".join(f"; {t}" for t in (decision.reason, decision.evidence) if t)
    untestable = sorted(set(by_seed) - set(int(s) for s in finite["seed"]))
    if untestable:
        reason = (f"seed{'s' if len(untestable) > 1 else ''} {', '.join(map(str, untestable))}: random-direction damage "
                  f"below {MIN_RANDOM_DAMAGE:g} (or no example correct at both checkpoints)")
        claim = SPEC.not_testable(reason, evidence)
    else:
        claim = SPEC.result(by_seed, evidence)
    return SpectralClaim(claim, values, decision)


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
    atomic_write_json(out / "spectral_claim.json", result.to_json(curves))
    return [out / "spectral_claim.json", out / "spectral_curve.parquet", out / "spectral_curve.csv",
            *spectral_figure(curves, out)]
