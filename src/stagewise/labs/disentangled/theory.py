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

KAPPA_Q_NOISE = 0.56  # the Q noise's loss of margin per unit q_noise / ||zeta|| (spec section 5)
KAPPA_P_NOISE = 0.8  # the P noise's gain of margin, (1 + 0.8 / sqrt d)^2 (half-normal noise along w*)


def kappa_q(prompt_len: int, p0: float, zeta: float, q_noise: float) -> float:
    """kappa_Q: the mean Q margin per unit of a (V = a (u1 u1^T + u2 u2^T))."""
    return (prompt_len - 1) / prompt_len * (1 - p0) * 0.25 * zeta ** 2 * (1 - KAPPA_Q_NOISE * q_noise / zeta)


def kappa_p(prompt_len: int, q0: float, d: int) -> float:
    """kappa_P: the mean P margin per unit of b (W = b w* w*^T)."""
    return (prompt_len - 1) / prompt_len * (1 - q0) * 0.5 * (1 + KAPPA_P_NOISE / math.sqrt(d)) ** 2
