"""The ntp lab's declared claims (:class:`~stagewise.report.claims.ClaimSpec`), fixed before any run.

Imports nothing heavy: `stagewise claims ntp` lists these without torch.

Paper 2 is Huang, Liang, Yang (NeurIPS 2024); docs/ntp.md section 4 says what each claim
tests and when it applies. "every seed" (``over="every"``): the claim holds when each
ensemble member passes, and its value is the worst member's. Compound tests of earlier
versions are split into one quantity each (the primary part keeps the old id).
"""

from __future__ import annotations

from ...report.claims import ClaimSpec, own, paper, reviewer

SOURCES = {"paper2": "paper 2: Huang, Liang, Yang, NeurIPS 2024 (next-token prediction)"}
"""The paper the claims cite (``Lab.sources``): key -> heading; ``paper("paper2", where)`` names it."""

ROUNDOFF_TOL = 1e-12
"""A fitted slope (1/step) or exponent this close to zero is round-off, not a direction:
such a value cannot carry a verdict (the verdict engine makes the claim not testable). A late rate the theory
predicts is eta / ||W_kq*|| >= about 1e-4 per step in every preset; float64 logs of an underflowed gap (L - floor
at 1e-14) give slopes of 1e-16-1e-19 (README's own-data run before the engine: two claims 'held' on 4e-16 and -3e-19)."""

_NO_CONTROL_EXACT = ("none in the lab: exact algebra under its preconditions (normalized GD, zero init, orthonormal "
                     "embeddings); a tampered record (e.g. W_ov.fro off t*eta0 at one step) fails it")

# --- stage 1 (claims.training_claims) ---------------------------------------------------------------------------------
STAGE1_DIRECTION = ClaimSpec(
    id="stage1_direction", statement="after stage 1, W_ov points along its max-margin direction W_ov*",
    source=paper("paper2", "abstract (the feed-forward layer converges to its max-margin solution)"),
    quantity="cos(W_ov, W_ov*) at t = T", relation=">=", threshold=0.99,
    control="preset adam (Adam's sign-like steps: cos(W_ov, W_ov*) about 0.44)")


def _exact(id: str, statement: str, derivation: str, quantity: str) -> ClaimSpec:
    """An exact-algebra check of ours: ``quantity`` is round-off (<= EXACT_TOL = 1e-9) under
    the preconditions; no control run, a tampered record fails it."""
    return ClaimSpec(id=id, statement=statement, source=own(derivation), quantity=quantity, relation="<=",
                     threshold=EXACT_TOL, control=_NO_CONTROL_EXACT)


EXACT_TOL = 1e-9
"""Round-off bound of the exact-algebra checks (float64)."""
STAGE1_EXACT = _exact("stage1_exact", "zero init: cos(W_ov, W_ov*) = 1 from step 1 (to round-off)",
                      "derived: with zero init the first normalized step is already along W_ov*",
                      "max over steps 1..T of |1 - cos(W_ov, W_ov*)|")
STAGE1_NORM_EXACT = _exact("stage1_norm_exact", "zero init: ||W_ov|| = t eta0 in stage 1 (to round-off)",
                           "derived: normalized GD moves W_ov by eta0 per step along a fixed direction",
                           "max over steps 1..T before a member froze of | ||W_ov|| - t eta0 |")
LOSS_FLOOR_CLOSED_FORM = _exact(
    "loss_floor_closed_form", "the stage-2 loss floor equals log(1 + (|V|-1) e^-Delta), Delta = T eta0 / sqrt(|V|-1)",
    "derived: the floor set by stage 1",
    "|train.loss.floor at t = T - log(1 + (|V|-1) e^-Delta)| / max(1, closed form)")

# --- stage 2 (claims.training_claims) ---------------------------------------------------------------------------------
NORMS_LINEAR = ClaimSpec(
    id="norms_linear", statement="||W_kq|| grows linearly in t over stage 2",
    source=paper("paper2", "abstract (norms grow linearly under normalized GD)"),
    quantity="R^2 of the linear fit of ||W_kq|| against t over stage 2", relation=">=", threshold=0.99,
    control="preset gd (plain GD: norms grow ~log t)")
COS_WKQ_TO_ONE = ClaimSpec(
    id="cos_wkq_to_one", statement="cos(W_kq, W_kq*) -> 1: close to 1 at the last step",
    source=paper("paper2", "abstract (sub-linear convergence of W_kq to its max-margin direction)"),
    quantity="cos(W_kq, W_kq*) at the last step", relation=">=", threshold=0.95,
    control="preset adam (cos(W_kq, W_kq*) 0.85..0.92 after 8000 stage-2 steps)")
COS_WKQ_EXPONENT = ClaimSpec(
    id="cos_wkq_exponent", statement="1 - cos(W_kq, W_kq*) decays in t (theory: ~1/t up to log factors)",
    source=paper("paper2", "abstract (sub-linear convergence of W_kq to its max-margin direction)"),
    quantity="fitted exponent of 1 - cos(W_kq, W_kq*) against stage time, second half of stage 2", relation=">",
    threshold=0.0, tolerance=ROUNDOFF_TOL,
    control="preset adamw (weight decay bounds the norm: no convergence in direction expected)")
LOSS_LINEAR = ClaimSpec(
    id="loss_linear", statement="L - floor converges linearly: log(L - floor) falls in t over the second half of stage 2",
    source=paper("paper2", "abstract (linear convergence of the cross-entropy loss)"),
    quantity="fitted slope of log(L - floor) against t, second half of stage 2", relation="<", threshold=0.0, unit="1/step",
    tolerance=ROUNDOFF_TOL,
    floor="log(1 + (|V|-1) e^-Delta) per sample, Delta = T eta0 / sqrt(|V|-1) (set by stage 1)",
    control="preset adamw (weight decay bounds ||W_kq||: L stays above the floor by a constant)")
LOSS_LINEAR_FIT = ClaimSpec(
    id="loss_linear_fit", statement="log(L - floor) is linear in t over the second half of stage 2",
    source=paper("paper2", "abstract (linear convergence of the cross-entropy loss)"),
    quantity="R^2 of the linear fit of log(L - floor) against t, second half of stage 2", relation=">=", threshold=0.9,
    floor="log(1 + (|V|-1) e^-Delta) per sample", control="preset adamw (the gap levels off: not log-linear)")
ATTENTION_CONCENTRATES = ClaimSpec(
    id="attention_concentrates", statement="attention on optimal positions -> 1 exponentially: 1 - (min mass over samples) "
    "falls log-linearly over the second half of stage 2",
    source=paper("paper2", "Theorem 2"), quantity="fitted slope of log(1 - min optimal attention mass) against t, second half of stage 2",
    relation="<", threshold=0.0, unit="1/step", floor="0 (mass 1)", tolerance=ROUNDOFF_TOL,
    control="preset adamw (weight decay bounds the scores: the mass levels off below 1)")
ATTENTION_FIT = ClaimSpec(
    id="attention_concentrates_fit", statement="log(1 - min optimal attention mass) is linear in t over the second half of stage 2",
    source=paper("paper2", "Theorem 2"), quantity="R^2 of that log-linear fit", relation=">=", threshold=0.95,
    control="preset adamw (the gap levels off: not log-linear)")
ATTENTION_RISES = ClaimSpec(
    id="attention_rises", statement="the min optimal attention mass ends higher than at the start of stage 2",
    source=paper("paper2", "Theorem 2"), quantity="min optimal attention mass at the last step minus at t = T (t = 0 for joint)",
    relation=">", threshold=0.0, control="a run with train.steps_stage2 = 0 (W_kq never trained: no change)")
GENERALIZATION = ClaimSpec(
    id="generalization", statement="every unseen sentence covered by the theory is predicted as it says",
    source=paper("paper2", "Section 6"), quantity="accuracy on the covered cases of the generalization suite", relation=">=",
    threshold=1.0, control="a run with train.steps_stage2 = 0 (W_kq = 0: uniform attention, no ranking of unseen tokens)")
EXAMPLE1 = ClaimSpec(
    id="example1", statement="the named Example-1 input predicts the token Section 6 says ('S P' -> V, 'O S P' -> P)",
    source=paper("paper2", "Section 6 (Example 1)"), quantity="1 when the input's prediction is the expected token, else 0",
    relation=">=", threshold=1.0,
    control="a run with train.steps_stage2 = 0 (W_kq = 0: 'O S P' attends uniformly and predicts V, not P)")

# --- long horizon (claims.horizon_claims) -----------------------------------------------------------------------------
LATE_RATE_MARGIN = ClaimSpec(
    id="late_rate_margin", statement="late rates of log(L - floor) and log(1 - min optimal attention) equal -eta/||W_kq*||",
    source=own("derived: the score gaps grow by eta/||W_kq*|| per step (docs/ntp.md section 10)"),
    quantity="max of |fitted late rate / (-eta/||W_kq*||) - 1| over the loss gap and the attention gap",
    relation="<=", threshold=0.05, control="preset adam on example1 (train.optimizer=adam: the late rates differ)")
LATE_RATE_THEOREM2 = ClaimSpec(
    id="late_rate_theorem2", statement="late rates are at least Theorem 2's C_1 = eta / (4 L_max ||W_kq*||^2) in magnitude",
    source=paper("paper2", "Theorem 2"), quantity="min of -late rate / C_1 over the loss gap and the attention gap", relation=">=",
    threshold=1.0, control="preset adamw (weight decay: the late gaps stop falling); Adam still passes (-rate/C_1 21-27)")
NORM_BAND_THEOREM1 = ClaimSpec(
    id="norm_band_theorem1",
    statement="Theorem 1's band t eta / (2 ||W_kq*||) <= ||W_kq(t)|| <= t eta at every logged stage-2 step",
    source=paper("paper2", "Theorem 1"),
    quantity="worst relative excursion outside the band: max(max ||W_kq|| / (t eta) - 1, 1 - min ||W_kq|| / (t eta / (2 ||W_kq*||)))",
    relation="<=", threshold=1e-9, control="preset adam on example1 (train.optimizer=adam: ||W_kq|| leaves the band)")
CLOSER_TO_QP = ClaimSpec(
    id="closer_to_qp_than_prop2", statement="at the last step W_kq is closer in direction to the QP max-margin solution than "
    "to Proposition 2's closed form, every seed where the two differ",
    source=paper("paper2", "Proposition 2 (its closed form is not optimal in general: derived)"),
    quantity="(1 - cos(W_kq, W_qp)) - (1 - cos(W_kq, W_prop2)) at the last step, seeds where the two differ",
    relation="<", threshold=0.0, control="none run: tracking Proposition 2's closed form instead of the QP would fail it")

# --- the comparison experiment (claims.compare_claims) ----------------------------------------------------------------
_WHY_TWO_STAGE = reviewer("review: why a two-stage algorithm, and is it worth anything against single-stage training?")


def _two_stage_vs_joint(weight: str, symbol: str) -> ClaimSpec:
    """The comparison claim "two-stage NGD ends closer to ``symbol``* than joint NGD" for one weight."""
    return ClaimSpec(
        id=f"compare_{weight}_two_stage_vs_joint", statement=f"two-stage NGD ends closer to {symbol}* than joint NGD",
        source=_WHY_TWO_STAGE, quantity=f"cos({symbol}, {symbol}*) at the last step, two_stage minus joint",
        relation=">", threshold=0.0, control="the joint and two_stage records swapped (tests); no run of the lab inverts it")


COMPARE_WKQ_JOINT = _two_stage_vs_joint("wkq", "W_kq")
COMPARE_WOV_JOINT = _two_stage_vs_joint("wov", "W_ov")
COMPARE_WKQ_ADAM = ClaimSpec(
    id="compare_wkq_ngd_vs_adam", statement="normalized GD ends closer to W_kq* than Adam and AdamW",
    source=reviewer("review: normalized GD is rare in practice; AdamW is what people use"),
    quantity="cos(W_kq, W_kq*) at the last step, two_stage minus the larger of adam and adamw", relation=">", threshold=0.0,
    control="none run: a variant with the same implicit bias (e.g. plain GD) would not be strictly worse")
COMPARE_NORM_ADAMW = ClaimSpec(
    id="compare_norm_adamw_below_adam", statement="AdamW's weight decay keeps ||W_kq|| below Adam's",
    source=reviewer("review: normalized GD is rare in practice; AdamW is what people use"),
    quantity="||W_kq|| at the last step, adamw minus adam", relation="<", threshold=0.0,
    control="train.weight_decay=0 (AdamW = Adam: equal norms, the strict inequality fails)")

CLAIMS: tuple[ClaimSpec, ...] = (
    STAGE1_DIRECTION, STAGE1_EXACT, STAGE1_NORM_EXACT, LOSS_FLOOR_CLOSED_FORM, NORMS_LINEAR, COS_WKQ_TO_ONE, COS_WKQ_EXPONENT,
    LOSS_LINEAR, LOSS_LINEAR_FIT, ATTENTION_CONCENTRATES, ATTENTION_FIT, ATTENTION_RISES, GENERALIZATION, EXAMPLE1,
    LATE_RATE_MARGIN, LATE_RATE_THEOREM2, NORM_BAND_THEOREM1, CLOSER_TO_QP,
    COMPARE_WKQ_JOINT, COMPARE_WOV_JOINT, COMPARE_WKQ_ADAM, COMPARE_NORM_ADAMW,
)
