"""Per-seed claims of the disentangled lab, computed from the ``stages`` table only.

Every claim instantiates a declared :mod:`.claimspecs` claim (one quantity each; the
accuracy parts of the loss-level criteria are claims of their own, ``*_acc``). A stage claim
is tested on each seed separately and holds when at least ``thresholds.seed_fraction`` of
the seeds pass (default: every seed); the claim gives the per-seed values and the pass
fraction. All thresholds are config fields fixed before the runs, their defaults the
declared ones (docs/disentangled.md section 4 says why each is what it is):

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

from ...report.claims import Claim, ClaimSpec
from . import claimspecs as cs
from .config import Config

LOG2 = math.log(2.0)
CHANCE = 0.5  # accuracy of a sign that knows nothing about the label
Q_ACC = "test.acc.q_part"  # accuracy of sign(f^2) on Q-bearing test queries (= Q-only accuracy on Q-only queries)
REVIEW_FLOOR = math.log1p(math.exp(-1.0))  # the reviewer's lower bound on K1, log(1 + e^-1) (= cs.REVIEW_K1_FLOOR.threshold)


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


def judged_by(spec: ClaimSpec, threshold: float) -> ClaimSpec:
    """``spec`` with the threshold this run's config fixed (``thresholds.*``); the declared
    one when the config keeps the default."""
    return spec if math.isclose(threshold, spec.threshold, rel_tol=0, abs_tol=1e-15) else \
        spec.model_copy(update={"threshold": float(threshold)})


def _per_seed(config: Config, spec: ClaimSpec, values: np.ndarray, evidence: str, seeds: list[int]) -> Claim:
    """``spec`` over the seeds, judged with ``thresholds.seed_fraction`` (1: every seed)."""
    return spec.result(values, evidence, seeds=seeds).with_required_fraction(config.thresholds.seed_fraction)


def _accuracy(config: Config, spec: ClaimSpec, acc: np.ndarray, evidence: str, seeds: list[int]) -> Claim:
    """An accuracy part on P-only queries: not testable when the test split has none (NaN)."""
    if not np.isfinite(acc).any():
        return spec.not_testable("no P-only test queries in this data (e.g. composite labels with p0 = 0)", evidence)
    return _per_seed(config, spec, acc, evidence, seeds)


def stage_claims(config: Config, stages: pd.DataFrame, variant: str = "") -> list[Claim]:
    """The per-seed stage claims of one variant, paired with its shuffled-label control
    (:mod:`.claimspecs`: losses in units of log 2, thresholds from ``thresholds.*``)."""
    th, t1, end = config.thresholds, config.train.t1, config.train.steps
    run, control = SeedValues.of(stages, variant), SeedValues.of(stages, control_of(variant))
    if run.empty:
        return []
    seeds = run.seeds
    passes = stage_passes(config, run, control)
    g = run.get
    bound1 = control_bound(control, "stage1", th.control_quantile)
    bound2 = control_bound(control, "stage2", th.control_quantile)
    k1_1, k1_2 = g("stage1", "test.K1.p_queries"), g("stage2", "test.K1.p_queries")
    k2_1, k2_2 = g("stage1", "test.K2.q_queries"), g("stage2", "test.K2.q_queries")
    ap1, ap2 = g("stage1", "test.acc.p_only"), g("stage2", "test.acc.p_only")
    aq1, aq2 = g("stage1", Q_ACC), g("stage2", Q_ACC)
    p1 = f"t1 = {t1}: K1 {_fmt(k1_1)}; P-only acc {_fmt(ap1, 2)}"
    p2 = f"end (t = {end}): K1 {_fmt(k1_2)}; P-only acc {_fmt(ap2, 2)}"
    out = [_per_seed(config, judged_by(cs.P_LEARNED_STAGE1, th.p_loss), k1_1 / LOG2, p1, seeds),
           _accuracy(config, judged_by(cs.P_LEARNED_STAGE1_ACC, th.p_learned), ap1, p1, seeds)]
    q1 = f"t1 = {t1}: K2 {_fmt(k2_1)}; Q-part acc {_fmt(aq1, 2)}"
    out.append(_per_seed(config, judged_by(cs.Q_NOT_LEARNED_STAGE1, th.q_flat), np.abs(k2_1 - LOG2) / LOG2, q1, seeds))
    acc1 = judged_by(cs.Q_NOT_LEARNED_STAGE1_ACC, 0.0)
    if control.empty:
        out.append(acc1.not_testable("no shuffled-label control in this run (experiment.control=false)", q1))
    else:
        out.append(_per_seed(config, acc1, np.abs(aq1 - CHANCE) - bound1,
                             f"{q1}; control band 0.5 +- {bound1:.3f} (control Q-part acc {_fmt(control.get('stage1', Q_ACC), 2)})",
                             seeds))
    out.append(_per_seed(config, judged_by(cs.Q_LEARNED_STAGE2, th.q_loss), k2_2 / LOG2,
                         f"K2 at t1 {_fmt(k2_1)}; at the end {_fmt(k2_2)}", seeds))
    out.append(_per_seed(config, judged_by(cs.P_KEPT_STAGE2, th.p_loss), k1_2 / LOG2, p2, seeds))
    out.append(_accuracy(config, judged_by(cs.P_KEPT_STAGE2_ACC, th.p_learned), ap2, p2, seeds))
    q2 = f"Q-part acc at t1 {_fmt(aq1, 2)}; at the end {_fmt(aq2, 2)}"
    out.append(_per_seed(config, judged_by(cs.Q_ACCURACY_STAGE2, th.q_learned), aq2, q2, seeds))
    if control.empty:
        out.append(cs.Q_ACCURACY_ABOVE_CONTROL.not_testable("no shuffled-label control in this run (experiment.control=false)", q2))
    else:
        out.append(_per_seed(config, cs.Q_ACCURACY_ABOVE_CONTROL, aq2 - CHANCE - bound2,
                             f"{q2}; control band at the end 0.5 +- {bound2:.3f}", seeds))
    count = np.sum([passes[k] for k in STAGED], axis=0).astype(float)  # (S,) criteria passed
    out.append(_per_seed(config, cs.TWO_STAGE_PER_SEED, count,
                         f"{int(np.sum(count >= len(STAGED)))}/{len(count)} seeds pass; criteria passed per seed "
                         + ", ".join(str(int(c)) for c in count), seeds))
    if not control.empty:
        ctrl_q = control.get("stage2", "test.K2.q_queries")
        out.append(judged_by(cs.CONTROL_NOT_STAGED, th.q_loss).result(ctrl_q / LOG2, f"control K2 at the end {_fmt(ctrl_q)}",
                                                                      seeds=control.seeds))
    return out


def spectral_claims(config: Config, stages: pd.DataFrame, truncation: dict[str, float], variant: str = "") -> list[Claim]:
    """The corollary ("small singular values carry P, large ones Q") at the end, three times:
    on whole spectra (||W||_2 / ||V||_2 per seed), on the truncation of blockdiag(W, V)
    (means over seeds), and on the signal parts (|w*^T W w*| / sigma_max(Z^T V Z) per seed):
    noise in V can make the whole-spectrum comparison hold while V's signal is tiny."""
    run = SeedValues.of(stages, variant)
    if run.empty:
        return []
    g = lambda c: run.get("stage2", c)  # noqa: E731
    d = config.data.d
    spectra = f"||W||_2 {_fmt(g('W.spectral'))}; ||V||_2 {_fmt(g('V.spectral'))}"
    out = [_per_seed(config, cs.SPECTRAL_COROLLARY, g("W.spectral") / g("V.spectral"), spectra, run.seeds)]
    margin = min(truncation.get("bottom.p_only", np.nan) - truncation.get("top.p_only", np.nan),
                 truncation.get("top.q_only", np.nan) - truncation.get("bottom.q_only", np.nan))
    out.append(cs.SPECTRAL_TRUNCATION.result(margin, f"keeping {d} of {2 * d} directions: "
                                             + ", ".join(f"{k} {v:.3f}" for k, v in sorted(truncation.items()))))
    out.append(_per_seed(config, cs.SPECTRAL_SIGNAL, np.abs(g("W.signal")) / g("V.signal.sv.0"),
                         f"P signal {_fmt(np.abs(g('W.signal')))}; Q signal sv0 {_fmt(g('V.signal.sv.0'))}, "
                         f"sv1 {_fmt(g('V.signal.sv.1'))}; {spectra}; share of ||V||_F^2 on span zeta "
                         f"{_fmt(g('V.signal_share'))}", run.seeds))
    return out


def review_claims(config: Config, stages: pd.DataFrame, variant: str = "") -> list[Claim]:
    """The reviewer's point: K1 at the unit-margin reference W* = c w* w*^T (c sets the mean
    P margin y f^1 over P-bearing test queries to 1) is at least log(1 + e^-1) (Jensen:
    softplus(-m) is convex, so E softplus(-m) >= softplus(-E m)) and so never near 0, and
    below log 2; the trained K1 is shown beside it. Empty when the reference was not logged."""
    run = SeedValues.of(stages, variant)
    ref = run.get("stage2", "review.K1_ref") if not run.empty else np.array([])
    if not ref.size or not np.all(np.isfinite(ref)):
        return []
    trained = run.get("stage1", "test.K1.p_queries")
    evidence = (f"K1(W*) {_fmt(ref)}; K1 at W* scaled to the trained ||W||_F {_fmt(run.get('stage2', 'review.K1_ref_at_norm'))}; "
                f"trained K1 at t1 {_fmt(trained)} (below the floor in {int(np.sum(trained < REVIEW_FLOOR))} seeds: "
                "a trained margin above 1)")
    return [cs.REVIEW_K1_FLOOR.result(ref, evidence, seeds=run.seeds),
            cs.REVIEW_K1_BELOW_LOG2.result(ref / LOG2, evidence, seeds=run.seeds)]


# --- the gate-noise story against what the model attains (issue 38) ---------------------------------------------------
REFERENCE = "no-noise"
"""The variant of the noise-free reference run (the ablation of the same seeds and data)."""
NO_ANNEAL = "no-anneal"
NO_REFERENCE = ("no noise-free reference run in this run (experiment.ablations without no-noise): the attainable Q and "
                "joint floors of the gate-noise regime are that run's")


@dataclass(frozen=True)
class GateNoiseValues:
    """Per-seed test losses (nats, (S,) in the order of ``seeds``) of a gate-noise run read at t1
    and at one end step: the annealed run (``k1_t1``, ``k2_t1``, ``k1_end``, ``k2_end``), its
    noise-free reference (``ref_k1_end``, ``ref_k2_end``; NaN without one), the no-anneal twin's and
    the shuffled control's K2 at the end (NaN without them). ``p_floor``: K1 at t1's attainable
    floor with Q unlearned (:func:`.theory.p_floor_t1`; NaN with ``p_floor_reason``)."""

    seeds: list[int]
    t1: int
    end: int
    k1_t1: np.ndarray
    k2_t1: np.ndarray
    k1_end: np.ndarray
    k2_end: np.ndarray
    ref_k1_end: np.ndarray
    ref_k2_end: np.ndarray
    no_anneal_k2_end: np.ndarray
    control_k2_end: np.ndarray
    p_floor: float
    p_floor_reason: str = ""

    @property
    def has_reference(self) -> bool:
        return bool(np.isfinite(self.ref_k2_end).any())

    @classmethod
    def of_stages(cls, config: Config, stages: pd.DataFrame, variant: str = "baseline") -> "GateNoiseValues":
        """From the ``stages`` table of an ablations run (stage1 = t1, stage2 = the end)."""
        from .ensemble import members_from_config
        from .theory import p_floor_t1

        run = SeedValues.of(stages, variant)
        seeds = run.seeds

        def end(name: str, column: str) -> np.ndarray:
            other = SeedValues.of(stages, name)
            if other.empty:
                return np.full(len(seeds), np.nan)
            by_seed = dict(zip(other.seeds, other.get("stage2", column)))
            return np.array([by_seed.get(s, np.nan) for s in seeds], dtype=float)  # (S,) aligned on the run's seeds

        floor, reason = p_floor_t1(config, members_from_config(config)[0])
        return cls(seeds, config.train.t1, config.train.steps, run.get("stage1", "test.K1.p_queries"),
                   run.get("stage1", "test.K2.q_queries"), run.get("stage2", "test.K1.p_queries"),
                   run.get("stage2", "test.K2.q_queries"), end(REFERENCE, "test.K1.p_queries"),
                   end(REFERENCE, "test.K2.q_queries"), end(NO_ANNEAL, "test.K2.q_queries"),
                   end(control_of(variant), "test.K2.q_queries"), floor, reason)


def realised_share(k: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    """(log 2 - K) / (log 2 - K_floor): the share of the attainable drop from log 2 realised (S,);
    NaN where the floor is not below log 2 (nothing to attain: the share cannot carry a verdict)."""
    room = LOG2 - np.asarray(floor, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(room > 0, (LOG2 - np.asarray(k, dtype=float)) / np.where(room > 0, room, 1.0), np.nan)


def gate_noise_claims(values: GateNoiseValues, seed_fraction: float = 1.0, p_loss: float = 0.5, q_loss: float = 0.5,
                      ) -> tuple[list[Claim], list[Claim]]:
    """(criteria, absolute): the six floor-relative criteria of :data:`.claimspecs.GATE_NOISE_CRITERIA`
    in the story's order, and the lab's absolute loss-level criteria re-judged against the same
    floors (P learned at t1 against K1*_t1; Q learned and P kept at the end against the reference's
    smallest K over the seeds): a threshold below its floor reads "not testable", never "fails".
    Each is per seed (``seed_fraction`` of the seeds must pass; 1: every seed), with the sign test
    beside it."""
    v = values
    seeds, t1, end = v.seeds, v.t1, v.end
    ref = "noise-free reference (no-noise)"
    p_share_t1 = realised_share(v.k1_t1, v.p_floor)
    q_share_t1, q_share_end = realised_share(v.k2_t1, v.ref_k2_end), realised_share(v.k2_end, v.ref_k2_end)
    p_share_end = realised_share(v.k1_end, v.ref_k1_end)
    floor_t1 = f"K1*_t1 {v.p_floor:.3f}" if np.isfinite(v.p_floor) else f"K1*_t1 none ({v.p_floor_reason})"

    def per_seed(spec: ClaimSpec, share: np.ndarray, evidence: str, needs: str = "") -> Claim:
        if needs:
            return spec.not_testable(needs, evidence)
        return spec.result(share, evidence, seeds=seeds).with_required_fraction(seed_fraction)

    no_ref = "" if v.has_reference else NO_REFERENCE
    flat_ref = [s for s, k in zip(seeds, v.ref_k2_end) if np.isfinite(k) and k >= LOG2]
    if not no_ref and flat_ref:  # the reference itself did not learn Q: there is no attainable drop to take a share of
        no_ref = (f"the noise-free reference does not learn Q (K2_ref >= log 2 in seed(s) {', '.join(map(str, flat_ref))}: "
                  f"{_fmt(v.ref_k2_end)}): no attainable drop to take a share of")
    crit = [
        per_seed(cs.GN_P_LEARNED_T1, p_share_t1, f"t1 = {t1}: K1 {_fmt(v.k1_t1)}; {floor_t1}; share {_fmt(p_share_t1, 2)}",
                 "" if np.isfinite(v.p_floor) else f"no floor of K1 at t1: {v.p_floor_reason}"),
        per_seed(cs.GN_Q_NOT_LEARNED_T1, q_share_t1, f"t1 = {t1}: K2 {_fmt(v.k2_t1)}; {ref} K2 {_fmt(v.ref_k2_end)}; "
                 f"share {_fmt(q_share_t1, 2)}", no_ref),
        per_seed(cs.GN_Q_LEARNED_END, q_share_end, f"step {end}: K2 {_fmt(v.k2_end)}; {ref} K2 {_fmt(v.ref_k2_end)}; "
                 f"share {_fmt(q_share_end, 2)}", no_ref),
        per_seed(cs.GN_P_KEPT_END, p_share_end, f"step {end}: K1 {_fmt(v.k1_end)}; {ref} K1 {_fmt(v.ref_k1_end)}; "
                 f"share {_fmt(p_share_end, 2)}", no_ref),
    ]
    for spec, k2, name in ((cs.GN_NO_ANNEAL_NOT_LEARNED, v.no_anneal_k2_end, "no-anneal twin"),
                           (cs.GN_CONTROL_NOT_LEARNED, v.control_k2_end, "shuffled control")):
        share = realised_share(k2, v.ref_k2_end)
        missing = no_ref or ("" if np.isfinite(k2).any() else f"no {name} in this run")
        crit.append(per_seed(spec, share, f"step {end}: {name} K2 {_fmt(k2)}; {ref} K2 {_fmt(v.ref_k2_end)}; "
                             f"share {_fmt(share, 2)}", missing))
    # the absolute criteria beside, against the same floors (units of log 2, as the stage claims)
    ref_k2_min = float(np.nanmin(v.ref_k2_end)) if v.has_reference else None
    ref_k1_min = float(np.nanmin(v.ref_k1_end)) if np.isfinite(v.ref_k1_end).any() else None
    empirical = "empirical floor: the smallest over the seeds of the noise-free reference run's (no-noise) value"
    absolute = [
        cs.P_LEARNED_STAGE1.model_copy(update={"threshold": p_loss}).result(
            v.k1_t1 / LOG2, f"t1 = {t1}: K1 {_fmt(v.k1_t1)}; {floor_t1}", seeds=seeds,
            bound=v.p_floor / LOG2 if np.isfinite(v.p_floor) else None, bound_name=cs.GN_P_LEARNED_T1.floor
        ).with_required_fraction(seed_fraction),
        cs.Q_LEARNED_STAGE2.model_copy(update={"threshold": q_loss}).result(
            v.k2_end / LOG2, f"step {end}: K2 {_fmt(v.k2_end)}; {ref} K2 {_fmt(v.ref_k2_end)}", seeds=seeds,
            bound=None if ref_k2_min is None else ref_k2_min / LOG2, bound_name=empirical).with_required_fraction(seed_fraction),
        cs.P_KEPT_STAGE2.model_copy(update={"threshold": p_loss}).result(
            v.k1_end / LOG2, f"step {end}: K1 {_fmt(v.k1_end)}; {ref} K1 {_fmt(v.ref_k1_end)}", seeds=seeds,
            bound=None if ref_k1_min is None else ref_k1_min / LOG2, bound_name=empirical).with_required_fraction(seed_fraction),
    ]
    return crit, absolute
