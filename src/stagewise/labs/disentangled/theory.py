"""The reduced two-scalar model of the reconstruction (spec section 5), no torch.

With V = a (u1 u1^T + u2 u2^T) and W = b w* w*^T the mean margins are m_Q = kappa_Q a and
m_P = kappa_P b, where (xor Q, Li-Wei-Ma mixture p0, q0, 1/L normaliser, L tokens, block
dimension d, Q noise std q_noise per coordinate, cluster norm ||zeta||)::

    kappa_Q ~ ((L-1)/L) (1-p0) (1/4) ||zeta||^2 (1 - 0.56 q_noise / ||zeta||)
    kappa_P ~ ((L-1)/L) (1-q0) (1/2) (1 + 0.8 / sqrt(d))^2

These are order-of-magnitude constants of the analysis (no fitted constant); the lab's
numerical floors (:mod:`.floors`) are the reference, these the cross-check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from .config import Config
    from .ensemble import Member

KAPPA_Q_NOISE = 0.56  # the Q noise's loss of margin per unit q_noise / ||zeta|| (spec section 5)
KAPPA_P_NOISE = 0.8  # the P noise's gain of margin, (1 + 0.8 / sqrt d)^2 (half-normal noise along w*)


def kappa_q(prompt_len: int, p0: float, zeta: float, q_noise: float) -> float:
    """kappa_Q: the mean Q margin per unit of a (V = a (u1 u1^T + u2 u2^T))."""
    return (prompt_len - 1) / prompt_len * (1 - p0) * 0.25 * zeta ** 2 * (1 - KAPPA_Q_NOISE * q_noise / zeta)


def kappa_p(prompt_len: int, q0: float, d: int) -> float:
    """kappa_P: the mean P margin per unit of b (W = b w* w*^T)."""
    return (prompt_len - 1) / prompt_len * (1 - q0) * 0.5 * (1 + KAPPA_P_NOISE / math.sqrt(d)) ** 2


# --- the two-scalar fixed point (spec section 5) ------------------------------------------------------------------
ROOT_XTOL = 1e-15  # brentq's absolute tolerance on a margin
ROOT_RTOL = 4 * 2.0 ** -52  # ... and relative (brentq's floor)
RESIDUAL_TOL = 1e-12  # both stationarity equations must hold to this (nats of margin) at the returned root


@dataclass(frozen=True)
class FixedPoint:
    """The reduced model's L2 optimum: mean margins m_P, m_Q and the floors softplus(-m)."""

    m_p: float
    m_q: float
    residual: float  # max |equation residual| of the two stationarity conditions at (m_p, m_q)

    @property
    def k1(self) -> float:
        """K1* = softplus(-m_P*) (P-bearing queries)."""
        return softplus(-self.m_p)

    @property
    def k2(self) -> float:
        """K2* = softplus(-m_Q*) (Q-bearing queries)."""
        return softplus(-self.m_q)


def softplus(x: float) -> float:
    """log(1 + e^x), stable for either sign."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x), stable for either sign."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def drives(m_p: float, m_q: float, p0: float, q0: float, objective: str = "total") -> tuple[float, float]:
    """(D_P, D_Q): the mean d(-loss)/d(margin) that drives W and V in the reduced model.

    total (one logistic loss on f = f1 + f2; query kinds: P-only p0, Q-only q0, both 1-p0-q0)::

        D_P = p0 s(-m_P) + (1-p0-q0) s(-m_P-m_Q)      D_Q = q0 s(-m_Q) + (1-p0-q0) s(-m_Q-m_P)

    branches (K1(W) + K2(V): each part's loss of its own margin; a query without the feature has
    part output 0 and a constant loss log 2)::

        D_P = (1-q0) s(-m_P)                          D_Q = (1-p0) s(-m_Q)
    """
    both = 1.0 - p0 - q0
    if objective == "total":
        return p0 * sigmoid(-m_p) + both * sigmoid(-m_p - m_q), q0 * sigmoid(-m_q) + both * sigmoid(-m_q - m_p)
    if objective == "branches":
        return (1.0 - q0) * sigmoid(-m_p), (1.0 - p0) * sigmoid(-m_q)
    raise ValueError(f"objective={objective!r}: unknown; allowed: total, branches")


def root_bracket(a: float) -> float:
    """An upper end hi of a bracket [0, hi] of m = a D(m) for any drive D(m) <= s(-m) (a > 0):
    min(a, 1 + log(1 + a)). hi = a works as D <= 1; when a is large, m = a D(m) < a e^-m has its
    root below 1 + log(1 + a) (there a e^-m < 1/e < m), so brentq needs ~log(a) fewer halvings
    (lambda = 1e-300 made a ~ 1e299 and brentq ran out of iterations)."""
    return min(a, 1.0 + math.log1p(a))


def fixed_point(k_p: float, k_q: float, p0: float, q0: float, l2: float, objective: str = "total") -> FixedPoint:
    """The stationary point of GD + L2 in the reduced model W = b w* w*^T, V = a (u1 u1^T + u2 u2^T),
    m_P = k_p b, m_Q = k_q a (k_p = kappa_P, k_q = kappa_Q)::

        m_Q = k_q^2 D_Q(m_P, m_Q) / (2 lambda)        m_P = k_p^2 D_P(m_P, m_Q) / lambda

    (:func:`drives` gives D_P, D_Q for either objective; ||V||_F^2 = 2 a^2 puts the 2 under V's).
    These are the conditions grad = 0 of the reduced objective
    l(b, a) = E[loss of the margins k_p b, k_q a] + (lambda/2)(b^2 + 2 a^2), a sum of softplus of
    linear functions plus a strictly convex term: l is strictly convex, so the root is unique.

    Solved as nested 1-D problems with brentq: for fixed m_P, m_Q -> m_Q - A_Q D_Q(m_P, m_Q) is
    strictly increasing (D_Q decreases in m_Q) with one root in [0, :func:`root_bracket` (A_Q)];
    then m_P -> h(m_P) = m_P - A_P D_P(m_P, m_Q(m_P)) is bracketed on [0, root_bracket(A_P)]
    (h(0) <= 0 <= h(hi): D <= s(-m) < e^-m). The branches objective decouples (D_P depends on
    m_P only, D_Q on m_Q only). Raises ValueError for l2 <= 0 (no finite optimum) or a
    non-positive k."""
    from scipy.optimize import brentq

    if not l2 > 0:
        raise ValueError(f"l2={l2!r}: the fixed point needs lambda > 0 (without L2 the margins grow without bound)")
    if not (k_p > 0 and k_q > 0):
        raise ValueError(f"kappa_P={k_p!r}, kappa_Q={k_q!r}: both must be > 0")
    a_p, a_q = k_p ** 2 / l2, k_q ** 2 / (2 * l2)
    solve = lambda fn, a: brentq(fn, 0.0, root_bracket(a), xtol=ROOT_XTOL, rtol=ROOT_RTOL, maxiter=500)  # noqa: E731

    def m_q_given(m_p: float) -> float:
        return solve(lambda m: m - a_q * drives(m_p, m, p0, q0, objective)[1], a_q)

    m_p = solve(lambda m: m - a_p * drives(m, m_q_given(m), p0, q0, objective)[0], a_p)
    m_q = m_q_given(m_p)
    d_p, d_q = drives(m_p, m_q, p0, q0, objective)
    residual = max(abs(m_p - a_p * d_p), abs(m_q - a_q * d_q))
    if not residual <= RESIDUAL_TOL * max(1.0, m_p, m_q):
        raise ValueError(f"fixed point not solved: residual {residual:.3e} at m_P={m_p:.6g}, m_Q={m_q:.6g}")
    return FixedPoint(m_p, m_q, residual)


def p_alone_fixed_point(k_p: float, p0: float, q0: float, l2: float, objective: str = "total") -> float:
    """m_P of the reduced model's L2 optimum with Q unlearned (m_Q = 0 held): the state the paper's
    stage 1 ends in, so softplus(-m_P) is the floor of K1 at t1 (issue 38)::

        m_P = k_p^2 D_P(m_P, 0) / lambda

    one brentq root on [0, :func:`root_bracket` (A_P)] (h(m) = m - A_P D_P(m, 0) is strictly
    increasing). For the branches objective it is :func:`fixed_point`'s m_P (D_P does not depend
    on m_Q); for the total one it is larger (a learned Q takes part of P's drive away)."""
    from scipy.optimize import brentq

    if not l2 > 0:
        raise ValueError(f"l2={l2!r}: the fixed point needs lambda > 0 (without L2 the margins grow without bound)")
    if not k_p > 0:
        raise ValueError(f"kappa_P={k_p!r}: must be > 0")
    a_p = k_p ** 2 / l2
    m_p = brentq(lambda m: m - a_p * drives(m, 0.0, p0, q0, objective)[0], 0.0, root_bracket(a_p), xtol=ROOT_XTOL,
                 rtol=ROOT_RTOL, maxiter=500)
    residual = abs(m_p - a_p * drives(m_p, 0.0, p0, q0, objective)[0])
    if not residual <= RESIDUAL_TOL * max(1.0, m_p):
        raise ValueError(f"P-alone fixed point not solved: residual {residual:.3e} at m_P={m_p:.6g}")
    return float(m_p)


# --- the range of a floor problem ---------------------------------------------------------------------------------
NO_L2 = "lambda = 0: no finite optimum (the loss keeps falling as the weights grow), so no floor"
SCALE2_RANGE = (1e-6, 1e6)  # s^2, the larger token block's mean squared norm, inside this (s in 1e-3..1e3 ||w*||)
L2_RATIO_RANGE = (1e-10, 1e3)  # lambda / s^4 inside this range


def feature_scale2(config: "Config", member: "Member") -> tuple[float, str]:
    """(s^2, block): the larger mean squared norm of a token's two blocks for ``member``'s data
    (P: gamma0^2 + p_noise^2 d, Q: q_centre^2 + ||zeta||^2 + q_noise^2 d; inf on overflow) and
    the config fields that set it. A score x_a^T W q is of order s^2 |W|, the Newton curvature
    Phi^T Phi of order s^4."""
    dc = config.data
    p_noise = 1 / math.sqrt(dc.d) if dc.p_noise is None else dc.p_noise
    q_noise = dc.model_copy(update={"zeta": member.zeta}).q_noise_std
    p_block = dc.gamma0 * dc.gamma0 + p_noise * p_noise * dc.d
    q_block = member.q_centre * member.q_centre + member.zeta * member.zeta + q_noise * q_noise * dc.d
    if p_block >= q_block:
        return p_block, f"P block (data.gamma0={dc.gamma0:g}, P noise {p_noise:.3g})"
    return q_block, f"Q block (data.zeta={member.zeta:g}, data.q_centre={member.q_centre:g}, Q noise {q_noise:.3g})"


def floor_range_reason(config: "Config", member: "Member") -> str | None:
    """Why ``member``'s floor (numerical and analytic) is outside what float64 can solve (None:
    inside). The floor problem is scale-covariant: features times c with lambda times c^4 is the
    same problem (W -> W / c^2; tests/labs/disentangled/test_floors_inputs.py), so what matters
    is lambda / s^4 (s^2 = :func:`feature_scale2`), checked against L2_RATIO_RANGE, and s^2
    itself against SCALE2_RANGE (the lab's units: ||w*|| = 1):

    - s^2 outside [1e-6, 1e6] (features of norm 1e-3..1e3 ||w*||): the certificate's tolerance
      (:data:`.floors.GRAD_TOL`) is absolute while the gradient scales like s^2. Above, float64
      round-off in the gradient reaches it (measured: stalls at 1e-8..1e-6 at s^2 = 1e10);
      below, it is loose (1e-8 / s^2 of the unit problem's); far out, s^4 and s^8 leave
      float64's range (zeta = 1e300 was a Cholesky error);
    - lambda / s^4 < 1e-10: the L2 term is within ~1e6 round-offs of the loss's curvature (up to
      s^4 / 4) in the Newton system lambda I + Phi^T Phi, which becomes numerically singular
      (measured: no convergence at 2.5e-13; the margins grow like log(s^4 / lambda) towards
      lambda = 0, which has no finite optimum);
    - lambda / s^4 > 1e3: the optimum is within O(s^4 / lambda) of zero weights and every floor
      is log 2 to about 1e-4 (measured K1* = 0.69308 at 250): nothing is left to solve, and the
      scores sit within round-off of their kinks (the solver stalls from 2.5e4 on)."""
    if not member.l2 > 0:
        return NO_L2
    scale2, block = feature_scale2(config, member)
    if not SCALE2_RANGE[0] <= scale2 <= SCALE2_RANGE[1]:
        return (f"{block}: token features of mean squared norm s^2 = {scale2:.3g} (||w*|| = 1), outside [{SCALE2_RANGE[0]:g}, "
                f"{SCALE2_RANGE[1]:g}]: the float64 solver's absolute gradient tolerance does not certify an optimum at that scale "
                "(the gradient scales like s^2); floors need features of norm 1e-3..1e3 (s^2 in that range)")
    fourth = scale2 * scale2
    ratio = member.l2 / fourth
    low, high = L2_RATIO_RANGE
    allowed = f"floors need lambda / s^4 in [{low:g}, {high:g}], lambda in [{low * scale2 * scale2:.3g}, {high * scale2 * scale2:.3g}] here"
    if ratio < low:
        return (f"train.l2={member.l2:g}: lambda / s^4 = {ratio:.3g} (s^2 = {scale2:.3g}, {block}) is below {low:g}: the L2 term "
                f"is lost against the loss's curvature in float64 (lambda -> 0 has no finite optimum); {allowed}")
    if ratio > high:
        return (f"train.l2={member.l2:g}: lambda / s^4 = {ratio:.3g} (s^2 = {scale2:.3g}, {block}) is above {high:g}: the optimum "
                f"is within O(s^4 / lambda) of zero weights, so every floor is log 2 = {math.log(2):.4f} to about 1e-4; {allowed}")
    return None


# --- the analytic floor of a lab member ---------------------------------------------------------------------------


def _derivation_checks(config: "Config", member: "Member") -> tuple[list[tuple[bool, str]], list[tuple[bool, str]]]:
    """The assumptions both fixed points share, as (holds, why not) in two groups (the model's and
    the targets'), in the order :func:`analytic_reason` reports them: split output, block weights,
    the 1/L normaliser, shared labels; then lambda > 0, gamma0 = 1 and P noise 1/sqrt(d), real targets."""
    dc, mc = config.data, config.model
    model = [(mc.output == "split", f"model.output={mc.output} (derived for split)"),
             (mc.weights == "block", f"model.weights={mc.weights} (derived for block)"),
             (mc.normalizer == "L", f"model.normalizer={mc.normalizer} (derived for 1/L)"),
             (dc.label_rule == "shared", f"data.label_rule={dc.label_rule} (derived for shared labels)")]
    labels = [(member.l2 > 0, NO_L2),
              (dc.gamma0 == 1 and (dc.p_noise is None or math.isclose(dc.p_noise, 1 / math.sqrt(dc.d))),
               f"data.gamma0={dc.gamma0:g}, data.p_noise={dc.p_noise} (kappa_P assumes gamma0 = 1 and P noise 1/sqrt(d))"),
              (not member.control, "shuffled-label control (its targets carry no feature)")]
    return model, labels


def analytic_reason(config: "Config", member: "Member") -> str | None:
    """Why the fixed point does not apply to ``member`` of ``config`` (None: it applies). It
    was derived for xor Q, split output, block weights, the 1/L normaliser, shared labels, no Q
    centre, lambda > 0, gamma0 = 1 and P noise 1/sqrt(d) (kappa_P's constant), real targets,
    cluster-level gates (Q noise radius q_noise sqrt(d) < ||zeta||, spec section 5), lambda and
    feature scale in float64's range (:func:`floor_range_reason`) and both features in the
    train and test mixtures (p0, q0 < 1)."""
    dc = config.data
    model, labels = _derivation_checks(config, member)
    checks = [(dc.q_geometry == "xor", f"data.q_geometry={dc.q_geometry} (derived for xor)"), *model,
              (member.q_centre == 0, f"q_centre={member.q_centre:g} (derived for no Q centre)"), *labels]
    for ok, why in checks:
        if not ok:
            return f"not applicable: {why}"
    q_noise = dc.model_copy(update={"zeta": member.zeta}).q_noise_std
    if q_noise * math.sqrt(dc.d) >= member.zeta:
        return (f"not applicable: token-level gates (Q noise radius q_noise sqrt(d) = {q_noise * math.sqrt(dc.d):.3g} >= "
                f"||zeta|| = {member.zeta:g}; derived for cluster-level gates)")
    out_of_range = floor_range_reason(config, member)
    if out_of_range is not None:
        return f"not applicable: {out_of_range}"
    for name, q0, p0 in (("train", member.q0, member.p0), ("test", dc.q0, dc.p0)):
        if q0 >= 1 or p0 >= 1:
            which = "P" if q0 >= 1 else "Q"
            return f"not applicable: no {which}-bearing tokens in the {name} mixture (p0={p0:g}, q0={q0:g}: kappa_{which} = 0)"
    if kappa_q(dc.prompt_len, member.p0, member.zeta, q_noise) <= 0:
        return f"not applicable: Q noise {q_noise:.3g} >= ||zeta|| / {KAPPA_Q_NOISE} (kappa_Q <= 0)"
    return None


def analytic_floor(config: "Config", member: "Member") -> dict[str, float | str]:
    """The ``analytic.*`` columns of one member: K1*, K2*, m_P*, m_Q* of :func:`fixed_point`
    for ``config.train.objective``, Q noise ``data.q_noise_std`` at the member's ||zeta||. The
    fixed point is solved with the member's training mixture (p0, q0); the margins are then
    read on the test prompts' (the config's) mixture, m = m_train kappa(test) / kappa(train)
    (the same when the two agree). NaN and ``analytic.reason`` where it does not apply."""
    reason = analytic_reason(config, member)
    if reason is not None:
        return {"analytic.K1": math.nan, "analytic.K2": math.nan, "analytic.m_P": math.nan, "analytic.m_Q": math.nan,
                "analytic.reason": reason}
    dc = config.data
    q_noise = dc.model_copy(update={"zeta": member.zeta}).q_noise_std
    k_q = lambda p0: kappa_q(dc.prompt_len, p0, member.zeta, q_noise)  # noqa: E731
    k_p = lambda q0: kappa_p(dc.prompt_len, q0, dc.d)  # noqa: E731
    point = fixed_point(k_p(member.q0), k_q(member.p0), member.p0, member.q0, member.l2, config.train.objective)
    m_p, m_q = point.m_p * k_p(dc.q0) / k_p(member.q0), point.m_q * k_q(dc.p0) / k_q(member.p0)
    return {"analytic.K1": softplus(-m_p), "analytic.K2": softplus(-m_q), "analytic.m_P": m_p, "analytic.m_Q": m_q,
            "analytic.reason": ""}


def p_floor_reason(config: "Config", member: "Member") -> str | None:
    """Why the P-alone fixed point does not apply to ``member`` (None: it applies). P's part of the
    derivation only: split output, block weights, the 1/L normaliser, shared labels, lambda > 0,
    gamma0 = 1 and P noise 1/sqrt(d), real targets, P in the train and test mixtures, lambda and the
    feature scale in float64's range. Q's gates (token-level in the gate-noise regime) do not
    enter: with m_Q held at 0, Q's geometry and noise do not appear in P's equation."""
    dc = config.data
    model, labels = _derivation_checks(config, member)
    checks = [*model, *labels, (member.q0 < 1 and dc.q0 < 1, f"no P-bearing tokens (q0={member.q0:g} train, {dc.q0:g} test)")]
    for ok, why in checks:
        if not ok:
            return f"not applicable: {why}"
    out_of_range = floor_range_reason(config, member)
    return None if out_of_range is None else f"not applicable: {out_of_range}"


def p_floor_t1(config: "Config", member: "Member") -> tuple[float, str]:
    """(K1 floor at t1 on the test mixture, reason): softplus(-m_P) of :func:`p_alone_fixed_point`
    for ``config.train.objective``, solved with the member's training mixture and read on the test
    prompts' (m = m_train kappa_P(test) / kappa_P(train), as :func:`analytic_floor`); (NaN, reason)
    where it does not apply."""
    reason = p_floor_reason(config, member)
    if reason is not None:
        return math.nan, reason
    dc = config.data
    k_p = lambda q0: kappa_p(dc.prompt_len, q0, dc.d)  # noqa: E731
    m_p = p_alone_fixed_point(k_p(member.q0), member.p0, member.q0, member.l2, config.train.objective)
    return softplus(-m_p * k_p(dc.q0) / k_p(member.q0)), ""
