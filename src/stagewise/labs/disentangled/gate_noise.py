"""Sizing of the gate-noise regime (spec section 5): Li-Wei-Ma's "noise hides the fine pattern".

With high-dimensional Q data noise (radius R = q_noise sqrt(d) = r ||zeta||, r ~ 4-8, while
q_noise = r ||zeta|| / sqrt(d) < ||zeta|| per coordinate) the update noise randomises the
ReLU gates of the Q branch token by token, and the Q margin's mean drift shrinks like
a ||zeta||^2 / sigma. The order-of-magnitude relations of the analysis, no fitted constant
(xor Q, Li-Wei-Ma mixture p0, q0 = 0.2, 1/L normaliser, update noise std c * lr per entry;
the rates are named as the config's: lr_stage1, lr_stage2 are the paper's eta1, eta2)::

    q_noise      = r ||zeta|| / sqrt(d)                   R = r ||zeta||
    kappa_Q      = theory.kappa_q(L, p0, ||zeta||, q_noise)
    lambda       = kappa_Q^2 / rho                        rho = kappa_Q^2 / lambda (26-60: floor K2* <= 0.347)
    sigma_crit   = 0.016 ||zeta||^4 / lambda              unlearned Q stable while sigma > sigma_crit
    sigma_1      = s1 sigma_crit                          stage 1 (s1 ~ 1.5)
    delta_1      = sigma_1 / R^2                          stationary weight-noise std (sigma ~ delta R^2)
    c            = delta_1 / sqrt(lr_stage1 / (2 lambda)) train.noise (delta = c sqrt(lr / (2 lambda)))
    sigma_2      = sigma_1 sqrt(lr_stage2 / lr_stage1)    stage 2: must be < sigma_crit
    f_random     = sqrt((1 - p0) / 2) sqrt(L - 1) / L sigma_1   (~0.63 sigma / sqrt(L)) the random Q output
    K2(t1) - log 2 ~ f_random^2 / 8                       within 5 % of log 2 needs f_random <~ 0.5
    t1           = T1_TIMES / (lr_stage1 lambda)          steps = t1 + T2_TIMES / (lr_stage2 lambda)

f_random: a context token's score is ~N(0, sigma^2) and independent of its label, so
y_l ReLU(s_l) has mean 0 and variance sigma^2 / 2 on the (1 - p0) share of Q-bearing tokens;
(1/L) times a sum of L - 1 of them. softplus(-x) = log 2 - x/2 + x^2/8 + ... gives the excess.
Size a run with these, then measure: they are the analysis' orders, not fitted values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import UserError
from . import theory

SIGMA_CRIT = 0.016  # sigma_crit / (||zeta||^4 / lambda) at q0 = 0.2 (spec section 5)
STAGE1_RATIO = 1.5  # sigma_1 / sigma_crit (spec section 5)
RADIUS_RANGE = (4.0, 8.0)  # R / ||zeta|| of the regime (spec section 5)
RHO_RANGE = (26.0, 60.0)  # kappa_Q^2 / lambda where the floor K2* <= 0.347 is attainable (spec section 5)
RANDOM_OUTPUT_MAX = 0.5  # random Q output below which K2(t1) stays within ~5 % of log 2
T1_TIMES = 3.0  # stage 1 lasts this many L2 relaxation times 1 / (lr_stage1 lambda) (P learned, weight noise stationary)
T2_TIMES = 9.0  # stage 2: relaxation times 1 / (lr_stage2 lambda). Measured (docs/disentangled.md 5a.3): the weight
# noise first decays (1 / (2 lr_stage2 lambda)), then the Q margin grows; at 3 times K2 was still falling, flat from ~6


@dataclass(frozen=True)
class GateNoiseSizing:
    """Inputs and sized values of one gate-noise run (module docstring for the formulas)."""

    d: int  # block dimension
    prompt_len: int  # L
    zeta: float  # ||zeta||
    radius: float  # r = R / ||zeta|| (data.q_noise_radius)
    rho: float  # target kappa_Q^2 / lambda
    stage1_ratio: float  # sigma_1 / sigma_crit
    lr_stage1: float
    lr_stage2: float
    p0: float
    q0: float
    q_noise: float  # per-coordinate Q noise std r ||zeta|| / sqrt(d)
    kappa_q: float
    kappa_p: float
    l2: float  # lambda
    sigma_crit: float
    sigma_1: float
    sigma_2: float
    delta_1: float  # stationary weight-noise std per entry in stage 1
    noise: float  # c = train.noise
    random_output: float  # std of the random Q output at sigma_1
    t1: int
    steps: int

    @property
    def stage2_ratio(self) -> float:
        """sigma_2 / sigma_crit (< 1: the annealed noise no longer hides Q)."""
        return self.sigma_2 / self.sigma_crit

    @property
    def k2_excess(self) -> float:
        """K2(t1) - log 2 ~ random_output^2 / 8 (nats), the unlearned Q branch's loss above log 2."""
        return self.random_output ** 2 / 8

    @property
    def min_prompt_len(self) -> int:
        """The smallest L with random_output <= RANDOM_OUTPUT_MAX at this sigma_1 (large-L form)."""
        return math.ceil((math.sqrt((1 - self.p0) / 2) * self.sigma_1 / RANDOM_OUTPUT_MAX) ** 2)

    def k2_floor(self) -> float:
        """K2* of the two-scalar fixed point (:func:`.theory.fixed_point`) at the sized lambda."""
        return theory.fixed_point(self.kappa_p, self.kappa_q, self.p0, self.q0, self.l2).k2

    def overrides(self, digits: int = 4) -> dict[str, dict[str, float | int]]:
        """The config values (data., train.) of this sizing, floats to ``digits`` significant digits."""
        r = lambda x: float(f"{x:.{digits}g}")  # noqa: E731
        return {"data": {"d": self.d, "prompt_len": self.prompt_len, "zeta": r(self.zeta), "q_noise_radius": r(self.radius),
                         "p0": self.p0, "q0": self.q0},
                "train": {"l2": r(self.l2), "noise": r(self.noise), "lr_stage1": self.lr_stage1, "lr_stage2": self.lr_stage2,
                          "t1": self.t1, "steps": self.steps}}


def size(d: int, prompt_len: int, zeta: float, radius: float, rho: float, lr_stage1: float = 1.0, lr_stage2: float = 0.1,
         stage1_ratio: float = STAGE1_RATIO, p0: float = 0.2, q0: float = 0.2, t2_times: float = T2_TIMES) -> GateNoiseSizing:
    """The gate-noise sizing of the module docstring (stage 2 of ``t2_times`` relaxation times
    1 / (lr_stage2 lambda)). Raises UserError (one line per problem)
    for inputs outside the regime: d < 2, L < 2, ||zeta||, rho, rates, ratio or t2_times <= 0,
    radius <= 0 or >= sqrt(d) (q_noise per coordinate must stay below ||zeta||), lr_stage2 >= lr_stage1,
    a mixture outside [0, 1], or kappa_Q <= 0."""
    problems = []
    if not (isinstance(d, int) and d >= 2):
        problems.append(f"d={d!r}: must be an integer >= 2 (xor Q)")
    if not (isinstance(prompt_len, int) and prompt_len >= 2):
        problems.append(f"prompt_len={prompt_len!r}: must be an integer >= 2")
    for name, value in (("zeta", zeta), ("rho", rho), ("lr_stage1", lr_stage1), ("lr_stage2", lr_stage2),
                        ("stage1_ratio", stage1_ratio), ("t2_times", t2_times)):
        if not (math.isfinite(value) and value > 0):
            problems.append(f"{name}={value!r}: must be a finite number > 0")
    if not (math.isfinite(radius) and radius > 0) or (isinstance(d, int) and d >= 1 and radius >= math.sqrt(d)):
        problems.append(f"radius={radius!r}: must be in (0, sqrt(d)) (q_noise = radius ||zeta|| / sqrt(d) below ||zeta||)")
    if math.isfinite(lr_stage1) and math.isfinite(lr_stage2) and lr_stage2 >= lr_stage1 > 0:
        problems.append(f"lr_stage2={lr_stage2!r}: must be < lr_stage1 = {lr_stage1!r} (annealing lowers the noise below sigma_crit)")
    if not (0 <= p0 <= 1 and 0 <= q0 <= 1 and p0 + q0 <= 1):
        problems.append(f"p0={p0!r}, q0={q0!r}: need probabilities with p0 + q0 <= 1")
    if problems:
        raise UserError(*problems)
    q_noise = radius * zeta / math.sqrt(d)
    k_q = theory.kappa_q(prompt_len, p0, zeta, q_noise)
    if k_q <= 0:
        raise UserError(f"radius={radius!r}: kappa_Q = {k_q:.3g} <= 0 (Q noise {q_noise:.3g} >= ||zeta|| / {theory.KAPPA_Q_NOISE})")
    l2 = k_q ** 2 / rho
    sigma_crit = SIGMA_CRIT * zeta ** 4 / l2
    sigma_1 = stage1_ratio * sigma_crit
    delta_1 = sigma_1 / (radius * zeta) ** 2
    noise = delta_1 / math.sqrt(lr_stage1 / (2 * l2))
    random_output = math.sqrt((1 - p0) / 2) * math.sqrt(prompt_len - 1) / prompt_len * sigma_1
    steps_of = lambda x: math.ceil(x * (1 - 1e-12))  # noqa: E731  (3 / 0.01 is 300, not 301 by rounding)
    t1 = steps_of(T1_TIMES / (lr_stage1 * l2))
    return GateNoiseSizing(d, prompt_len, zeta, radius, rho, stage1_ratio, lr_stage1, lr_stage2, p0, q0, q_noise, k_q,
                           theory.kappa_p(prompt_len, q0, d), l2, sigma_crit, sigma_1, sigma_1 * math.sqrt(lr_stage2 / lr_stage1),
                           delta_1, noise, random_output, t1, t1 + steps_of(t2_times / (lr_stage2 * l2)))


def zeta_for_l2(d: int, prompt_len: int, radius: float, rho: float, l2: float, p0: float = 0.2) -> float:
    """The ||zeta|| at which kappa_Q^2 / lambda = rho for a chosen lambda: kappa_Q = k ||zeta||^2
    with k = theory.kappa_q(L, p0, 1, radius / sqrt(d)) (kappa_Q / ||zeta||^2 depends on ||zeta||
    only through q_noise / ||zeta|| = radius / sqrt(d)), so ||zeta|| = (rho lambda / k^2)^(1/4)."""
    k = theory.kappa_q(prompt_len, p0, 1.0, radius / math.sqrt(d))
    if not (k > 0 and rho > 0 and l2 > 0):
        raise UserError(f"zeta_for_l2: need kappa_Q > 0, rho > 0 and l2 > 0 (got {k:.3g}, {rho!r}, {l2!r})")
    return (rho * l2 / k ** 2) ** 0.25
