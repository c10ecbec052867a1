"""Per-seed claims of the disentangled lab, computed from the ``stages`` table only.

Every stage claim is tested on each seed separately and holds when at least
``thresholds.seed_fraction`` of the seeds pass (default: every seed); the evidence gives
the fraction and the per-seed values. All thresholds are config fields fixed before the
runs (docs/disentangled.md section 4 says why each is what it is):

- P learned at t1 / kept at the end: K1 on P-bearing test queries <= p_loss * log 2 and
  P-only test accuracy >= p_learned (where the test split has P-only queries).
- Q not learned at t1: K2 on Q-bearing test queries within q_flat * log 2 of log 2 (the Q
  part of the output is ~0 or noise), and the Q part's accuracy (sign(f^2) on Q-bearing
  test queries; on a Q-only query f = f^2, so this is Q-only accuracy there, and it also
  exists when every token carries both features) no farther from 1/2 than the
  ``control_quantile`` quantile of the shuffled-label control's distances |acc - 1/2| at t1
  (pooled over the control's seeds: a V that learned nothing scores anywhere in 0.3..0.8).
- Q learned at the end: K2 on Q-bearing test queries <= q_loss * log 2 (loss level).
  ``q_accuracy_stage2`` keeps the accuracy-level reading (Q-part accuracy >= q_learned and
  above the control's band at the end) as a secondary claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...report.claims import Claim, claim
from .config import Config

LOG2 = math.log(2.0)
CHANCE = 0.5  # accuracy of a sign that knows nothing about the label
Q_ACC = "test.acc.q_part"  # accuracy of sign(f^2) on Q-bearing test queries (= Q-only accuracy on Q-only queries)
REVIEW_FLOOR = math.log1p(math.exp(-1.0))  # the reviewer's lower bound on K1, log(1 + e^-1)


def control_of(variant: str) -> str:
    """The variant name of ``variant``'s shuffled-label control ("control" for the plain run)."""
    return f"{variant}|control" if variant else "control"


@dataclass(frozen=True)
class SeedValues:
    """Per-seed values of one variant at both stage ends: stage -> column -> (S,) array."""

    seeds: list[int]
    values: dict[str, dict[str, np.ndarray]]

    def get(self, stage: str, column: str) -> np.ndarray:
        return self.values.get(stage, {}).get(column, np.full(len(self.seeds), np.nan))

    @property
    def empty(self) -> bool:
        return not self.seeds

    @classmethod
    def of(cls, stages: pd.DataFrame, variant: str) -> "SeedValues":
        rows = stages[stages["variant"] == variant] if len(stages) else stages
        if not len(rows):
            return cls([], {})
        seeds = sorted(int(s) for s in rows["seed"].unique())
        values: dict[str, dict[str, np.ndarray]] = {}
        for stage in ("stage1", "stage2"):
            at = rows[rows["stage"] == stage].set_index("seed").reindex(seeds)
            values[stage] = {c: at[c].to_numpy(float) for c in at.columns if c not in ("group", "variant", "stage", "step")}
        return cls(seeds, values)


def _fmt(values: np.ndarray, digits: int = 3) -> str:
    return ", ".join("nan" if not np.isfinite(v) else f"{v:.{digits}f}" for v in values)


def _verdict(config: Config, passed: np.ndarray) -> tuple[bool, str]:
    """(holds, "k/n seeds pass"): holds when the passing fraction reaches seed_fraction."""
    n, k = len(passed), int(np.sum(passed))
    return bool(n and k / n >= config.thresholds.seed_fraction), f"{k}/{n} seeds pass"


def control_bound(control: SeedValues, stage: str, quantile: float) -> float:
    """The ``quantile`` of the control's distances from chance |acc - 1/2| of the Q-part
    test accuracy at a stage end (NaN without a control). Two-sided: a V trained on
    shuffled targets can sit below chance as well as above it (it fits the permuted
    targets), and a V that is reliably wrong has learned something too."""
    acc = control.get(stage, Q_ACC) if not control.empty else np.array([])
    acc = acc[np.isfinite(acc)]
    return float(np.quantile(np.abs(acc - CHANCE), quantile)) if acc.size else float("nan")


def _at_least(acc: np.ndarray, threshold: float) -> np.ndarray:
    """acc >= threshold per seed; True where the accuracy does not exist (NaN: no P-only
    queries, e.g. composite labels with p0 = 0), so only the loss part of P's test applies."""
    return np.where(np.isnan(acc), True, acc >= threshold)


def stage_passes(config: Config, run: SeedValues, control: SeedValues) -> dict[str, np.ndarray]:
    """Boolean (S,) arrays: which seeds pass each stage criterion."""
    th = config.thresholds
    k1_1, k1_2 = run.get("stage1", "test.K1.p_queries"), run.get("stage2", "test.K1.p_queries")
    k2_1, k2_2 = run.get("stage1", "test.K2.q_queries"), run.get("stage2", "test.K2.q_queries")
    ap1, ap2 = run.get("stage1", "test.acc.p_only"), run.get("stage2", "test.acc.p_only")
    aq1, aq2 = run.get("stage1", Q_ACC), run.get("stage2", Q_ACC)
    bound1 = control_bound(control, "stage1", th.control_quantile)
    bound2 = control_bound(control, "stage2", th.control_quantile)
    p_acc1, p_acc2 = _at_least(ap1, th.p_learned), _at_least(ap2, th.p_learned)
    return {
        "p_learned_stage1": (k1_1 <= th.p_loss * LOG2) & p_acc1,
        "q_not_learned_stage1": (np.abs(k2_1 - LOG2) <= th.q_flat * LOG2) & (np.abs(aq1 - CHANCE) <= bound1),
        "q_learned_stage2": k2_2 <= th.q_loss * LOG2,
        "p_kept_stage2": (k1_2 <= th.p_loss * LOG2) & p_acc2,
        "q_accuracy_stage2": (aq2 >= th.q_learned) & (aq2 - CHANCE > bound2),
    }


STAGED = ("p_learned_stage1", "q_not_learned_stage1", "q_learned_stage2", "p_kept_stage2")


def staged_fraction(config: Config, run: SeedValues, control: SeedValues) -> float:
    """Fraction of seeds passing all four loss-level stage criteria (a phase-diagram cell)."""
    if run.empty:
        return float("nan")
    passes = stage_passes(config, run, control)
    return float(np.mean(np.logical_and.reduce([passes[k] for k in STAGED])))


def stage_claims(config: Config, stages: pd.DataFrame, variant: str = "") -> list[Claim]:
    """The per-seed stage claims of one variant, paired with its shuffled-label control."""
    th, t1, end = config.thresholds, config.train.t1, config.train.steps
    run, control = SeedValues.of(stages, variant), SeedValues.of(stages, control_of(variant))
    if run.empty:
        return []
    passes = stage_passes(config, run, control)
    lp, lq = th.p_loss * LOG2, th.q_loss * LOG2
    g = run.get
    bound1 = control_bound(control, "stage1", th.control_quantile)
    bound2 = control_bound(control, "stage2", th.control_quantile)
    out = []
    holds, frac = _verdict(config, passes["p_learned_stage1"])
    out.append(claim("p_learned_stage1", f"P is learned in stage 1, per seed: K1 on P-bearing test queries at t1 = {t1} "
                     f"<= {th.p_loss:g} log 2 = {lp:.3f} and P-only accuracy >= {th.p_learned:g}", holds,
                     f"{frac}; K1 {_fmt(g('stage1', 'test.K1.p_queries'))}; P-only acc {_fmt(g('stage1', 'test.acc.p_only'), 2)}"))
    if control.empty:
        out.append(claim("q_not_learned_stage1", "Q is not learned in stage 1 (needs the shuffled-label control)", None,
                         "no control in this run (experiment.control=false)"))
    else:
        holds, frac = _verdict(config, passes["q_not_learned_stage1"])
        out.append(claim("q_not_learned_stage1", f"Q is not learned in stage 1, per seed: K2 on Q-bearing test queries at t1 "
                         f"within {th.q_flat:g} log 2 of log 2 ({(1 - th.q_flat) * LOG2:.3f}..{(1 + th.q_flat) * LOG2:.3f}) and "
                         f"Q-part accuracy at t1 no farther from 1/2 than the shuffled-label control's {th.control_quantile:g} quantile "
                         "of |acc - 1/2|", holds,
                         f"{frac}; K2 {_fmt(g('stage1', 'test.K2.q_queries'))}; Q-part acc {_fmt(g('stage1', Q_ACC), 2)}; "
                         f"control band 0.5 +- {bound1:.3f} (control Q-part acc {_fmt(control.get('stage1', Q_ACC), 2)})"))
    holds, frac = _verdict(config, passes["q_learned_stage2"])
    out.append(claim("q_learned_stage2", f"Q is learned in stage 2 (loss level), per seed: K2 on Q-bearing test queries at the end "
                     f"(t = {end}) <= {th.q_loss:g} log 2 = {lq:.3f}", holds,
                     f"{frac}; K2 at t1 {_fmt(g('stage1', 'test.K2.q_queries'))}; at the end {_fmt(g('stage2', 'test.K2.q_queries'))}"))
    holds, frac = _verdict(config, passes["p_kept_stage2"])
    out.append(claim("p_kept_stage2", f"P is kept in stage 2, per seed: K1 on P-bearing test queries at the end <= {lp:.3f} and "
                     f"P-only accuracy >= {th.p_learned:g}", holds,
                     f"{frac}; K1 {_fmt(g('stage2', 'test.K1.p_queries'))}; P-only acc {_fmt(g('stage2', 'test.acc.p_only'), 2)}"))
    holds, frac = _verdict(config, passes["q_accuracy_stage2"])
    out.append(claim("q_accuracy_stage2", f"Q-part test accuracy at the end >= {th.q_learned:g} and above the control's "
                     f"band 1/2 + its {th.control_quantile:g} quantile of |acc - 1/2|, per seed (accuracy level only)", holds,
                     f"{frac}; Q-part acc at t1 {_fmt(g('stage1', Q_ACC), 2)}; at the end "
                     f"{_fmt(g('stage2', Q_ACC), 2)}; control band at the end 0.5 +- {bound2:.3f}"))
    staged = np.logical_and.reduce([passes[k] for k in STAGED])
    holds, frac = _verdict(config, staged)
    out.append(claim("two_stage_per_seed", "the four loss-level stage criteria hold together, per seed", holds, frac))
    if not control.empty:
        ctrl_q = control.get("stage2", "test.K2.q_queries")
        out.append(claim("control_not_staged", f"the shuffled-label control does not learn Q: K2 at the end > {lq:.3f} in every "
                         "control seed (the stage claims can fail)", bool(np.all(ctrl_q > lq)),
                         f"control K2 at the end {_fmt(ctrl_q)}"))
    return out


def spectral_claims(config: Config, stages: pd.DataFrame, truncation: dict[str, float], variant: str = "") -> list[Claim]:
    """The corollary ("small singular values carry P, large ones Q") at the end, twice: on
    whole spectra (||W||_2 < ||V||_2 per seed, plus the truncation of blockdiag(W, V)) and on
    the signal parts (|w*^T W w*| < sigma_max(Z^T V Z) per seed): noise in V can make the
    whole-spectrum comparison hold while V's signal is tiny."""
    run = SeedValues.of(stages, variant)
    if run.empty:
        return []
    g = lambda c: run.get("stage2", c)  # noqa: E731
    whole = g("W.spectral") < g("V.spectral")
    trunc_ok = (truncation.get("bottom.p_only", np.nan) >= truncation.get("top.p_only", np.nan)
                and truncation.get("top.q_only", np.nan) >= truncation.get("bottom.q_only", np.nan))
    holds, frac = _verdict(config, whole)
    d = config.data.d
    out = [claim("spectral_corollary", f"whole spectra: ||W||_2 < ||V||_2 per seed, and keeping the bottom {d} of the {2 * d} "
                 f"singular directions of blockdiag(W, V) keeps P at least as well as the top {d}, while the top {d} keep Q at "
                 f"least as well as the bottom {d} (mean over seeds)", holds and bool(trunc_ok),
                 f"{frac}; ||W||_2 {_fmt(g('W.spectral'))}; ||V||_2 {_fmt(g('V.spectral'))}; truncation "
                 + ", ".join(f"{k} {v:.3f}" for k, v in sorted(truncation.items())))]
    signal = np.abs(g("W.signal")) < g("V.signal.sv.0")
    holds, frac = _verdict(config, signal)
    out.append(claim("spectral_corollary_signal", "signal parts: |w*^T W w*| (P's singular value) < sigma_max(Z^T V Z) "
                     "(Q's, V projected on span zeta) per seed", holds,
                     f"{frac}; P signal {_fmt(np.abs(g('W.signal')))}; Q signal sv0 {_fmt(g('V.signal.sv.0'))}, "
                     f"sv1 {_fmt(g('V.signal.sv.1'))}; ||V||_2 {_fmt(g('V.spectral'))}; share of ||V||_F^2 on span zeta "
                     f"{_fmt(g('V.signal_share'))}"))
    return out


def review_claim(config: Config, stages: pd.DataFrame, variant: str = "") -> Claim | None:
    """The reviewer's point: K1 at the unit-margin reference W* = c w* w*^T (c sets the mean
    P margin y f^1 over P-bearing test queries to 1) is at least log(1 + e^-1) (Jensen:
    softplus(-m) is convex, so E softplus(-m) >= softplus(-E m)) and so never near 0; the
    trained K1 is shown beside it."""
    run = SeedValues.of(stages, variant)
    ref = run.get("stage2", "review.K1_ref") if not run.empty else np.array([])
    if not ref.size or not np.all(np.isfinite(ref)):
        return None
    trained = run.get("stage1", "test.K1.p_queries")
    return claim("review_k1_floor", f"K1 at the unit-margin reference W* is >= the reviewer's log(1 + e^-1) = {REVIEW_FLOOR:.3f} "
                 f"and < log 2 = {LOG2:.3f}, per seed", bool(np.all((ref >= REVIEW_FLOOR) & (ref < LOG2))),
                 f"K1(W*) {_fmt(ref)}; K1 at W* scaled to the trained ||W||_F {_fmt(run.get('stage2', 'review.K1_ref_at_norm'))}; "
                 f"trained K1 at t1 {_fmt(trained)} (below the floor in {int(np.sum(trained < REVIEW_FLOOR))} seeds: "
                 "a trained margin above 1)")
