"""The spectral claim of the lm lab, declared before any run (issue 27): the paper's reading of
its rank-reduction test, "removing small singular directions hurts the early model more than
the late one", against the random-direction baseline. Computed by :mod:`.spectralclaim`
(``stagewise lm rank-curve RUN@E RUN@L ... --claim``).

Declared here, before the acceptance runs: keep fraction p* = :data:`CLAIM_P` = 0.2 of the
singular directions of every selected attention matrix, threshold 0.1 on the per-seed value,
:data:`CLAIM_DRAWS` = 5 random draws by default, the floor :data:`MIN_RANDOM_DAMAGE`.

Quantity, for one run (seed) with an early and a late checkpoint, on the examples E that are
semantic-correct at BOTH checkpoints before any reduction:

    R_c^sel = fraction of E still semantic-correct after keeping k = floor(p* r) directions of
              checkpoint c (c = early, late) chosen by sel = largest | random (mean of the draws)
    D_c^sel = 1 - R_c^sel                                 (the damage)
    rho_c   = D_c^largest / D_c^random                    (the share of the damage of dropping
                                                           80 % of the directions at random that
                                                           dropping only the smallest 80 % does)
    value   = rho_early - rho_late

If which directions are dropped did not matter, rho = 1 at both checkpoints and value = 0; if the
late model were only "more fragile to any removal", both rho stay near 1 (its random damage and
its keep-largest damage grow together) and value ~ 0; if neither model needs its small
directions (keep-largest retains everything), both rho ~ 0 and value ~ 0. The paper's reading
-- the small directions carry more of the early model's answers -- is value > 0. (The
difference in differences (R_late - R_early)^largest - (R_late - R_early)^random is reported
beside it: it is positive whenever the late model is more fragile to random removal, even
when keep-largest changes nothing, so it cannot carry the claim.)
"""

from __future__ import annotations

from .claimspecs import CLAIM_DRAWS, CLAIM_P, CLAIM_THRESHOLD, MIN_RANDOM_DAMAGE, SPECTRAL_SMALL_DIRECTIONS_EARLY

__all__ = ["CLAIM_DRAWS", "CLAIM_P", "CLAIM_THRESHOLD", "MIN_RANDOM_DAMAGE", "SPECTRAL_SMALL_DIRECTIONS_EARLY"]
