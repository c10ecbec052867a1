"""Loss-level claims judged against what the model can attain, and the causal accuracy claim.

The attainable floors K1*, K2* of a member are the branch losses (P-bearing / Q-bearing test
queries) at the noise-free L2-regularised optimum of its own objective on its own training
prompts (:mod:`.floors`, run table ``floors``): the lowest objective found over the declared
starts (:mod:`.floor_starts`; the objective is non-convex, so each start's optimum is a local
one), with the spread of K* over the starts beside it (``K1.min`` .. ``K2.max``). With them:

- a loss-level claim whose threshold lies below the floor of EVERY start (``K2 <= 0.5 log 2``
  where K2.min = 0.685) cannot hold whatever the schedule: it is reported not testable with the
  reason "below the lowest-found attainable floor K2* = ...", its measurement kept
  (:func:`gate_by_floor`); a threshold between two starts' floors is judged. A floors table from
  before the starts (no ``K2.min``) gates on its K column, worded "below the attainable floor";
- each loss-level stage criterion gains a relative form, the fraction of the attainable drop
  log 2 - K* realised, K* the lowest-objective start's (:func:`relative_claims`)::

      p_drop_stage1            (log 2 - K1(t1))    / (log 2 - K1*)  >= drop_learned
      q_not_learned_stage1_drop (log 2 - K2(t1))   / (log 2 - K2*)  <= drop_flat
      q_drop_stage2            (K2(t1) - K2(end))  / (log 2 - K2*)  >= drop_learned
      p_kept_drop_stage2       (log 2 - K1(end))   / (log 2 - K1*)  >= drop_learned

  A seed whose attainable drop is inside the "not learned" band (log 2 - K* < q_flat log 2)
  cannot show a stage at the loss level at all; where more than 1 - seed_fraction of the
  seeds are such, the relative claim is not testable with that reason;
- the causal accuracy claim (:func:`anneal_gain_claims`): Q-part accuracy at the end with
  annealing minus the same member at a constant large rate (variant ``no-anneal``: same data,
  init and noise draws), per seed, >= anneal_gain; the shuffled-label control's same
  difference must stay below it (``control_no_anneal_gain``), or the test could not fail.

Shapes: every per-seed array is (S,) in the order of the stage table's seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...report.claims import Claim, ClaimSpec
from . import claimspecs as cs
from .claims import LOG2, Q_ACC, SeedValues, _fmt, _per_seed, control_of, judged_by
from .config import Config

NO_FLOORS = "no floors table: experiment.floors=false, or a run made before the lab computed floors"
NO_ANNEAL = "no-anneal"  # the constant-large-rate twin of a variant (ablations, robustness cells)


def twin(variant: str, ablation: str = NO_ANNEAL) -> str:
    """The run-store variant of ``variant``'s ablation twin: ``no-anneal`` beside ``baseline``
    (ablations), ``d=20,seed=0|no-anneal`` beside the cell ``d=20,seed=0`` (robustness)."""
    return ablation if variant in ("", "baseline") else f"{variant}|{ablation}"


@dataclass(frozen=True)
class SeedFloors:
    """Per-seed attainable floors of one variant (NaN where none): numerical K1*, K2* (test,
    P-bearing / Q-bearing queries; the lowest-objective start's), their lowest and highest over
    the converged starts, the number of starts solved, the analytic fixed point's, and why a
    floor is missing. A table from before the starts (no ``K1.min``) has one start: min = max = K."""

    seeds: list[int]
    k1: np.ndarray  # (S,) numerical K1* (nats) of the lowest objective found
    k2: np.ndarray  # (S,) numerical K2*
    k1_analytic: np.ndarray  # (S,)
    k2_analytic: np.ndarray  # (S,)
    reasons: list[str]
    span: dict[str, np.ndarray] = field(default_factory=dict)  # "K1.min", "K1.max", "K2.min", "K2.max": (S,) over starts
    starts: np.ndarray | None = None  # (S,) starts solved per seed; None: a table from before the starts

    @property
    def known(self) -> bool:
        return bool(np.isfinite(self.k1).any() or np.isfinite(self.k2).any())

    @classmethod
    def of(cls, floors: pd.DataFrame | None, variant: str, seeds: list[int]) -> "SeedFloors":
        nan = np.full(len(seeds), np.nan)
        if floors is None or not len(floors) or "variant" not in floors:
            return cls(seeds, nan, nan, nan, nan, [])
        rows = floors[floors["variant"] == variant].drop_duplicates("seed", keep="last").set_index("seed").reindex(seeds)
        col = lambda c: rows[c].to_numpy(float) if c in rows else nan  # noqa: E731
        reasons = sorted({str(r) for r in rows.get("reason", pd.Series(dtype=object)).dropna() if str(r)})
        multi = all(f"{k}.{end}" in rows for k in ("K1", "K2") for end in ("min", "max"))
        span = {f"{k}.{end}": col(f"{k}.{end}") if multi else col(k) for k in ("K1", "K2") for end in ("min", "max")}
        return cls(seeds, col("K1"), col("K2"), col("analytic.K1"), col("analytic.K2"), reasons, span,
                   col("starts") if multi and "starts" in rows else None)

    def lowest(self, branch: str) -> np.ndarray:
        """(S,) the lowest K* over the starts (the K column where no start spread is known): a
        threshold below it is below every start's floor."""
        low = self.span.get(f"{branch}.min", np.full(len(self.seeds), np.nan))
        return np.where(np.isfinite(low), low, self.k1 if branch == "K1" else self.k2)

    def describe(self, branch: str) -> str:
        """``K2* = 0.686 (lowest objective of 4 starts; K2* over starts 0.685..0.687; 0.684..0.686
        over 8 seeds; analytic 0.685)``: the floor beside a measurement (a table from before the
        starts: ``K2* = 0.685 (0.684..0.686 over 8 seeds; analytic 0.685)``)."""
        num = self.k1 if branch == "K1" else self.k2
        ana = self.k1_analytic if branch == "K1" else self.k2_analytic
        if not np.isfinite(num).any():
            return f"{branch}* unknown ({'; '.join(self.reasons) or NO_FLOORS})"
        fin = num[np.isfinite(num)]
        spread = f"{fin.min():.3f}..{fin.max():.3f} over {fin.size} seeds" if fin.size > 1 else "1 seed"
        analytic = f"; analytic {np.nanmean(ana):.3f}" if np.isfinite(ana).any() else ""
        starts = ""
        if self.starts is not None and np.isfinite(self.starts).any():
            n = int(np.nanmax(self.starts))
            lo, hi = self.span[f"{branch}.min"], self.span[f"{branch}.max"]
            over = f"; {branch}* over starts {np.nanmin(lo):.3f}..{np.nanmax(hi):.3f}" if np.isfinite(lo).any() else ""
            starts = f"lowest objective of {n} start{'s' if n != 1 else ''}{over}; "
        return f"{branch}* = {np.nanmean(num):.3f} ({starts}{spread}{analytic})"


FLOOR_REASON = ("below the lowest-found attainable floor", "below the attainable floor")
"""How the reason of a claim whose threshold lies under its floor begins (:func:`gate_by_floor`;
the second for a floors table from before the starts): ``reason.startswith(FLOOR_REASON)``."""


def gate_by_floor(config: Config, claim: Claim, threshold_nats: float, branch: str, floors: SeedFloors) -> Claim:
    """``claim`` (a loss-level ``<=`` claim on ``branch``) with its floor stated, made not
    testable when its threshold lies below the floor of every start (:meth:`SeedFloors.lowest`)
    in more than 1 - seed_fraction of the seeds: it cannot hold there whatever the schedule (a
    fact about lambda and the data's margins, not about the paper). A threshold that one start's
    floor is above and another's below is judged: the lower optimum shows it can be reached."""
    stated = claim.model_copy(update={"floor": f"{floors.describe(branch)}; {claim.floor}" if claim.floor
                                      else floors.describe(branch)})
    floor = floors.lowest(branch)
    if not np.isfinite(floor).any():
        return stated
    below = np.isfinite(floor) & (threshold_nats < floor)
    if below.mean() > 1 - config.thresholds.seed_fraction + 1e-12:
        prefix, every = (FLOOR_REASON[0], "of every start ") if floors.starts is not None else (FLOOR_REASON[1], "")
        return stated.with_not_testable(
            f"{prefix} {floors.describe(branch)}: the threshold {threshold_nats:.3f} nats is under "
            f"the noise-free L2 optimum {every}in {int(below.sum())}/{below.size} seeds, so in this reconstruction it cannot "
            "hold whatever the schedule, stage length or noise")
    return stated


def _relative(config: Config, spec: ClaimSpec, threshold: float, values: np.ndarray, drop: np.ndarray, evidence: str,
              seeds: list[int], floors: SeedFloors, branch: str) -> Claim:
    """A relative claim over the seeds, not testable without floors or where the attainable
    drop ``drop`` (S,) is inside the "not learned" band in too many seeds."""
    spec = judged_by(spec, threshold)
    evidence = f"{evidence}; {floors.describe(branch)}"
    if not np.isfinite(drop).any():
        return spec.not_testable(f"no attainable floor in this run ({'; '.join(floors.reasons) or NO_FLOORS})",
                                 evidence)
    band = config.thresholds.q_flat * LOG2
    tiny = ~(drop >= band)
    if tiny.mean() > 1 - config.thresholds.seed_fraction + 1e-12:
        return spec.not_testable(
            f"the attainable drop log 2 - {branch}* ({_fmt(drop)} nats) is inside the 'not learned' band ({band:.3f} nats) "
            f"in {int(tiny.sum())}/{tiny.size} seeds: at its L2 optimum this branch's loss barely leaves log 2, so the loss "
            "cannot show the stage here", evidence, values=values, seeds=seeds)
    return _per_seed(config, spec, values, evidence, seeds)


def relative_claims(config: Config, stages: pd.DataFrame, floors_table: pd.DataFrame | None, variant: str = "") -> list[Claim]:
    """The relative forms of the four loss-level stage criteria (fraction of the attainable drop)."""
    run = SeedValues.of(stages, variant)
    if run.empty:
        return []
    th, seeds = config.thresholds, run.seeds
    floors = SeedFloors.of(floors_table, variant, seeds)
    k1_1, k1_2 = run.get("stage1", "test.K1.p_queries"), run.get("stage2", "test.K1.p_queries")
    k2_1, k2_2 = run.get("stage1", "test.K2.q_queries"), run.get("stage2", "test.K2.q_queries")
    d1, d2 = LOG2 - floors.k1, LOG2 - floors.k2  # (S,) attainable drops
    with np.errstate(divide="ignore", invalid="ignore"):
        return [
            _relative(config, cs.P_DROP_STAGE1, th.drop_learned, (LOG2 - k1_1) / d1, d1,
                      f"K1 at t1 {_fmt(k1_1)}", seeds, floors, "K1"),
            _relative(config, cs.Q_FLAT_DROP_STAGE1, th.drop_flat, (LOG2 - k2_1) / d2, d2,
                      f"K2 at t1 {_fmt(k2_1)}", seeds, floors, "K2"),
            _relative(config, cs.Q_DROP_STAGE2, th.drop_learned, (k2_1 - k2_2) / d2, d2,
                      f"K2 at t1 {_fmt(k2_1)}; at the end {_fmt(k2_2)}", seeds, floors, "K2"),
            _relative(config, cs.P_KEPT_DROP_STAGE2, th.drop_learned, (LOG2 - k1_2) / d1, d1,
                      f"K1 at the end {_fmt(k1_2)}", seeds, floors, "K1"),
        ]


LOSS_CLAIMS = {"p_learned_stage1": ("K1", "p_loss"), "p_kept_stage2": ("K1", "p_loss"), "q_learned_stage2": ("K2", "q_loss")}
"""The absolute loss-level ``<=`` claims a floor can make unattainable: id -> (branch, threshold field)."""


def with_floors(config: Config, claims: list[Claim], stages: pd.DataFrame, floors_table: pd.DataFrame | None,
                variant: str = "") -> list[Claim]:
    """``claims`` (a variant's stage claims) with each loss-level claim's floor stated and the
    unattainable ones made not testable, then the relative forms."""
    run = SeedValues.of(stages, variant)
    if run.empty:
        return claims
    floors = SeedFloors.of(floors_table, variant, run.seeds)
    out = []
    for claim in claims:
        if claim.id in LOSS_CLAIMS:
            branch, field = LOSS_CLAIMS[claim.id]
            claim = gate_by_floor(config, claim, getattr(config.thresholds, field) * LOG2, branch, floors)
        elif claim.id == "q_not_learned_stage1" and np.isfinite(floors.k2).any():
            inside = bool(np.nanmean(LOG2 - floors.k2) < config.thresholds.q_flat * LOG2)
            note = " (inside the band: at the loss level learned and not learned look alike here)" if inside else ""
            claim = claim.model_copy(update={"floor": floors.describe("K2") + note})
        out.append(claim)
    # the conjunction of the four criteria cannot hold when one of them is below its floor
    unattainable = [c.id for c in out if c.id in LOSS_CLAIMS and c.verdict == "not testable"
                    and (c.reason or "").startswith(FLOOR_REASON)]
    if unattainable:
        out = [c.with_not_testable(f"its criterion {', '.join(unattainable)} is below the attainable floor (see that claim), "
                                   "so the four cannot hold together in this reconstruction")
               if c.id == "two_stage_per_seed" else c for c in out]
    return out + relative_claims(config, stages, floors_table, variant)


def anneal_gain(stages: pd.DataFrame, variant: str, control: bool = False) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray] | None:
    """(seeds, gain, annealed, constant): Q-part test accuracy at the end of ``variant`` minus
    its no-anneal twin's, per seed (S,), or of their shuffled-label controls; None when the
    pair was not run."""
    pick_variant = control_of if control else (lambda v: v)
    run, flat = SeedValues.of(stages, pick_variant(variant)), SeedValues.of(stages, pick_variant(twin(variant)))
    if run.empty or flat.empty:
        return None
    seeds = [s for s in run.seeds if s in flat.seeds]
    pick = lambda sv: sv.get("stage2", Q_ACC)[[sv.seeds.index(s) for s in seeds]]  # noqa: E731
    annealed, constant = pick(run), pick(flat)
    return seeds, annealed - constant, annealed, constant


def anneal_gain_claims(config: Config, stages: pd.DataFrame, variant: str = "baseline") -> list[Claim]:
    """The causal accuracy-level claim and its shuffled-label control (empty without the twin)."""
    th = config.thresholds
    measured = anneal_gain(stages, variant)
    if measured is None:
        return []
    seeds, gain, annealed, constant = measured
    evidence = f"Q-part acc at the end: annealed {_fmt(annealed, 2)}; constant lr_stage1 {_fmt(constant, 2)}; gain {_fmt(gain)}"
    out = [_per_seed(config, judged_by(cs.ANNEAL_GAIN_Q_ACC, th.anneal_gain), gain, evidence, seeds)]
    ctrl = anneal_gain(stages, variant, control=True)
    if ctrl is None:
        out.append(judged_by(cs.CONTROL_NO_ANNEAL_GAIN, th.anneal_gain).not_testable(
            "no shuffled-label control of the no-anneal twin in this run (experiment.control=false)", evidence))
    else:
        c_seeds, c_gain, c_ann, c_const = ctrl
        out.append(judged_by(cs.CONTROL_NO_ANNEAL_GAIN, th.anneal_gain).result(
            c_gain, f"control Q-part acc at the end: annealed {_fmt(c_ann, 2)}; constant {_fmt(c_const, 2)}; gain {_fmt(c_gain)}",
            seeds=c_seeds))
    return out


def gain_fraction(config: Config, stages: pd.DataFrame, variant: str, control: bool = False) -> float | None:
    """Fraction of seeds whose annealing gain reaches anneal_gain (a robustness cell), or with
    ``control`` the fraction of control seeds whose gain stays below it; None without the pair."""
    measured = anneal_gain(stages, variant, control)
    if measured is None:
        return None
    gain, need = measured[1], config.thresholds.anneal_gain
    if not gain.size:
        return math.nan
    return float(np.mean(np.isfinite(gain) & ((gain < need) if control else (gain >= need))))
