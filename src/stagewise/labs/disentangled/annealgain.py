"""The causal accuracy claim against its control as one paired difference over seeds (issue 28).

Per seed s (the same data, initialisation and noise draws in every arm)::

    gain_s(real)    = acc_q(annealed, s) - acc_q(no-anneal, s)        Q-part test accuracy at the end
    gain_s(control) = the same for the shuffled-label controls of seed s
    diff_s          = gain_s(real) - gain_s(control)

``anneal_gain_beyond_control`` (:data:`.claimspecs.ANNEAL_GAIN_BEYOND_CONTROL`) is decided by the
verdict engine (:mod:`stagewise.report.verdicts`, the claim's ``median`` aggregation over the pairs):
it holds when the exact interval of the median diff_s lies above 0, fails when it lies at or below
0, and is inconclusive when it straddles 0 or there are fewer pairs than the claim's ``min_seeds``:
"the claim separates from its control" is then computed, not read off two pass fractions. Several
groups (the cells of ``robustness``) pool their seeds: each (cell, seed) is one pair. The mean
with its percentile bootstrap interval stays in the details (:func:`difference_interval`), as a
description only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...report import verdicts
from ...report.claims import Claim
from ...report.seedstats import bootstrap_interval
from . import claimspecs as cs
from .floor_claims import anneal_gain

MIN_PAIRS = 2
"""The description's bootstrap interval needs at least two paired seeds (the verdict: the claim's ``min_seeds``)."""


def gain_differences(stages: pd.DataFrame, variant: str) -> dict[int, float] | None:
    """seed -> diff_s for one group's ``variant`` (None when the no-anneal twin or the controls
    were not run); seeds with a non-finite gain are left out."""
    real, control = anneal_gain(stages, variant), anneal_gain(stages, variant, control=True)
    if real is None or control is None:
        return None
    ctrl = dict(zip(control[0], control[1]))
    out = {s: float(g - ctrl[s]) for s, g in zip(real[0], real[1]) if s in ctrl}
    return {s: v for s, v in out.items() if np.isfinite(v)}


def gain_beyond_control(stages: pd.DataFrame, variants: Sequence[str]) -> Claim | None:
    """The claim over the (variant, seed) pairs of ``variants`` (one group: ``["baseline"]``; the
    robustness cells: their names); None when no variant has its twin and controls."""
    spec = cs.ANNEAL_GAIN_BEYOND_CONTROL
    found = {v: gain_differences(stages, v) for v in variants}
    pairs = {(v, s): d for v, diffs in found.items() if diffs is not None for s, d in diffs.items()}
    if all(diffs is None for diffs in found.values()):
        return None
    label = (lambda v, s: f"{s}") if len(variants) == 1 else (lambda v, s: f"{v}:{s}")
    listed = ", ".join(f"{label(v, s)}: {d:+.3f}" for (v, s), d in pairs.items())
    decision = verdicts.decide_arm({label(v, s): d for (v, s), d in pairs.items()}, spec.seeds_rule())
    head = f"gain(real) - gain(control) over {len(pairs)} (group, seed) pairs" if len(variants) > 1 else \
        f"gain(real) - gain(control) over {len(pairs)} seed(s)"
    return spec.judged(decision, f"{head}; per {'pair' if len(variants) > 1 else 'seed'}: {listed}")


def difference_interval(stages: pd.DataFrame, variant: str) -> dict[str, float | int] | None:
    """One group's mean diff_s with its 95 % bootstrap interval (summary details; a robustness
    cell's row), None without pairs enough."""
    diffs = gain_differences(stages, variant)
    if not diffs or len(diffs) < MIN_PAIRS:
        return None
    iv = bootstrap_interval(list(diffs.values()))
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n}
