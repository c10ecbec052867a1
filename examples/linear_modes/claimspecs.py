"""The linear-modes lab's declared claims, fixed before any run (importing nothing but the
claims layer, so ``stagewise claims`` lists them without torch).

Half-time t_i: the first step at which mode i's strength reaches s_i / 2 (interpolated
between logged steps); the closed form's is :func:`.theory.theory_half_times`.
"""

from __future__ import annotations

from stagewise.report.claims import ClaimSpec, own, paper

SOURCES = {"saxe2014": "Saxe et al. 2014: A. M. Saxe, J. L. McClelland, S. Ganguli, ICLR 2014, arXiv 1312.6120 "
                       "(exact solutions to the nonlinear dynamics of learning in deep linear neural networks)"}
"""The paper the claims cite (``Lab.sources``): key -> heading."""

ORDER_RATIO = 1.2
"""Each mode's half-time must exceed the previous mode's by this factor (the default's theory: 1.43, 1.82)."""
THEORY_RTOL = 0.1
"""Largest relative distance of a measured half-time from the closed form's (the default's: 0.022)."""

_SOLUTION = "the exact solution for one input-output mode from decoupled initial conditions (a sigmoid, time scale tau / s)"

MODES_IN_ORDER = ClaimSpec(
    id="modes_in_order", statement="the modes are learned one after another, in decreasing order of singular value",
    source=paper("saxe2014", _SOLUTION), quantity="smallest ratio t_{i+1} / t_i of consecutive half-times",
    relation=">=", threshold=ORDER_RATIO,
    control="preset equal-sv (every singular value their mean: all modes reach half strength at the same step, ratio 1)")
ONSET_MATCHES_THEORY = ClaimSpec(
    id="onset_matches_theory", statement="each mode reaches half its singular value when the closed-form sigmoid says",
    source=paper("saxe2014", _SOLUTION), quantity="largest |t_i - t_i(closed form)| / t_i(closed form) over the modes",
    relation="<=", threshold=THEORY_RTOL,
    control="preset large-init (random init at 0.4 s_min: no plateaus, the modes fit together; 0.39 to 1.0 off the closed form)")
CONTROL_FAILS = ClaimSpec(
    id="control_fails", statement="the control trained in the run fails the claim it controls, in every seed",
    source=own("falsifiability: each control group of the run (config.controls)"),
    quantity="fraction of the control's seeds passing its claim (equal-sv: modes_in_order, large-init: onset_matches_theory)",
    relation="<=", threshold=0.0, over="run",
    control="a control that changes nothing (the run itself) passes the claim in every seed, fraction 1")

CLAIMS: tuple[ClaimSpec, ...] = (MODES_IN_ORDER, ONSET_MATCHES_THEORY, CONTROL_FAILS)
CONTROLLED = {"equal-sv": MODES_IN_ORDER, "large-init": ONSET_MATCHES_THEORY}
"""Control group -> the claim it must fail."""
